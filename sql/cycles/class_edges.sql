-- The class graph of the e-nodes not on the filter list: one row per (e-node, child class), with
-- the e-node's class and insertion order (its id), for the cycle post-pass and the ranks.
-- No parameters.
SELECT e.id, e.class, t.child, e.born
FROM enode e,
     unnest([e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7]) AS t(child)
WHERE NOT e.filtered AND t.child >= 0
