-- Before a rule program is loaded into an e-graph explored before: its rules that the last
-- exploration did not run (no rule in `rule_info`, the program it ran, does what they do: same
-- key) have not searched the e-nodes that exploration added, so each gets a semi-naive start of
-- its own at 0 (`rule_sched.since`, as after a backoff ban): its first search sees the whole
-- e-graph. A rule's ban, if any, is kept. `relsat_rules` is the program's `rule_info` rows.
-- No parameters.
UPDATE rule_sched SET since = 0
WHERE rule IN (SELECT name FROM relsat_rules WHERE key NOT IN (SELECT key FROM rule_info));
INSERT INTO rule_sched
SELECT DISTINCT name, 0, 0, 0
FROM relsat_rules
WHERE key NOT IN (SELECT key FROM rule_info) AND name NOT IN (SELECT rule FROM rule_sched)
