-- The new e-nodes of the level with the analysis their signature got from the shape check
-- (table sigtype, filled by relsat/shapecheck.py). No parameters.
INSERT INTO newnode
SELECT f.class, f.op, f.p0, f.p1, f.p2, f.p3, f.p4, f.p5, f.arity, f.c0, f.c1,
       t.kind, t.shape, t.shape2, t.splits, f.a_weights AND f.b_weights, t.valid, f.rule
FROM fresh f
JOIN sigtype t ON t.sig = f.sig;
DELETE FROM sigtype
