-- The input graph's leaves (born 0: inputs and weights) with their names and shapes, to tell
-- whether a stored e-graph was built from a given graph (resuming it). No parameters.
SELECT DISTINCT e.op, e.s AS name, c.shape
FROM enode e JOIN eclass c ON c.id = e.class
WHERE e.born = 0 AND e.op IN ('input', 'weight')
