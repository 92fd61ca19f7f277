-- Cost rows gathered from several Parquet files (the view cost_rows, COST_SCHEMA's columns) as
-- one table: one row per (device, key), its time the median of the times stored for it (writers
-- that timed the same unit on machines of the same identity), whatever the files' order.
-- $device: keep only this machine identity's rows; NULL keeps every identity's, never mixed.
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
       min(source) AS source
FROM cost_rows
WHERE $device::VARCHAR IS NULL OR device = $device::VARCHAR
GROUP BY device, key
ORDER BY device, key
