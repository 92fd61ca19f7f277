-- The two-output candidates of $size (TASO's multi-output graphs): a representative `u` whose
-- two split pieces on one axis are terms of $size, each equal (same class) to a smaller term
-- that is no split piece: then those two terms can be computed as one `u` and split. A `u` that
-- is itself a concat is left out (splitting a concat gives its inputs back: nothing merged).
-- Parameters: $size.
SELECT u.id AS u, s0.p0 AS axis, s0.id AS piece0, s1.id AS piece1, r0.id AS rep0, r1.id AS rep1
FROM synth_term s0
JOIN synth_term s1 ON s1.c0 = s0.c0 AND s1.p0 = s0.p0 AND s1.op = 'split_1'
JOIN synth_term u ON u.id = s0.c0
JOIN synth_term r0 ON r0.id = s0.class
JOIN synth_term r1 ON r1.id = s1.class
WHERE s0.size = $size AND s0.op = 'split_0'
  AND u.op <> 'concat'
  AND r0.id <> s0.id AND r1.id <> s1.id
  AND r0.op NOT IN ('split_0', 'split_1') AND r1.op NOT IN ('split_0', 'split_1')
ORDER BY u.id, s0.p0
