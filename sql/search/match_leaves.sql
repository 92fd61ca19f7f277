-- Match every pattern node whose children are all variables (height 0), of all rules of the
-- phase at once ($multi: the multi-pattern rules, else the single-pattern ones): e-nodes with the
-- node's op, literals and arity; child j binds variable slot x_j (a slot bound twice must see the
-- same class); e-nodes on the cycle filter list are ignored. Fresh (semi-naive) if the e-node has
-- stamp >= $since (or the rule's own start after a backoff ban, `pnode.since`); a rule banned at
-- $iteration is not searched. Only e-nodes born before $until take part (a phase cut short by the
-- e-node limit is run again over the e-graph it saw). A whole match of a single-pattern rule is
-- kept only when fresh (the phase applies no other). Parameters: $multi, $since, $until,
-- $iteration.
INSERT INTO sub
SELECT p.pid, e.class, bool_or(e.stamp >= coalesce(p.since, $since)),
       CASE WHEN p.jslot < 0 THEN 0 WHEN p.jslot = p.x0 THEN e.c0 WHEN p.jslot = p.x1 THEN e.c1
            WHEN p.jslot = p.x2 THEN e.c2 WHEN p.jslot = p.x3 THEN e.c3
            WHEN p.jslot = p.x4 THEN e.c4 WHEN p.jslot = p.x5 THEN e.c5
            WHEN p.jslot = p.x6 THEN e.c6 WHEN p.jslot = p.x7 THEN e.c7 ELSE 0 END,
       slot_value(p.w0, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk),
       slot_value(p.w1, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk),
       slot_value(p.w2, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk),
       slot_value(p.w3, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk),
       slot_value(p.w4, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk),
       slot_value(p.w5, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk),
       slot_value(p.w6, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk),
       slot_value(p.w7, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk),
       slot_value(p.w8, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk),
       slot_value(p.w9, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk),
       slot_value(p.w10, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk),
       slot_value(p.w11, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk)
FROM pnode p
JOIN enode_either e
  ON e.op = p.op AND e.arity = p.arity AND (p.comm OR NOT e.turned)
 AND (p.y0 >= 0 OR e.p0 = p.l0) AND (p.y1 >= 0 OR e.p1 = p.l1)
 AND (p.y2 >= 0 OR e.p2 = p.l2) AND (p.y3 >= 0 OR e.p3 = p.l3)
     AND (p.ys >= 0 OR p.ls IS NULL OR e.s = p.ls)
WHERE p.height = 0 AND p.multi = $multi AND p.banned_until <= $iteration
  AND NOT e.filtered AND e.born < $until
  -- a slot at two children (`dup`): child j is the class of the first child bound to its slot
  AND (NOT p.dup OR repeats_agree(p.x0, p.x1, p.x2, p.x3, p.x4, p.x5, p.x6, p.x7,
                                    e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7))
  AND (p.multi OR NOT p.is_root OR e.stamp >= coalesce(p.since, $since))
GROUP BY ALL
