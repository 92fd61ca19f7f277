-- The e-nodes whose facts of values may be new (relsat/engine/facts.py): those stamped $epoch
-- (built or re-canonicalized by the phase) or reading a class whose facts changed
-- (`fact_changed`), of an operator the analysis knows ($ops), with at most four children of
-- which one has facts (or none: a scalar). With the shapes and facts the transfer reads.
-- Parameters: $epoch, $ops.
SELECT e.class, e.op, e.p0, e.p1, e.p2, e.p3, e.p4, e.p5, e.s, e.arity, e.c0, e.c1,
       k.shape AS out,
       a.shape AS a_shape, b.shape AS b_shape, c.shape AS c_shape, d.shape AS d_shape,
       fa.lo AS a_lo, fa.hi AS a_hi, fa.halves AS a_halves, fa.pairs AS a_pairs,
       fb.lo AS b_lo, fb.hi AS b_hi, fb.halves AS b_halves, fb.pairs AS b_pairs,
       fc.lo AS c_lo, fc.hi AS c_hi, fc.halves AS c_halves, fc.pairs AS c_pairs,
       fd.lo AS d_lo, fd.hi AS d_hi, fd.halves AS d_halves, fd.pairs AS d_pairs
FROM enode e
JOIN eclass k ON k.id = e.class
LEFT JOIN eclass a ON a.id = e.c0
LEFT JOIN eclass b ON b.id = e.c1
LEFT JOIN eclass c ON c.id = e.c2
LEFT JOIN eclass d ON d.id = e.c3
LEFT JOIN fact fa ON fa.class = e.c0
LEFT JOIN fact fb ON fb.class = e.c1
LEFT JOIN fact fc ON fc.class = e.c2
LEFT JOIN fact fd ON fd.class = e.c3
WHERE NOT e.filtered AND e.arity <= 4 AND list_contains($ops, e.op)
  AND (e.arity = 0 OR fa.class IS NOT NULL OR fb.class IS NOT NULL
       OR fc.class IS NOT NULL OR fd.class IS NOT NULL)
  AND (e.stamp = $epoch
       OR e.c0 IN (SELECT class FROM fact_changed) OR e.c1 IN (SELECT class FROM fact_changed)
       OR e.c2 IN (SELECT class FROM fact_changed) OR e.c3 IN (SELECT class FROM fact_changed))
