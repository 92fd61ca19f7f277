-- Two-output candidates read off the equations of $size: a term equal to a concat of two terms
-- (same class, one of them new at $size) computes both of them at once, split. Rows: the concat,
-- the other term (its root neither a concat, a split piece nor element-wise: merging any two
-- sums or products of the graph would square the e-graph), the concat's axis.
-- Parameters: $size.
SELECT c.id AS cat, u.id AS u, c.p0 AS axis
FROM synth_term n
JOIN synth_term r ON r.id = n.class
JOIN synth_term c ON c.id IN (n.id, r.id) AND c.op = 'concat'
JOIN synth_term u ON u.id IN (n.id, r.id) AND u.id <> c.id
WHERE n.size = $size AND n.id <> n.class
  AND u.op NOT IN ('concat', 'split_0', 'split_1', 'ewadd', 'ewmul', 'ewsub', 'ewdiv', 'ewpow')
ORDER BY c.id, u.id
