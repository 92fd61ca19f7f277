-- Discard the matches of the rules banned in this phase (their `rule_sched` rows were just
-- written: banned_until > $iteration), counting them in `rule_stats.banned`. No match id is
-- reused: the phase applies ids 1 .. max(mid). Parameters: $iteration.
INSERT INTO rule_stats
SELECT $iteration, r.name, count(*), 0, 0, 0, 0, 0, count(*)
FROM match m
JOIN rule_info r ON r.rule = m.rule
JOIN rule_sched s ON s.rule = r.name
WHERE s.banned_until > $iteration
GROUP BY r.name;
DELETE FROM match
WHERE rule IN (SELECT r.rule FROM rule_info r JOIN rule_sched s ON s.rule = r.name
               WHERE s.banned_until > $iteration)
