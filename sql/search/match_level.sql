-- Match every pattern node of height $h >= 1, of all rules of the phase at once: an e-node with
-- the node's op, literals and arity whose sub-pattern children (lower heights, already in `sub`)
-- match its child classes. The bindings of the node's own variable children (o) and of its
-- sub-patterns (a: the deep one, b and d: up to two others, at any child positions) are merged
-- per slot and must agree. Fresh if any e-node in it is.
-- Only e-nodes born before $until take part, banned rules are not searched, a rule's own start
-- replaces $since after a ban, whole matches of single-pattern rules are kept only when fresh
-- (see match_leaves.sql).
-- Parameters: $h, $multi, $since, $until, $iteration.
INSERT INTO sub
WITH m AS (
    SELECT p.pid, p.jslot, e.class AS root, p.is_root AND NOT p.multi AS lone,
           e.stamp >= coalesce(p.since, $since) OR a.fresh OR coalesce(b.fresh, false)
               OR coalesce(d.fresh, false) AS fresh,
           slot_value(p.w0, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk) AS o0,
           slot_value(p.w1, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk) AS o1,
           slot_value(p.w2, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk) AS o2,
           slot_value(p.w3, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk) AS o3,
           slot_value(p.w4, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk) AS o4,
           slot_value(p.w5, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk) AS o5,
           slot_value(p.w6, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk) AS o6,
           slot_value(p.w7, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk) AS o7,
           slot_value(p.w8, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk) AS o8,
           slot_value(p.w9, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk) AS o9,
           slot_value(p.w10, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk) AS o10,
           slot_value(p.w11, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7, e.p0, e.p1, e.p2, e.p3, e.sk) AS o11,
           a.v0 AS a0, a.v1 AS a1, a.v2 AS a2, a.v3 AS a3, a.v4 AS a4, a.v5 AS a5,
           a.v6 AS a6, a.v7 AS a7, a.v8 AS a8, a.v9 AS a9, a.v10 AS a10, a.v11 AS a11,
           b.v0 AS b0, b.v1 AS b1, b.v2 AS b2, b.v3 AS b3, b.v4 AS b4, b.v5 AS b5,
           b.v6 AS b6, b.v7 AS b7, b.v8 AS b8, b.v9 AS b9, b.v10 AS b10, b.v11 AS b11,
           d.v0 AS d0, d.v1 AS d1, d.v2 AS d2, d.v3 AS d3, d.v4 AS d4, d.v5 AS d5,
           d.v6 AS d6, d.v7 AS d7, d.v8 AS d8, d.v9 AS d9, d.v10 AS d10, d.v11 AS d11
    FROM pnode p
    JOIN enode_either e
      ON e.op = p.op AND e.arity = p.arity AND (p.comm OR NOT e.turned)
     AND (p.y0 >= 0 OR e.p0 = p.l0) AND (p.y1 >= 0 OR e.p1 = p.l1)
     AND (p.y2 >= 0 OR e.p2 = p.l2) AND (p.y3 >= 0 OR e.p3 = p.l3)
     AND (p.ys >= 0 OR p.ls IS NULL OR e.s = p.ls)
    JOIN sub a ON a.pid = p.dpid AND a.root = child_at(p.dpos, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7)
    LEFT JOIN sub b ON b.pid = p.spid AND b.root = child_at(p.spos, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7)
    LEFT JOIN sub d ON d.pid = p.tpid AND d.root = child_at(p.tpos, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7)
    WHERE p.height = $h AND p.multi = $multi AND p.banned_until <= $iteration
      AND NOT e.filtered AND e.born < $until
      AND (p.spid < 0 OR b.pid IS NOT NULL) AND (p.tpid < 0 OR d.pid IS NOT NULL)
      -- a slot at two children (`dup`): child j is the class of the first child bound to its slot
      AND (NOT p.dup OR repeats_agree(p.x0, p.x1, p.x2, p.x3, p.x4, p.x5, p.x6, p.x7,
                                        e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7))
), merged AS (
    SELECT pid, jslot, root, lone, fresh,
           coalesce(o0, a0, b0, d0) AS v0, coalesce(o1, a1, b1, d1) AS v1,
           coalesce(o2, a2, b2, d2) AS v2, coalesce(o3, a3, b3, d3) AS v3,
           coalesce(o4, a4, b4, d4) AS v4, coalesce(o5, a5, b5, d5) AS v5,
           coalesce(o6, a6, b6, d6) AS v6, coalesce(o7, a7, b7, d7) AS v7,
           coalesce(o8, a8, b8, d8) AS v8, coalesce(o9, a9, b9, d9) AS v9,
           coalesce(o10, a10, b10, d10) AS v10, coalesce(o11, a11, b11, d11) AS v11,
           (a0 IS NULL OR o0 IS NULL OR a0 = o0) AND (b0 IS NULL OR b0 = coalesce(o0, a0, b0))
       AND (d0 IS NULL OR d0 = coalesce(o0, a0, b0, d0))
       AND (a1 IS NULL OR o1 IS NULL OR a1 = o1) AND (b1 IS NULL OR b1 = coalesce(o1, a1, b1))
       AND (d1 IS NULL OR d1 = coalesce(o1, a1, b1, d1))
       AND (a2 IS NULL OR o2 IS NULL OR a2 = o2) AND (b2 IS NULL OR b2 = coalesce(o2, a2, b2))
       AND (d2 IS NULL OR d2 = coalesce(o2, a2, b2, d2))
       AND (a3 IS NULL OR o3 IS NULL OR a3 = o3) AND (b3 IS NULL OR b3 = coalesce(o3, a3, b3))
       AND (d3 IS NULL OR d3 = coalesce(o3, a3, b3, d3))
       AND (a4 IS NULL OR o4 IS NULL OR a4 = o4) AND (b4 IS NULL OR b4 = coalesce(o4, a4, b4))
       AND (d4 IS NULL OR d4 = coalesce(o4, a4, b4, d4))
       AND (a5 IS NULL OR o5 IS NULL OR a5 = o5) AND (b5 IS NULL OR b5 = coalesce(o5, a5, b5))
       AND (d5 IS NULL OR d5 = coalesce(o5, a5, b5, d5))
       AND (a6 IS NULL OR o6 IS NULL OR a6 = o6) AND (b6 IS NULL OR b6 = coalesce(o6, a6, b6))
       AND (d6 IS NULL OR d6 = coalesce(o6, a6, b6, d6))
       AND (a7 IS NULL OR o7 IS NULL OR a7 = o7) AND (b7 IS NULL OR b7 = coalesce(o7, a7, b7))
       AND (d7 IS NULL OR d7 = coalesce(o7, a7, b7, d7))
       AND (a8 IS NULL OR o8 IS NULL OR a8 = o8) AND (b8 IS NULL OR b8 = coalesce(o8, a8, b8))
       AND (d8 IS NULL OR d8 = coalesce(o8, a8, b8, d8))
       AND (a9 IS NULL OR o9 IS NULL OR a9 = o9) AND (b9 IS NULL OR b9 = coalesce(o9, a9, b9))
       AND (d9 IS NULL OR d9 = coalesce(o9, a9, b9, d9))
       AND (a10 IS NULL OR o10 IS NULL OR a10 = o10) AND (b10 IS NULL OR b10 = coalesce(o10, a10, b10))
       AND (d10 IS NULL OR d10 = coalesce(o10, a10, b10, d10))
       AND (a11 IS NULL OR o11 IS NULL OR a11 = o11) AND (b11 IS NULL OR b11 = coalesce(o11, a11, b11))
       AND (d11 IS NULL OR d11 = coalesce(o11, a11, b11, d11))
           AS agree
    FROM m
)
SELECT pid, root, bool_or(fresh),
       CASE jslot WHEN 0 THEN v0 WHEN 1 THEN v1 WHEN 2 THEN v2 WHEN 3 THEN v3 WHEN 4 THEN v4
                  WHEN 5 THEN v5 WHEN 6 THEN v6 WHEN 7 THEN v7 WHEN 8 THEN v8 WHEN 9 THEN v9
                  WHEN 10 THEN v10 WHEN 11 THEN v11 ELSE 0 END,
       v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11
FROM merged
WHERE agree AND (fresh OR NOT lone)
GROUP BY ALL
