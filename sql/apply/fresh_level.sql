-- The new e-nodes of height $h (one row per new class, built first by the lowest match id), with
-- the analysis of their child classes (existing ones from eclass, new ones from newnode), for
-- the shape check in relsat/shapecheck.py. Parameters: $h.
WITH f AS (
    SELECT c.class, any_value(c.op) AS op,
           any_value(c.p0) AS p0, any_value(c.p1) AS p1, any_value(c.p2) AS p2,
           any_value(c.p3) AS p3, any_value(c.p4) AS p4, any_value(c.p5) AS p5,
           any_value(c.arity) AS arity, any_value(c.c0) AS c0, any_value(c.c1) AS c1,
           arg_min(m.rule, m.mid) AS rule
    FROM cand c JOIN match m ON m.mid = c.mid
    WHERE c.fresh AND c.height = $h
    GROUP BY c.class
), known AS (
    SELECT id, kind, shape, shape2, splits, all_weights, true AS valid FROM eclass
    UNION ALL
    SELECT class, kind, shape, shape2, splits, all_weights, valid FROM newnode
)
SELECT f.*, a.kind AS a_kind, a.shape AS a_shape, a.shape2 AS a_shape2, a.splits AS a_splits,
       a.all_weights AS a_weights, a.valid AS a_valid,
       b.kind AS b_kind, b.shape AS b_shape, b.shape2 AS b_shape2, b.splits AS b_splits,
       b.all_weights AS b_weights, b.valid AS b_valid
FROM f
LEFT JOIN known a ON a.id = f.c0
LEFT JOIN known b ON b.id = f.c1
ORDER BY f.class
