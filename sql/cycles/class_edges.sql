-- The class graph of the e-nodes not on the filter list: one row per (e-node, child class), with
-- the e-node's class, insertion order (born) and stamp (the last phase that created or
-- re-canonicalized it), in e-node id and child order, for the cycle post-pass and the ranks.
-- One plain scan per child column (an unnest of all eight costs 20x more). No parameters.
SELECT id, class, child, born, stamp
FROM (
    SELECT id, class, c0 AS child, born, stamp, 0 AS pos FROM enode WHERE NOT filtered AND arity > 0
    UNION ALL
    SELECT id, class, c1, born, stamp, 1 FROM enode WHERE NOT filtered AND arity > 1
    UNION ALL
    SELECT id, class, c2, born, stamp, 2 FROM enode WHERE NOT filtered AND arity > 2
    UNION ALL
    SELECT id, class, c3, born, stamp, 3 FROM enode WHERE NOT filtered AND arity > 3
    UNION ALL
    SELECT id, class, c4, born, stamp, 4 FROM enode WHERE NOT filtered AND arity > 4
    UNION ALL
    SELECT id, class, c5, born, stamp, 5 FROM enode WHERE NOT filtered AND arity > 5
    UNION ALL
    SELECT id, class, c6, born, stamp, 6 FROM enode WHERE NOT filtered AND arity > 6
    UNION ALL
    SELECT id, class, c7, born, stamp, 7 FROM enode WHERE NOT filtered AND arity > 7
)
ORDER BY id, pos
