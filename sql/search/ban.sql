-- Ban the rules $names (the backoff scheduler, relsat/phase.py): their `rule_sched` rows become
-- (their search's start $sinces, banned until $untils, banned $times times), and the matches
-- they found in this phase are discarded, counted in `rule_stats.banned`. No match id is
-- reused: the phase applies ids 1 .. max(mid). Parameters: $names, $sinces, $untils, $times,
-- $iteration (lists of one entry per rule, in the same order).
DELETE FROM rule_sched WHERE rule IN (SELECT unnest($names));
INSERT INTO rule_sched
SELECT unnest($names), unnest($sinces), unnest($untils), unnest($times);
INSERT INTO rule_stats
SELECT $iteration, r.name, count(*), 0, 0, 0, 0, 0, count(*)
FROM match m
JOIN rule_info r ON r.rule = m.rule
WHERE r.name IN (SELECT unnest($names))
GROUP BY r.name;
DELETE FROM match
WHERE rule IN (SELECT rule FROM rule_info WHERE name IN (SELECT unnest($names)))
