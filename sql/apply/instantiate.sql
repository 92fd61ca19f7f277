-- Instantiate the right-hand-side templates of every match still ok among the chunk $lo..$hi
-- (match ids; a phase with many matches is applied a chunk at a time, relsat/phase.py), all
-- heights in one statement: a recursive query whose step h builds the templates of height h of
-- the matches that built one of height h - 1 (the working table `lvl`; every template of height
-- h has a child of height h - 1, its `tnode.dref`). Children are bound variables or templates of
-- lower height (`recurring.lvl`); a split's cut is dim cut_dim of the class bound to slot cut_slot;
-- parameter i is the literal p_i, or slot q_i of the match (a parameter variable or a value the
-- rule computed, relsat/engine/compile.py); a shape operator's list parameter s is the literal
-- or the list whose key slot qs holds (a variable's, read back through `strs`; from slot 10 on,
-- one the rule computed: its text in `match.sv`).
-- Hash-cons against the e-graph: an existing e-node gives its class; a node that does not exist
-- yet gets a fresh class id, one per distinct node of its height (never an id that union-find has
-- merged away, nor one an earlier chunk of the phase gave to a node that `newnode` still holds,
-- nor one a lower height gave). `cand` is empty when this runs. Parameters: $lo, $hi.
INSERT INTO cand
WITH RECURSIVE base AS MATERIALIZED (
    SELECT greatest((SELECT coalesce(max(id), -1) FROM eclass),
                    (SELECT coalesce(max(id), -1) FROM uf),
                    (SELECT coalesce(max(class), -1) FROM newnode)) AS top
), lvl(mid, tid, height, op, p0, p1, p2, p3, p4, p5, arity, c0, c1, class, fresh, c2, c3, s,
    c4, c5, c6, c7)
