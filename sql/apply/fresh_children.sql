-- The analyses of the existing classes that new e-nodes read (`relsat_children`: their ids,
-- registered from relsat/engine/shapecheck.py), in id order. No parameters.
SELECT e.id, e.kind, e.shape, e.shape2, e.splits, e.all_weights
FROM eclass e
JOIN relsat_children k ON k.id = e.id
ORDER BY e.id
