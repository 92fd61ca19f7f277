-- The e-nodes the chunk's right-hand sides (`cand`) would create (one row per new class,
-- attributed to the lowest match id that builds it), lowest height first, with the analysis of
-- those child classes that already exist (a child created in the same phase has no eclass row yet: the shape check in
-- relsat/shapecheck.py takes it from the lower level). No parameters.
WITH f AS (
    SELECT c.class, any_value(c.height) AS height, any_value(c.op) AS op,
           any_value(c.p0) AS p0, any_value(c.p1) AS p1, any_value(c.p2) AS p2,
           any_value(c.p3) AS p3, any_value(c.p4) AS p4, any_value(c.p5) AS p5,
           any_value(c.arity) AS arity, any_value(c.c0) AS c0, any_value(c.c1) AS c1,
           any_value(c.c2) AS c2, any_value(c.c3) AS c3, any_value(c.s) AS s,
           arg_min(m.rule, m.mid) AS rule
    FROM cand c JOIN match m ON m.mid = c.mid
    WHERE c.fresh
    GROUP BY c.class
)
SELECT f.*,
       a.kind AS a_kind, a.shape AS a_shape, a.shape2 AS a_shape2, a.splits AS a_splits,
       a.all_weights AS a_weights,
       b.kind AS b_kind, b.shape AS b_shape, b.shape2 AS b_shape2, b.splits AS b_splits,
       b.all_weights AS b_weights,
       c.kind AS c_kind, c.shape AS c_shape, c.shape2 AS c_shape2, c.splits AS c_splits,
       c.all_weights AS c_weights,
       d.kind AS d_kind, d.shape AS d_shape, d.shape2 AS d_shape2, d.splits AS d_splits,
       d.all_weights AS d_weights
FROM f
LEFT JOIN eclass a ON a.id = f.c0
LEFT JOIN eclass b ON b.id = f.c1
LEFT JOIN eclass c ON c.id = f.c2
LEFT JOIN eclass d ON d.id = f.c3
ORDER BY f.height, f.class
