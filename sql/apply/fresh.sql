-- The e-nodes the chunk's right-hand sides (`cand`) would create (one row per new class,
-- attributed to the lowest match id that builds it), lowest height first. Their children's
-- analyses come apart (sql/apply/fresh_children.sql, each existing child class once); a child
-- created in the same phase has no eclass row yet: the shape check in relsat/engine/shapecheck.py
-- takes it from the lower height. No parameters.
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
ORDER BY height, c.class
