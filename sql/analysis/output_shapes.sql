-- The shape of each graph output's class, in output order. No parameters.
SELECT c.shape FROM output o JOIN eclass c ON c.id = o.class ORDER BY o.pos
