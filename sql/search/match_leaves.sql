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
       CASE p.w0 WHEN -1 THEN NULL WHEN 0 THEN e.c0 WHEN 1 THEN e.c1 WHEN 2 THEN e.c2 WHEN 3 THEN e.c3 WHEN 4 THEN e.c4
                WHEN 5 THEN e.c5 WHEN 6 THEN e.c6 WHEN 7 THEN e.c7 WHEN 8 THEN e.p0 WHEN 9 THEN e.p1 WHEN 10 THEN e.p2 WHEN 11 THEN e.p3 ELSE e.sk END,
       CASE p.w1 WHEN -1 THEN NULL WHEN 0 THEN e.c0 WHEN 1 THEN e.c1 WHEN 2 THEN e.c2 WHEN 3 THEN e.c3 WHEN 4 THEN e.c4
                WHEN 5 THEN e.c5 WHEN 6 THEN e.c6 WHEN 7 THEN e.c7 WHEN 8 THEN e.p0 WHEN 9 THEN e.p1 WHEN 10 THEN e.p2 WHEN 11 THEN e.p3 ELSE e.sk END,
       CASE p.w2 WHEN -1 THEN NULL WHEN 0 THEN e.c0 WHEN 1 THEN e.c1 WHEN 2 THEN e.c2 WHEN 3 THEN e.c3 WHEN 4 THEN e.c4
                WHEN 5 THEN e.c5 WHEN 6 THEN e.c6 WHEN 7 THEN e.c7 WHEN 8 THEN e.p0 WHEN 9 THEN e.p1 WHEN 10 THEN e.p2 WHEN 11 THEN e.p3 ELSE e.sk END,
       CASE p.w3 WHEN -1 THEN NULL WHEN 0 THEN e.c0 WHEN 1 THEN e.c1 WHEN 2 THEN e.c2 WHEN 3 THEN e.c3 WHEN 4 THEN e.c4
                WHEN 5 THEN e.c5 WHEN 6 THEN e.c6 WHEN 7 THEN e.c7 WHEN 8 THEN e.p0 WHEN 9 THEN e.p1 WHEN 10 THEN e.p2 WHEN 11 THEN e.p3 ELSE e.sk END,
       CASE p.w4 WHEN -1 THEN NULL WHEN 0 THEN e.c0 WHEN 1 THEN e.c1 WHEN 2 THEN e.c2 WHEN 3 THEN e.c3 WHEN 4 THEN e.c4
                WHEN 5 THEN e.c5 WHEN 6 THEN e.c6 WHEN 7 THEN e.c7 WHEN 8 THEN e.p0 WHEN 9 THEN e.p1 WHEN 10 THEN e.p2 WHEN 11 THEN e.p3 ELSE e.sk END,
       CASE p.w5 WHEN -1 THEN NULL WHEN 0 THEN e.c0 WHEN 1 THEN e.c1 WHEN 2 THEN e.c2 WHEN 3 THEN e.c3 WHEN 4 THEN e.c4
                WHEN 5 THEN e.c5 WHEN 6 THEN e.c6 WHEN 7 THEN e.c7 WHEN 8 THEN e.p0 WHEN 9 THEN e.p1 WHEN 10 THEN e.p2 WHEN 11 THEN e.p3 ELSE e.sk END,
       CASE p.w6 WHEN -1 THEN NULL WHEN 0 THEN e.c0 WHEN 1 THEN e.c1 WHEN 2 THEN e.c2 WHEN 3 THEN e.c3 WHEN 4 THEN e.c4
                WHEN 5 THEN e.c5 WHEN 6 THEN e.c6 WHEN 7 THEN e.c7 WHEN 8 THEN e.p0 WHEN 9 THEN e.p1 WHEN 10 THEN e.p2 WHEN 11 THEN e.p3 ELSE e.sk END,
       CASE p.w7 WHEN -1 THEN NULL WHEN 0 THEN e.c0 WHEN 1 THEN e.c1 WHEN 2 THEN e.c2 WHEN 3 THEN e.c3 WHEN 4 THEN e.c4
                WHEN 5 THEN e.c5 WHEN 6 THEN e.c6 WHEN 7 THEN e.c7 WHEN 8 THEN e.p0 WHEN 9 THEN e.p1 WHEN 10 THEN e.p2 WHEN 11 THEN e.p3 ELSE e.sk END,
       CASE p.w8 WHEN -1 THEN NULL WHEN 0 THEN e.c0 WHEN 1 THEN e.c1 WHEN 2 THEN e.c2 WHEN 3 THEN e.c3 WHEN 4 THEN e.c4
                WHEN 5 THEN e.c5 WHEN 6 THEN e.c6 WHEN 7 THEN e.c7 WHEN 8 THEN e.p0 WHEN 9 THEN e.p1 WHEN 10 THEN e.p2 WHEN 11 THEN e.p3 ELSE e.sk END,
       CASE p.w9 WHEN -1 THEN NULL WHEN 0 THEN e.c0 WHEN 1 THEN e.c1 WHEN 2 THEN e.c2 WHEN 3 THEN e.c3 WHEN 4 THEN e.c4
                WHEN 5 THEN e.c5 WHEN 6 THEN e.c6 WHEN 7 THEN e.c7 WHEN 8 THEN e.p0 WHEN 9 THEN e.p1 WHEN 10 THEN e.p2 WHEN 11 THEN e.p3 ELSE e.sk END,
       CASE p.w10 WHEN -1 THEN NULL WHEN 0 THEN e.c0 WHEN 1 THEN e.c1 WHEN 2 THEN e.c2 WHEN 3 THEN e.c3 WHEN 4 THEN e.c4
                WHEN 5 THEN e.c5 WHEN 6 THEN e.c6 WHEN 7 THEN e.c7 WHEN 8 THEN e.p0 WHEN 9 THEN e.p1 WHEN 10 THEN e.p2 WHEN 11 THEN e.p3 ELSE e.sk END,
       CASE p.w11 WHEN -1 THEN NULL WHEN 0 THEN e.c0 WHEN 1 THEN e.c1 WHEN 2 THEN e.c2 WHEN 3 THEN e.c3 WHEN 4 THEN e.c4
                WHEN 5 THEN e.c5 WHEN 6 THEN e.c6 WHEN 7 THEN e.c7 WHEN 8 THEN e.p0 WHEN 9 THEN e.p1 WHEN 10 THEN e.p2 WHEN 11 THEN e.p3 ELSE e.sk END
