-- Before a rule program is loaded into an e-graph explored before: its rules that the last
-- exploration did not run (`rule_info` holds the program it ran; a rule is its name, since the
-- scheduler's state is kept by name, and its key: what it does) have not searched the e-nodes
-- that exploration added, so each gets a semi-naive start of its own at 0 (`rule_sched.since`,
-- as after a backoff ban): its first search sees the whole e-graph. A rule's ban, if any, is
-- kept. `relsat_rules` is the program's `rule_info` rows. No parameters.
UPDATE rule_sched SET since = 0
WHERE rule IN (
    SELECT name FROM relsat_rules WHERE (name, key) NOT IN (SELECT (name, key) FROM rule_info)
);
INSERT INTO rule_sched
SELECT DISTINCT name, 0, 0, 0
FROM relsat_rules
WHERE (name, key) NOT IN (SELECT (name, key) FROM rule_info)
  AND name NOT IN (SELECT rule FROM rule_sched)
