-- The same e-node stored twice (the hash-cons is broken).
SELECT op, p0, p1, p2, p3, p4, p5, s, arity, c0, c1, c2, c3, c4, c5, c6, c7, class, count(*)
FROM enode
GROUP BY ALL
HAVING count(*) > 1
