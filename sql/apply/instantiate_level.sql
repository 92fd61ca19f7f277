-- Instantiate the right-hand-side templates of height $h for every match still ok: children are
-- bound variables or templates of lower height (already in cand); a split's cut is dim cut_dim of
-- the class bound to slot cut_slot. Hash-cons against the e-graph: an existing e-node gives its
-- class; a node that does not exist yet gets a fresh class id, one per distinct node (never an
-- id that union-find has merged away, nor one an earlier chunk of the phase gave to a node that
-- `newnode` still holds). Only the matches of the chunk $lo..$hi (match ids) are instantiated:
-- a phase with many matches is applied a chunk at a time (relsat/explore.py).
-- Parameters: $h, $lo, $hi.
INSERT INTO cand
WITH c AS (
    SELECT m.mid, t.tid, t.height, t.op, t.p0,
           CASE WHEN t.op = 'split' THEN vc.shape[t.cut_dim + 1] ELSE t.p1 END AS p1,
           t.p2, t.p3, t.p4, t.p5, t.arity,
           CASE t.k0 WHEN 1 THEN m.v[t.r0 + 1] WHEN 2 THEN i0.class ELSE -1 END AS c0,
           CASE t.k1 WHEN 1 THEN m.v[t.r1 + 1] WHEN 2 THEN i1.class ELSE -1 END AS c1,
           CASE t.k2 WHEN 1 THEN m.v[t.r2 + 1] WHEN 2 THEN i2.class ELSE -1 END AS c2,
           CASE t.k3 WHEN 1 THEN m.v[t.r3 + 1] WHEN 2 THEN i3.class ELSE -1 END AS c3
    FROM match m
    JOIN tnode t ON t.rule = m.rule AND t.height = $h
    LEFT JOIN cand i0 ON i0.mid = m.mid AND i0.tid = t.r0 AND t.k0 = 2
    LEFT JOIN cand i1 ON i1.mid = m.mid AND i1.tid = t.r1 AND t.k1 = 2
    LEFT JOIN cand i2 ON i2.mid = m.mid AND i2.tid = t.r2 AND t.k2 = 2
    LEFT JOIN cand i3 ON i3.mid = m.mid AND i3.tid = t.r3 AND t.k3 = 2
    LEFT JOIN eclass vc ON vc.id = m.v[t.cut_slot + 1] AND t.op = 'split'
    WHERE m.ok AND m.mid BETWEEN $lo AND $hi
), k AS (
    SELECT c.*, e.class AS existing
    FROM c
    LEFT JOIN enode e
      ON e.op = c.op AND e.p0 = c.p0 AND e.p1 = c.p1 AND e.p2 = c.p2 AND e.p3 = c.p3
     AND e.p4 = c.p4 AND e.p5 = c.p5 AND e.s = '' AND e.arity = c.arity
     AND e.c0 = c.c0 AND e.c1 = c.c1 AND e.c2 = c.c2 AND e.c3 = c.c3
), base AS (
    SELECT greatest((SELECT coalesce(max(id), -1) FROM eclass),
                    (SELECT coalesce(max(id), -1) FROM uf),
                    (SELECT coalesce(max(class), -1) FROM cand),
                    (SELECT coalesce(max(class), -1) FROM newnode)) AS top
)
SELECT mid, tid, height, op, p0, coalesce(p1, -1), p2, p3, p4, p5, arity, c0, c1,
       coalesce(existing, (SELECT top FROM base)
                + dense_rank() OVER (PARTITION BY existing IS NULL
                                     ORDER BY op, p0, p1, p2, p3, p4, p5, arity, c0, c1, c2, c3)),
       existing IS NULL, c2, c3
FROM k
