-- TENSAT's cycle pre-filter for multi-pattern matches (Algorithm 2), efficient mode: a match is
-- refused if the class bound to any of its variables has one of the match's root classes among
-- its descendants (applying it would make that root depend on itself). Descendants are searched
-- by a recursive query seeded only from the candidate (variable class, root) pairs and pruned by
-- rank: a path from a class down to a root needs rank(class) > rank(root) (`crank`, longest path
-- to a leaf), so the walk never leaves the band above the root. No parameters.
UPDATE match SET ok = false, cycle = true
WHERE mid IN (
    WITH RECURSIVE pairs AS (
        SELECT DISTINCT m.mid, v.cls AS seed, r.root
        FROM match m,
             unnest(m.v) AS v(cls),
             unnest([m.root0, m.root1]) AS r(root)
        WHERE m.ok AND v.cls IS NOT NULL AND r.root >= 0
    ), goal AS (
        SELECT p.seed, p.root, k.rank AS floor
        FROM (SELECT DISTINCT seed, root FROM pairs) p JOIN crank k ON k.class = p.root
    ), walk(seed, root, floor, cls) AS (
        SELECT seed, root, floor, seed FROM goal
        UNION
        SELECT w.seed, w.root, w.floor, e.child
        FROM walk w
        JOIN cedge e ON e.class = w.cls
        JOIN crank k ON k.class = e.child
        WHERE k.rank >= w.floor AND w.cls <> w.root
    )
    SELECT DISTINCT p.mid
    FROM pairs p
    JOIN walk w ON w.seed = p.seed AND w.root = p.root AND w.cls = p.root
)
