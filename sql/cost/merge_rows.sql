-- Cost rows gathered from several Parquet files (the view cost_rows, COST_SCHEMA's columns) as
-- one table: one row per (device, key), whatever the files' order. Where some of a key's rows
-- are sound (spread known and at most $max_spread, load at most $max_load or unknown), only
-- those count: a sound re-check written by one writer outvotes the doubtful price another
-- writer still holds. The time is the median of the counted rows' times (writers that timed
-- the same unit on machines of the same identity); the spread the widest of theirs or, if
-- wider, the IQR of those times over their median (writers that disagree make the merged row
-- doubtful, so its next use re-checks it); NULL where a counted row's spread is unknown; the
-- load the highest known.
-- $device: keep only this machine identity's rows; NULL keeps every identity's, never mixed.
-- $max_spread, $max_load (DOUBLE): relsat.cost.stability.Stability's thresholds.
WITH marked AS (
    SELECT *,
           spread IS NOT NULL AND spread <= $max_spread
               AND coalesce(load, 0) <= $max_load AS sound
    FROM cost_rows
    WHERE $device::VARCHAR IS NULL OR device = $device::VARCHAR
), counted AS (
    SELECT *
    FROM marked
    QUALIFY sound OR NOT bool_or(sound) OVER (PARTITION BY device, key)
)
SELECT device,
       key,
       any_value(op) AS op,
       any_value(p0) AS p0,
       any_value(p1) AS p1,
       any_value(p2) AS p2,
       any_value(p3) AS p3,
       any_value(p4) AS p4,
       any_value(p5) AS p5,
       any_value(s) AS s,
       any_value(inputs) AS inputs,
       any_value(output) AS output,
       median(ms) AS ms,
       min(source) AS source,
       CASE WHEN count(spread) < count(*) THEN NULL
            ELSE greatest(
                max(spread),
                coalesce((quantile_cont(ms, 0.75) - quantile_cont(ms, 0.25)) / nullif(median(ms), 0), 0)
            )
       END AS spread,
       max(load) AS load
FROM counted
GROUP BY device, key
ORDER BY device, key
