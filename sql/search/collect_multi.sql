-- Whole matches of the multi-pattern rules: one join of the two patterns' partial matches on
-- their first shared variable (jk; 0 for rules that share none, i.e. a cross product), the other
-- shared variables agreeing; never a match paired with itself (same root class), and for
-- symmetric rules each unordered pair once. A pair is new if either side is fresh.
-- No parameters.
INSERT INTO match (mid, rule, root0, root1, v, ok, cycle, capped)
WITH pairs AS (
    SELECT DISTINCT r.rule, a.root AS root0, b.root AS root1,
           [coalesce(a.v0, b.v0), coalesce(a.v1, b.v1), coalesce(a.v2, b.v2),
            coalesce(a.v3, b.v3), coalesce(a.v4, b.v4), coalesce(a.v5, b.v5),
            coalesce(a.v6, b.v6), coalesce(a.v7, b.v7),
            coalesce(a.v8, b.v8), coalesce(a.v9, b.v9),
            coalesce(a.v10, b.v10), coalesce(a.v11, b.v11)] AS v
    FROM rule_info r
    JOIN sub a ON a.pid = r.pid0
    JOIN sub b ON b.pid = r.pid1 AND b.jk = a.jk
    WHERE r.multi AND (a.fresh OR b.fresh)
      AND a.root <> b.root AND (NOT r.symmetric_pairs OR a.root < b.root)
      AND (a.v0 IS NULL OR b.v0 IS NULL OR a.v0 = b.v0)
      AND (a.v1 IS NULL OR b.v1 IS NULL OR a.v1 = b.v1)
      AND (a.v2 IS NULL OR b.v2 IS NULL OR a.v2 = b.v2)
      AND (a.v3 IS NULL OR b.v3 IS NULL OR a.v3 = b.v3)
      AND (a.v4 IS NULL OR b.v4 IS NULL OR a.v4 = b.v4)
      AND (a.v5 IS NULL OR b.v5 IS NULL OR a.v5 = b.v5)
      AND (a.v6 IS NULL OR b.v6 IS NULL OR a.v6 = b.v6)
      AND (a.v7 IS NULL OR b.v7 IS NULL OR a.v7 = b.v7)
      AND (a.v8 IS NULL OR b.v8 IS NULL OR a.v8 = b.v8)
      AND (a.v9 IS NULL OR b.v9 IS NULL OR a.v9 = b.v9)
      AND (a.v10 IS NULL OR b.v10 IS NULL OR a.v10 = b.v10)
      AND (a.v11 IS NULL OR b.v11 IS NULL OR a.v11 = b.v11)
)
SELECT row_number() OVER (ORDER BY rule, root0, root1, v) AS mid, rule, root0, root1, v, true,
       false, false
FROM pairs
