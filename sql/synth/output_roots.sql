-- Each graph output's e-class as it stands (its union-find root). No parameters.
SELECT o.pos, coalesce(u.root, o.class) AS root
FROM output o
LEFT JOIN uf u ON u.id = o.class
ORDER BY o.pos
