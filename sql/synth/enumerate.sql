-- The terms of $size operators not built yet: each operator template applied to representative
-- terms whose sizes add up to $size - 1 and whose shapes fit the template's kind (the graph
-- builder checks the rest). A convolution's weight is a weight term, its input is not; enlarge
-- pads a weight to the kernel of a weight variable of another size (only its shape matters).
-- A split piece splits a term with a concat boundary recorded on its axis (a concat, or an
-- operator over one: TASO's multi-output graphs); merge takes a weight that is no merge. A rank-0
-- constant takes part only beside a tensor; a `broadcast` operator's operands broadcast (NumPy's
-- rule, dims compared from the last).
-- Parameters: $size.
WITH rep AS (
    SELECT id, size, op, p0, shape, splits, weight, len(shape) AS rank
    FROM synth_term WHERE id = class
)
SELECT o.op, o.p0, o.p1, o.p2, o.p3, a.id AS c0, NULL::BIGINT AS c1, a.weight
FROM synth_op o
JOIN rep a ON a.size = $size - 1
WHERE o.arity = 1
  AND a.rank > 0
  AND CASE o.kind
    WHEN 'unary' THEN TRUE
    WHEN 'split' THEN len(a.splits[o.p0 + 1]) > 0
    WHEN 'merge' THEN a.weight AND a.rank = 4 AND a.op <> 'merge'
    ELSE FALSE
  END
UNION ALL
SELECT o.op, o.p0, o.p1, o.p2, o.p3, a.id AS c0, b.id AS c1, a.weight AND b.weight
FROM synth_op o
JOIN rep a ON TRUE
JOIN rep b ON a.size + b.size = $size - 1
WHERE o.arity = 2
  AND CASE o.kind
    WHEN 'same' THEN (a.shape = b.shape AND a.rank > 0) OR (a.rank = 0) <> (b.rank = 0)
    WHEN 'broadcast' THEN (a.rank > 0 OR b.rank > 0) AND list_bool_and(list_transform(
        list_zip(list_reverse(a.shape), list_reverse(b.shape)),
        lambda p: p[1] IS NULL OR p[2] IS NULL OR p[1] = p[2] OR p[1] = 1 OR p[2] = 1))
    WHEN 'matmul' THEN a.rank = 2 AND b.rank = 2 AND a.shape[2] = b.shape[1]
    WHEN 'conv' THEN a.rank = 4 AND b.rank = 4 AND a.shape[2] % b.shape[2] = 0
        AND NOT a.weight AND b.weight
    WHEN 'concat' THEN a.rank = o.p1 AND b.rank = o.p1
        AND a.shape[1:o.p0] = b.shape[1:o.p0] AND a.shape[o.p0 + 2:] = b.shape[o.p0 + 2:]
    WHEN 'enlarge' THEN a.rank = 4 AND b.rank = 4 AND a.weight AND b.op = 'var' AND b.weight
        AND a.shape[3] <= b.shape[3] AND a.shape[4] <= b.shape[4] AND a.shape <> b.shape
    ELSE FALSE
  END
ORDER BY o.op, o.p0, o.p1, o.p2, o.p3, c0, c1
