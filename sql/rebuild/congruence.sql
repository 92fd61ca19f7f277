-- Congruence: e-nodes stamped $epoch (just re-canonicalized or inserted) that now equal another
-- e-node (same op, parameters and children) in a different class queue the union of the two
-- classes; returns how many pairs were queued. Parameters: $epoch.
DELETE FROM pending;
INSERT INTO pending
SELECT DISTINCT a.class, b.class
FROM enode a
JOIN enode b
  ON a.op = b.op AND a.p0 = b.p0 AND a.p1 = b.p1 AND a.p2 = b.p2 AND a.p3 = b.p3
 AND a.p4 = b.p4 AND a.p5 = b.p5 AND a.s = b.s AND a.arity = b.arity
 AND a.c0 = b.c0 AND a.c1 = b.c1 AND a.c2 = b.c2 AND a.c3 = b.c3
 AND a.c4 = b.c4 AND a.c5 = b.c5 AND a.c6 = b.c6 AND a.c7 = b.c7
WHERE a.stamp = $epoch AND a.class <> b.class
