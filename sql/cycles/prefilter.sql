-- TENSAT's cycle pre-filter for multi-pattern matches (Algorithm 2), efficient mode: a match is
-- refused if the class bound to any of its variables has one of the match's root classes among
-- its descendants (applying it would make that root depend on itself). The verdict belongs to a
-- (variable class, root class) pair, not to a match: it is computed once per distinct pair of
-- the chunk's matches (millions of matches of a cross-product rule share a few thousand pairs)
-- and the matches with a refused pair are then looked up. Descendants are searched by a
-- recursive query seeded only from the pairs' variable classes and pruned by rank: a path from a
-- class down to a root only visits classes ranked at least as high as the root (`crank`, longest
-- path to a leaf), so each variable class walks down only as far as the lowest-ranked root it is
-- paired with: one walk per variable class. Only matches $lo..$hi (match ids) are looked at (a
-- phase is applied a chunk at a time, relsat/explore.py). Parameters: $lo, $hi.
UPDATE match SET ok = false, cycle = true
WHERE mid IN (
    WITH RECURSIVE pairs AS (
        SELECT DISTINCT v.cls AS seed, r.root
        FROM match m,
             unnest(m.v) AS v(cls),
             unnest([m.root0, m.root1]) AS r(root)
        WHERE m.ok AND m.mid BETWEEN $lo AND $hi AND v.cls IS NOT NULL AND r.root >= 0
    ), seeds AS (
        SELECT p.seed, min(k.rank) AS floor
        FROM pairs p JOIN crank k ON k.class = p.root
        GROUP BY p.seed
    ), walk(seed, floor, cls) AS (
        SELECT seed, floor, seed FROM seeds
        UNION
        SELECT w.seed, w.floor, e.child
        FROM walk w
        JOIN cedge e ON e.class = w.cls
        JOIN crank k ON k.class = e.child
        WHERE k.rank >= w.floor
    ), refused AS (
        SELECT DISTINCT p.seed, p.root
        FROM pairs p
        JOIN walk w ON w.seed = p.seed AND w.cls = p.root
    )
    SELECT DISTINCT m.mid
    FROM match m,
         unnest(m.v) AS v(cls),
         unnest([m.root0, m.root1]) AS r(root)
    JOIN refused f ON f.seed = v.cls AND f.root = r.root
    WHERE m.ok AND m.mid BETWEEN $lo AND $hi
)
