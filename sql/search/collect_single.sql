-- Whole matches of the single-pattern rules: fresh partial matches of their root pattern nodes.
-- Match ids are numbered in a deterministic order. No parameters.
INSERT INTO match (mid, rule, root0, root1, v, ok, cycle, capped)
SELECT row_number() OVER (ORDER BY p.rule, s.root, s.v0, s.v1, s.v2, s.v3, s.v4, s.v5, s.v6, s.v7,
                                  s.v8, s.v9, s.v10, s.v11) AS mid,
       p.rule, s.root AS root0, -1 AS root1, [s.v0, s.v1, s.v2, s.v3, s.v4, s.v5, s.v6, s.v7, s.v8, s.v9, s.v10, s.v11]
       AS v, true AS ok,
       false AS cycle, false AS capped
FROM sub s
JOIN pnode p ON p.pid = s.pid
WHERE p.is_root AND NOT p.multi AND s.fresh