FROM pnode p
JOIN enode_either e
  ON e.op = p.op AND e.arity = p.arity AND (p.comm OR NOT e.turned)
 AND (p.y0 >= 0 OR e.p0 = p.l0) AND (p.y1 >= 0 OR e.p1 = p.l1)
 AND (p.y2 >= 0 OR e.p2 = p.l2) AND (p.y3 >= 0 OR e.p3 = p.l3)
     AND (p.ys >= 0 OR p.ls IS NULL OR e.s = p.ls)
WHERE p.height = 0 AND p.multi = $multi AND p.banned_until <= $iteration
  AND NOT e.filtered AND e.born < $until
  -- a slot at two children (`dup`): child j is the class of the first child bound to its slot
  AND (NOT p.dup
       OR (p.x1 < 0 OR e.c1 = CASE p.x1 WHEN p.x0 THEN e.c0 ELSE e.c1 END)
          AND (p.x2 < 0 OR e.c2 = CASE p.x2 WHEN p.x0 THEN e.c0 WHEN p.x1 THEN e.c1 ELSE e.c2 END)
          AND (p.x3 < 0 OR e.c3 = CASE p.x3 WHEN p.x0 THEN e.c0 WHEN p.x1 THEN e.c1 WHEN p.x2 THEN e.c2 ELSE e.c3 END)
          AND (p.x4 < 0 OR e.c4 = CASE p.x4 WHEN p.x0 THEN e.c0 WHEN p.x1 THEN e.c1 WHEN p.x2 THEN e.c2 WHEN p.x3 THEN e.c3 ELSE e.c4 END)
          AND (p.x5 < 0 OR e.c5 = CASE p.x5 WHEN p.x0 THEN e.c0 WHEN p.x1 THEN e.c1 WHEN p.x2 THEN e.c2 WHEN p.x3 THEN e.c3 WHEN p.x4 THEN e.c4 ELSE e.c5 END)
          AND (p.x6 < 0 OR e.c6 = CASE p.x6 WHEN p.x0 THEN e.c0 WHEN p.x1 THEN e.c1 WHEN p.x2 THEN e.c2 WHEN p.x3 THEN e.c3 WHEN p.x4 THEN e.c4 WHEN p.x5 THEN e.c5 ELSE e.c6 END)
          AND (p.x7 < 0 OR e.c7 = CASE p.x7 WHEN p.x0 THEN e.c0 WHEN p.x1 THEN e.c1 WHEN p.x2 THEN e.c2 WHEN p.x3 THEN e.c3 WHEN p.x4 THEN e.c4 WHEN p.x5 THEN e.c5 WHEN p.x6 THEN e.c6 ELSE e.c7 END))
  AND (p.multi OR NOT p.is_root OR e.stamp >= coalesce(p.since, $since))
GROUP BY ALL
