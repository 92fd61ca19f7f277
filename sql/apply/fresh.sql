-- The e-nodes the chunk's right-hand sides (`cand`) would create (one row per new class,
-- attributed to the lowest match id that builds it), lowest height first, with the analysis of
-- those child classes that already exist (a child created in the same phase has no eclass row yet: the shape check in
-- relsat/shapecheck.py takes it from the lower level). No parameters.
WITH nodes AS (
    SELECT c.class, any_value(c.height) AS height, any_value(c.op) AS op,
           any_value(c.p0) AS p0, any_value(c.p1) AS p1, any_value(c.p2) AS p2,
           any_value(c.p3) AS p3, any_value(c.p4) AS p4, any_value(c.p5) AS p5,
           any_value(c.arity) AS arity, any_value(c.c0) AS c0, any_value(c.c1) AS c1,
           any_value(c.c2) AS c2, any_value(c.c3) AS c3, any_value(c.s) AS s,
           any_value(c.c4) AS c4, any_value(c.c5) AS c5, any_value(c.c6) AS c6,
           any_value(c.c7) AS c7,
           arg_min(m.rule, m.mid) AS rule
    FROM cand c JOIN match m ON m.mid = c.mid
    WHERE c.fresh
    GROUP BY c.class
)
SELECT n.*,
       a.kind AS a_kind, a.shape AS a_shape, a.shape2 AS a_shape2, a.splits AS a_splits,
       a.all_weights AS a_weights,
       b.kind AS b_kind, b.shape AS b_shape, b.shape2 AS b_shape2, b.splits AS b_splits,
       b.all_weights AS b_weights,
       c.kind AS c_kind, c.shape AS c_shape, c.shape2 AS c_shape2, c.splits AS c_splits,
       c.all_weights AS c_weights,
       d.kind AS d_kind, d.shape AS d_shape, d.shape2 AS d_shape2, d.splits AS d_splits,
       d.all_weights AS d_weights,
       e.kind AS e_kind, e.shape AS e_shape, e.shape2 AS e_shape2, e.splits AS e_splits,
       e.all_weights AS e_weights,
       f.kind AS f_kind, f.shape AS f_shape, f.shape2 AS f_shape2, f.splits AS f_splits,
       f.all_weights AS f_weights,
       g.kind AS g_kind, g.shape AS g_shape, g.shape2 AS g_shape2, g.splits AS g_splits,
       g.all_weights AS g_weights,
       h.kind AS h_kind, h.shape AS h_shape, h.shape2 AS h_shape2, h.splits AS h_splits,
       h.all_weights AS h_weights
FROM nodes n
LEFT JOIN eclass a ON a.id = n.c0
LEFT JOIN eclass b ON b.id = n.c1
LEFT JOIN eclass c ON c.id = n.c2
LEFT JOIN eclass d ON d.id = n.c3
LEFT JOIN eclass e ON e.id = n.c4
LEFT JOIN eclass f ON f.id = n.c5
LEFT JOIN eclass g ON g.id = n.c6
LEFT JOIN eclass h ON h.id = n.c7
ORDER BY n.height, n.class
