-- Tuple-kind mismatches: a split that is not in a pair class, a pair class holding anything but
-- splits, a split_0/split_1 whose child is not a pair.
SELECT e.id, e.op, c.kind
FROM enode e JOIN eclass c ON c.id = e.class
WHERE (e.op = 'split') <> (c.kind = 'pair')
UNION ALL
SELECT e.id, e.op, k.kind
FROM enode e JOIN eclass k ON k.id = e.c0
WHERE e.op IN ('split_0', 'split_1') AND k.kind <> 'pair'
