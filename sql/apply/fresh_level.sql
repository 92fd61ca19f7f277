-- The new e-nodes of height $h (one row per new class, attributed to the lowest match id that
-- builds it), with the analysis of their child classes (existing ones from eclass, new ones from
-- newnode), numbered by *type signature*: nodes with the same op, parameters and child types
-- share a signature, so the shape check (relsat/shapecheck.py) runs once per signature.
-- Parameters: $h.
DELETE FROM fresh;
INSERT INTO fresh
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
SELECT f.*, a.kind, a.shape, a.shape2, a.splits, coalesce(a.all_weights, false),
       coalesce(a.valid, false), b.kind, b.shape, b.shape2, b.splits,
       coalesce(b.all_weights, true), coalesce(b.valid, f.arity < 2),
       dense_rank() OVER (ORDER BY f.op, f.p0, f.p1, f.p2, f.p3, f.p4, f.p5, f.arity,
                          a.kind, a.shape, a.shape2, a.splits, a.valid,
                          b.kind, b.shape, b.shape2, b.splits, b.valid)
FROM f
LEFT JOIN known a ON a.id = f.c0
LEFT JOIN known b ON b.id = f.c1;
SELECT sig, any_value(op) AS op, any_value(arity) AS arity,
       any_value(p0) AS p0, any_value(p1) AS p1, any_value(p2) AS p2, any_value(p3) AS p3,
       any_value(p4) AS p4, any_value(p5) AS p5,
       any_value(a_kind) AS a_kind, any_value(a_shape) AS a_shape,
       any_value(a_shape2) AS a_shape2, any_value(a_splits) AS a_splits,
       any_value(a_valid) AS a_valid,
       any_value(b_kind) AS b_kind, any_value(b_shape) AS b_shape,
       any_value(b_shape2) AS b_shape2, any_value(b_splits) AS b_splits,
       any_value(b_valid) AS b_valid
FROM fresh
GROUP BY sig
ORDER BY sig
