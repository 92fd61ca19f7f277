-- The terms of representative $id's class that have its size (the spellings of one value at one
-- size: the representative first), with their children (representatives themselves).
-- Parameters: $id.
SELECT m.id, m.c0, m.c1
FROM synth_term r
JOIN synth_term m ON m.class = r.class AND m.size = r.size
WHERE r.id = $id
ORDER BY m.id
