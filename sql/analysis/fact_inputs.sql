-- The e-nodes whose facts of values may be new (relsat/engine/facts.py): those stamped $since or
-- later (built or re-canonicalized since the facts were last brought up to date) or reading a
-- class whose facts changed (`fact_changed`), of an operator the analysis knows ($ops), with at
-- most four children of which one has facts (or none: a scalar). No joins: most calls find few,
-- and the children's shapes and facts are read for those. Parameters: $since, $ops.
SELECT class, op, p0, p1, p2, p3, p4, p5, s, arity, c0, c1, c2, c3
FROM enode
WHERE (stamp >= $since OR c0 IN (SELECT class FROM fact_changed)
       OR c1 IN (SELECT class FROM fact_changed) OR c2 IN (SELECT class FROM fact_changed)
       OR c3 IN (SELECT class FROM fact_changed))
  AND NOT filtered AND arity <= 4 AND list_contains($ops, op)
  AND (arity = 0 OR c0 IN (SELECT class FROM fact) OR c1 IN (SELECT class FROM fact)
       OR c2 IN (SELECT class FROM fact) OR c3 IN (SELECT class FROM fact))