USING KEY (mid, tid) AS (
    SELECT mid, tid, height, op, p0, coalesce(p1, -1), p2, p3, p4, p5, arity, c0, c1,
           coalesce(existing, (SELECT top FROM base)
                    + dense_rank() OVER (PARTITION BY existing IS NULL
                                         ORDER BY op, p0, p1, p2, p3, p4, p5, arity, c0, c1, c2, c3, c4, c5,
                                                  c6, c7, s)),
           existing IS NULL, c2, c3, s, c4, c5, c6, c7
    FROM (
        SELECT c.*, e.class AS existing
        FROM (
            SELECT m.mid, t.tid, t.height, t.op,
                   CASE WHEN t.q0 >= 0 THEN m.v[t.q0 + 1]::INTEGER ELSE t.p0 END AS p0,
                   CASE WHEN t.op = 'split' THEN vc.shape[t.cut_dim + 1]
                        WHEN t.q1 >= 0 THEN m.v[t.q1 + 1]::INTEGER ELSE t.p1 END AS p1,
                   CASE WHEN t.q2 >= 0 THEN m.v[t.q2 + 1]::INTEGER ELSE t.p2 END AS p2,
                   CASE WHEN t.q3 >= 0 THEN m.v[t.q3 + 1]::INTEGER ELSE t.p3 END AS p3,
                   CASE WHEN t.q4 >= 0 THEN m.v[t.q4 + 1]::INTEGER ELSE t.p4 END AS p4,
                   CASE WHEN t.q5 >= 0 THEN m.v[t.q5 + 1]::INTEGER ELSE t.p5 END AS p5,
                   t.arity,
                   CASE t.k0 WHEN 1 THEN m.v[t.r0 + 1] ELSE -1 END AS c0,
                   CASE t.k1 WHEN 1 THEN m.v[t.r1 + 1] ELSE -1 END AS c1,
                   CASE t.k2 WHEN 1 THEN m.v[t.r2 + 1] ELSE -1 END AS c2,
                   CASE t.k3 WHEN 1 THEN m.v[t.r3 + 1] ELSE -1 END AS c3,
                   CASE t.k4 WHEN 1 THEN m.v[t.r4 + 1] ELSE -1 END AS c4,
                   CASE t.k5 WHEN 1 THEN m.v[t.r5 + 1] ELSE -1 END AS c5,
                   CASE t.k6 WHEN 1 THEN m.v[t.r6 + 1] ELSE -1 END AS c6,
                   CASE t.k7 WHEN 1 THEN m.v[t.r7 + 1] ELSE -1 END AS c7,
                   CASE WHEN t.qs >= 12 THEN m.sv[t.qs - 11] WHEN t.qs >= 0 THEN sv.s ELSE t.s END AS s
            FROM match m
            JOIN tnode t ON t.rule = m.rule AND t.height = 0
            LEFT JOIN strs sv ON t.qs BETWEEN 0 AND 11 AND sv.h = m.v[t.qs + 1]
            LEFT JOIN eclass vc ON vc.id = m.v[t.cut_slot + 1] AND t.op = 'split'
            WHERE m.ok AND m.mid BETWEEN $lo AND $hi
        ) c
        LEFT JOIN enode e
          ON e.op = c.op AND e.p0 = c.p0 AND e.p1 = c.p1 AND e.p2 = c.p2 AND e.p3 = c.p3
         AND e.p4 = c.p4 AND e.p5 = c.p5 AND e.s = c.s AND e.arity = c.arity
         AND e.c0 = c.c0 AND e.c1 = c.c1 AND e.c2 = c.c2 AND e.c3 = c.c3
         AND e.c4 = c.c4 AND e.c5 = c.c5 AND e.c6 = c.c6 AND e.c7 = c.c7
    )
    UNION
    SELECT mid, tid, height, op, p0, coalesce(p1, -1), p2, p3, p4, p5, arity, c0, c1,
           coalesce(existing, greatest((SELECT top FROM base),
                                       (SELECT max(class) FROM recurring.lvl))
                    + dense_rank() OVER (PARTITION BY existing IS NULL
                                         ORDER BY op, p0, p1, p2, p3, p4, p5, arity, c0, c1, c2, c3, c4, c5,
                                                  c6, c7, s)),
           existing IS NULL, c2, c3, s, c4, c5, c6, c7
    FROM (
        SELECT c.*, e.class AS existing
        FROM (
            SELECT m.mid, t.tid, t.height, t.op,
                   CASE WHEN t.q0 >= 0 THEN m.v[t.q0 + 1]::INTEGER ELSE t.p0 END AS p0,
                   CASE WHEN t.op = 'split' THEN vc.shape[t.cut_dim + 1]
                        WHEN t.q1 >= 0 THEN m.v[t.q1 + 1]::INTEGER ELSE t.p1 END AS p1,
                   CASE WHEN t.q2 >= 0 THEN m.v[t.q2 + 1]::INTEGER ELSE t.p2 END AS p2,
                   CASE WHEN t.q3 >= 0 THEN m.v[t.q3 + 1]::INTEGER ELSE t.p3 END AS p3,
                   CASE WHEN t.q4 >= 0 THEN m.v[t.q4 + 1]::INTEGER ELSE t.p4 END AS p4,
                   CASE WHEN t.q5 >= 0 THEN m.v[t.q5 + 1]::INTEGER ELSE t.p5 END AS p5,
                   t.arity,
                   CASE t.k0 WHEN 1 THEN m.v[t.r0 + 1] WHEN 2 THEN b.b0 ELSE -1 END AS c0,
                   CASE t.k1 WHEN 1 THEN m.v[t.r1 + 1] WHEN 2 THEN b.b1 ELSE -1 END AS c1,
                   CASE t.k2 WHEN 1 THEN m.v[t.r2 + 1] WHEN 2 THEN b.b2 ELSE -1 END AS c2,
                   CASE t.k3 WHEN 1 THEN m.v[t.r3 + 1] WHEN 2 THEN b.b3 ELSE -1 END AS c3,
                   CASE t.k4 WHEN 1 THEN m.v[t.r4 + 1] WHEN 2 THEN b.b4 ELSE -1 END AS c4,
                   CASE t.k5 WHEN 1 THEN m.v[t.r5 + 1] WHEN 2 THEN b.b5 ELSE -1 END AS c5,
                   CASE t.k6 WHEN 1 THEN m.v[t.r6 + 1] WHEN 2 THEN b.b6 ELSE -1 END AS c6,
                   CASE t.k7 WHEN 1 THEN m.v[t.r7 + 1] WHEN 2 THEN b.b7 ELSE -1 END AS c7,
                   CASE WHEN t.qs >= 12 THEN m.sv[t.qs - 11] WHEN t.qs >= 0 THEN sv.s ELSE t.s END AS s
            FROM lvl w
            JOIN tnode t ON t.dref = w.tid
            JOIN match m ON m.mid = w.mid
            LEFT JOIN (
                SELECT i.mid, k.tid,
                       max(i.class) FILTER (k.pos = 0) AS b0, max(i.class) FILTER (k.pos = 1) AS b1,
                       max(i.class) FILTER (k.pos = 2) AS b2, max(i.class) FILTER (k.pos = 3) AS b3,
                       max(i.class) FILTER (k.pos = 4) AS b4, max(i.class) FILTER (k.pos = 5) AS b5,
                       max(i.class) FILTER (k.pos = 6) AS b6, max(i.class) FILTER (k.pos = 7) AS b7
                FROM recurring.lvl i JOIN tkid k ON k.child = i.tid
                GROUP BY i.mid, k.tid
            ) b ON b.mid = m.mid AND b.tid = t.tid
            LEFT JOIN strs sv ON t.qs BETWEEN 0 AND 11 AND sv.h = m.v[t.qs + 1]
            LEFT JOIN eclass vc ON vc.id = m.v[t.cut_slot + 1] AND t.op = 'split'
        ) c
        LEFT JOIN enode e
          ON e.op = c.op AND e.p0 = c.p0 AND e.p1 = c.p1 AND e.p2 = c.p2 AND e.p3 = c.p3
         AND e.p4 = c.p4 AND e.p5 = c.p5 AND e.s = c.s AND e.arity = c.arity
         AND e.c0 = c.c0 AND e.c1 = c.c1 AND e.c2 = c.c2 AND e.c3 = c.c3
         AND e.c4 = c.c4 AND e.c5 = c.c5 AND e.c6 = c.c6 AND e.c7 = c.c7
    )
)
SELECT * FROM lvl
