-- Every e-node of the ops the shape check knows (at most three children), with its class's
-- analysis and its children's, for the shape audit in relsat/shapecheck.py. No parameters.
SELECT e.id, e.op, e.p0, e.p1, e.p2, e.p3, e.p4, e.p5, e.arity, e.s,
       k.kind, k.shape, k.shape2,
       a.kind AS a_kind, a.shape AS a_shape, a.shape2 AS a_shape2,
       b.kind AS b_kind, b.shape AS b_shape, b.shape2 AS b_shape2,
       c.kind AS c_kind, c.shape AS c_shape, c.shape2 AS c_shape2
FROM enode e
JOIN eclass k ON k.id = e.class
LEFT JOIN eclass a ON a.id = e.c0
LEFT JOIN eclass b ON b.id = e.c1
LEFT JOIN eclass c ON c.id = e.c2
WHERE (e.arity <= 2
       AND e.op IN ('ewadd', 'ewmul', 'matmul', 'conv2d', 'relu', 'relu6', 'tanh', 'sigmoid',
                    'concat', 'split', 'split_0', 'split_1', 'merge', 'enlarge', 'transpose',
                    'reshape'))
   OR (e.arity = 3 AND e.op IN ('conv2d_bias', 'matmul_bias'))
