-- Match every pattern node whose children are all variables (height 0), of all rules of the
-- phase at once ($multi: the multi-pattern rules, else the single-pattern ones): e-nodes with the
-- node's op, literals and arity; child j binds variable slot x_j (a slot bound twice must see the
-- same class); e-nodes on the cycle filter list are ignored. Fresh (semi-naive) if the e-node has
-- stamp >= $since. Parameters: $multi, $since.
INSERT INTO sub
SELECT p.pid, e.class, bool_or(e.stamp >= $since),
       CASE p.jslot WHEN p.x0 THEN e.c0 WHEN p.x1 THEN e.c1 ELSE 0 END,
       CASE 0 WHEN p.x0 THEN e.c0 WHEN p.x1 THEN e.c1 END,
       CASE 1 WHEN p.x0 THEN e.c0 WHEN p.x1 THEN e.c1 END,
       CASE 2 WHEN p.x0 THEN e.c0 WHEN p.x1 THEN e.c1 END,
       CASE 3 WHEN p.x0 THEN e.c0 WHEN p.x1 THEN e.c1 END
FROM pnode p
JOIN enode e
  ON e.op = p.op AND e.p0 = p.l0 AND e.p1 = p.l1 AND e.p2 = p.l2 AND e.p3 = p.l3
 AND e.arity = p.arity
WHERE p.height = 0 AND p.multi = $multi AND (p.x0 <> p.x1 OR e.c0 = e.c1) AND NOT e.filtered
GROUP BY ALL
