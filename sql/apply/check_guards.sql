-- Refuse matches whose rule has a guard (where ...) that does not hold on the bound classes'
-- shapes (relsat/rules.py GUARDS; SEMANTICS.md §7). A guard on shapes it cannot read fails.
-- No parameters.
UPDATE match SET ok = false
WHERE mid IN (
    SELECT m.mid
    FROM match m
    JOIN rguard g ON g.rule = m.rule
    LEFT JOIN eclass x0 ON x0.id = m.v[g.a0 + 1]
    LEFT JOIN eclass x1 ON x1.id = m.v[g.a1 + 1]
    LEFT JOIN eclass x2 ON x2.id = m.v[g.a2 + 1]
    LEFT JOIN eclass x3 ON x3.id = m.v[g.a3 + 1]
    WHERE NOT coalesce(CASE g.name
        WHEN 'ungrouped' THEN len(x0.shape) = 4 AND len(x1.shape) = 4
                              AND x0.shape[2] = x1.shape[2]
        WHEN 'same-shape' THEN x0.shape = x1.shape
        WHEN 'odd-kernels' THEN len(x0.shape) = 4 AND len(x1.shape) = 4
                              AND x0.shape[3] % 2 = 1 AND x0.shape[4] % 2 = 1
                              AND x1.shape[3] % 2 = 1 AND x1.shape[4] % 2 = 1
        WHEN 'same-group-width' THEN len(x0.shape) = 4 AND len(x1.shape) = 4
                              AND len(x2.shape) = 4 AND len(x3.shape) = 4
                              AND x1.shape[1]::BIGINT * x1.shape[2] * x2.shape[2]
                                = x3.shape[1]::BIGINT * x3.shape[2] * x0.shape[2]
        END, false)
)
