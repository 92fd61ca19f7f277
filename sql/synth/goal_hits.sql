-- The candidate hits of the targets in synth_target: each term of at most $room operators whose
-- projection lies in a target's range (the caller compares the values themselves).
-- $room (INTEGER): the most operators a hit may have, the same for every target of a batch. A
-- parameter, not a column: as a third join condition DuckDB's IEJoin could sort on it (every
-- pair passes) and test the ranges pair by pair (3-4 s a batch of 65,536 targets, not 10 ms).
SELECT t.tid, v.id
FROM synth_target t
JOIN (SELECT id, proj FROM synth_value WHERE size <= $room) v ON v.proj BETWEEN t.lo AND t.hi
ORDER BY t.tid, v.id
