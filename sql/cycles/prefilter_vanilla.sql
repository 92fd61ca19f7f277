-- The cycle pre-filter in TENSAT's "vanilla" mode (paper Table 6, for the ablation): every match
-- computes the full descendant set of each of its variable classes on its own, with no pruning
-- and nothing shared between matches. Same verdicts as the efficient mode. Only matches $lo..$hi
-- (match ids) are looked at. Parameters: $lo, $hi.
UPDATE match SET ok = false, cycle = true
WHERE mid IN (
    WITH RECURSIVE walk(mid, seed, cls) AS (
        SELECT m.mid, v.cls, v.cls
        FROM match m, unnest(m.v) AS v(cls)
        WHERE m.ok AND m.mid BETWEEN $lo AND $hi AND v.cls IS NOT NULL
        UNION
        SELECT w.mid, w.seed, e.child
        FROM walk w JOIN cedge e ON e.class = w.cls
    )
    SELECT DISTINCT w.mid
    FROM walk w JOIN match m ON m.mid = w.mid
    WHERE w.cls = m.root0 OR w.cls = m.root1
)
