-- The candidate hits of the targets in synth_target: each term whose projection lies in a
-- target's range and whose size fits its room (the caller compares the values themselves).
-- No parameters.
SELECT t.tid, v.id
FROM synth_target t
JOIN synth_value v ON v.proj BETWEEN t.lo AND t.hi
WHERE v.size <= t.room
ORDER BY t.tid, v.id
