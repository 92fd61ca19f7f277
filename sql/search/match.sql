-- Match every pattern node of the phase's rules ($multi: the multi-pattern rules, else the
-- single-pattern ones), all heights in one statement. A pattern node matches an e-node with the
-- node's op, literals and arity (`cand`: every such pair, with the e-node's classes as the node's
-- own variable bindings o0…o11); child j binds variable slot x_j (a slot bound twice must see the
-- same class), or must lie in a class where the sub-pattern at that position matched
-- (at most three sub-patterns, at any child positions: the deep one, `dpid`, and two others,
-- `spid`, `tpid`). A recursive query matches height h from the matches of height h - 1 (the working
-- table `lvl`: every node of height h has a sub-pattern of height h - 1, its `deep` one; the
-- anchor is height 0, the nodes whose children are all variables) and those of every lower height
-- (`recurring.lvl`, for its other sub-pattern); it ends at the first height that matches
-- nothing. The bindings of the node's own variables and of its sub-patterns are merged per slot
-- and must agree. The key (pattern node, root, bindings) is unique: no height overwrites
-- another's rows. E-nodes on the cycle filter list are ignored. Fresh (semi-naive) if any e-node
-- in the match has stamp >= $since (or the rule's own start, `pnode.since`, after a backoff
-- ban); a rule banned at $iteration is not searched. Only e-nodes born before $until take part (a
-- phase cut short by the e-node limit is run again over the e-graph it saw). Finds what match_leaves.sql and
-- match_level.sql find, one statement instead of one per height: used while the e-graph is small
-- (relsat/phase.py RECURSIVE_BELOW). Only partial matches some use can take are kept: a
-- height-0 match of a sub-pattern only in a class where a candidate parent wants it (`needed`),
-- a whole match of a single-pattern rule only when fresh (the phase applies no other).
-- Parameters: $multi, $since, $until, $iteration.
INSERT INTO sub
WITH RECURSIVE cand AS MATERIALIZED (
    SELECT p.pid, p.jslot, e.class AS root, e.stamp >= coalesce(p.since, $since) AS fresh,
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
           -- the deep sub-pattern (height h - 1; -1 at height 0) and the other one (or -1), with
           -- the classes they must match
           p.dpid, p.spid, p.tpid, child_at(p.dpos, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7) AS droot,
           child_at(p.spos, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7) AS sroot,
           child_at(p.tpos, e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7) AS troot,
           p.is_root, p.is_root AND NOT p.multi AS lone
    FROM pnode p
    JOIN enode_either e
      ON e.op = p.op AND e.arity = p.arity AND (p.comm OR NOT e.turned)
     AND (p.y0 >= 0 OR e.p0 = p.l0) AND (p.y1 >= 0 OR e.p1 = p.l1)
     AND (p.y2 >= 0 OR e.p2 = p.l2) AND (p.y3 >= 0 OR e.p3 = p.l3)
     AND (p.ys >= 0 OR p.ls IS NULL OR e.s = p.ls)
    WHERE p.multi = $multi AND p.banned_until <= $iteration
      AND NOT e.filtered AND e.born < $until
      -- a slot at two children (`dup`): child j is the class of the first child bound to its slot
      AND (NOT p.dup OR repeats_agree(p.x0, p.x1, p.x2, p.x3, p.x4, p.x5, p.x6, p.x7,
                                        e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7))
), needed AS MATERIALIZED (
    SELECT dpid AS pid, droot AS root FROM cand WHERE dpid >= 0
    UNION
    SELECT spid, sroot FROM cand WHERE spid >= 0
    UNION
    SELECT tpid, troot FROM cand WHERE tpid >= 0
), lvl(pid, root, fresh, jk, v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11)
USING KEY (pid, root, v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11) AS (
    SELECT pid, root, bool_or(fresh),
           CASE jslot WHEN 0 THEN o0 WHEN 1 THEN o1 WHEN 2 THEN o2 WHEN 3 THEN o3 WHEN 4 THEN o4
                      WHEN 5 THEN o5 WHEN 6 THEN o6 WHEN 7 THEN o7 WHEN 8 THEN o8
                      WHEN 9 THEN o9 WHEN 10 THEN o10 WHEN 11 THEN o11 ELSE 0 END,
           o0, o1, o2, o3, o4, o5, o6, o7, o8, o9, o10, o11
    FROM cand c
    LEFT JOIN needed n USING (pid, root)
    WHERE c.dpid < 0 AND (c.is_root OR n.pid IS NOT NULL)
    GROUP BY ALL
    HAVING bool_or(fresh) OR NOT bool_or(lone)
    UNION
    SELECT pid, root, bool_or(fresh),
           CASE jslot WHEN 0 THEN v0 WHEN 1 THEN v1 WHEN 2 THEN v2 WHEN 3 THEN v3 WHEN 4 THEN v4
                      WHEN 5 THEN v5 WHEN 6 THEN v6 WHEN 7 THEN v7 WHEN 8 THEN v8
                      WHEN 9 THEN v9 WHEN 10 THEN v10 WHEN 11 THEN v11 ELSE 0 END,
           v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11
    FROM (
        SELECT c.pid, c.jslot, c.root, c.lone,
               c.fresh OR a.fresh OR coalesce(b.fresh, false) OR coalesce(d.fresh, false) AS fresh,
               coalesce(c.o0, a.v0, b.v0, d.v0) AS v0, coalesce(c.o1, a.v1, b.v1, d.v1) AS v1,
               coalesce(c.o2, a.v2, b.v2, d.v2) AS v2, coalesce(c.o3, a.v3, b.v3, d.v3) AS v3,
               coalesce(c.o4, a.v4, b.v4, d.v4) AS v4, coalesce(c.o5, a.v5, b.v5, d.v5) AS v5,
               coalesce(c.o6, a.v6, b.v6, d.v6) AS v6, coalesce(c.o7, a.v7, b.v7, d.v7) AS v7,
               coalesce(c.o8, a.v8, b.v8, d.v8) AS v8, coalesce(c.o9, a.v9, b.v9, d.v9) AS v9,
               coalesce(c.o10, a.v10, b.v10, d.v10) AS v10,
               coalesce(c.o11, a.v11, b.v11, d.v11) AS v11,
               (a.v0 IS NULL OR c.o0 IS NULL OR a.v0 = c.o0)
           AND (b.v0 IS NULL OR b.v0 = coalesce(c.o0, a.v0, b.v0))
           AND (d.v0 IS NULL OR d.v0 = coalesce(c.o0, a.v0, b.v0, d.v0))
           AND (a.v1 IS NULL OR c.o1 IS NULL OR a.v1 = c.o1)
           AND (b.v1 IS NULL OR b.v1 = coalesce(c.o1, a.v1, b.v1))
           AND (d.v1 IS NULL OR d.v1 = coalesce(c.o1, a.v1, b.v1, d.v1))
           AND (a.v2 IS NULL OR c.o2 IS NULL OR a.v2 = c.o2)
           AND (b.v2 IS NULL OR b.v2 = coalesce(c.o2, a.v2, b.v2))
           AND (d.v2 IS NULL OR d.v2 = coalesce(c.o2, a.v2, b.v2, d.v2))
           AND (a.v3 IS NULL OR c.o3 IS NULL OR a.v3 = c.o3)
           AND (b.v3 IS NULL OR b.v3 = coalesce(c.o3, a.v3, b.v3))
           AND (d.v3 IS NULL OR d.v3 = coalesce(c.o3, a.v3, b.v3, d.v3))
           AND (a.v4 IS NULL OR c.o4 IS NULL OR a.v4 = c.o4)
           AND (b.v4 IS NULL OR b.v4 = coalesce(c.o4, a.v4, b.v4))
           AND (d.v4 IS NULL OR d.v4 = coalesce(c.o4, a.v4, b.v4, d.v4))
           AND (a.v5 IS NULL OR c.o5 IS NULL OR a.v5 = c.o5)
           AND (b.v5 IS NULL OR b.v5 = coalesce(c.o5, a.v5, b.v5))
           AND (d.v5 IS NULL OR d.v5 = coalesce(c.o5, a.v5, b.v5, d.v5))
           AND (a.v6 IS NULL OR c.o6 IS NULL OR a.v6 = c.o6)
           AND (b.v6 IS NULL OR b.v6 = coalesce(c.o6, a.v6, b.v6))
           AND (d.v6 IS NULL OR d.v6 = coalesce(c.o6, a.v6, b.v6, d.v6))
           AND (a.v7 IS NULL OR c.o7 IS NULL OR a.v7 = c.o7)
           AND (b.v7 IS NULL OR b.v7 = coalesce(c.o7, a.v7, b.v7))
           AND (d.v7 IS NULL OR d.v7 = coalesce(c.o7, a.v7, b.v7, d.v7))
           AND (a.v8 IS NULL OR c.o8 IS NULL OR a.v8 = c.o8)
           AND (b.v8 IS NULL OR b.v8 = coalesce(c.o8, a.v8, b.v8))
           AND (d.v8 IS NULL OR d.v8 = coalesce(c.o8, a.v8, b.v8, d.v8))
           AND (a.v9 IS NULL OR c.o9 IS NULL OR a.v9 = c.o9)
           AND (a.v10 IS NULL OR c.o10 IS NULL OR a.v10 = c.o10)
           AND (a.v11 IS NULL OR c.o11 IS NULL OR a.v11 = c.o11)
           AND (b.v9 IS NULL OR b.v9 = coalesce(c.o9, a.v9, b.v9))
           AND (b.v10 IS NULL OR b.v10 = coalesce(c.o10, a.v10, b.v10))
           AND (b.v11 IS NULL OR b.v11 = coalesce(c.o11, a.v11, b.v11))
           AND (d.v9 IS NULL OR d.v9 = coalesce(c.o9, a.v9, b.v9, d.v9))
           AND (d.v10 IS NULL OR d.v10 = coalesce(c.o10, a.v10, b.v10, d.v10))
           AND (d.v11 IS NULL OR d.v11 = coalesce(c.o11, a.v11, b.v11, d.v11)) AS agree
        FROM lvl a
        JOIN cand c ON c.dpid = a.pid AND c.droot = a.root
        LEFT JOIN recurring.lvl b ON b.pid = c.spid AND b.root = c.sroot
        LEFT JOIN recurring.lvl d ON d.pid = c.tpid AND d.root = c.troot
        WHERE (c.spid < 0 OR b.pid IS NOT NULL) AND (c.tpid < 0 OR d.pid IS NOT NULL)
    )
    WHERE agree
    GROUP BY ALL
    HAVING bool_or(fresh) OR NOT bool_or(lone)
)
SELECT pid, root, fresh, jk, v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11 FROM lvl
