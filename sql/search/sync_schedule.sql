-- Copy the backoff scheduler's state (`rule_sched`) into the pattern nodes of the loaded rule
-- program: each rule's own semi-naive start, and its ban when $enforce (a run without the
-- scheduler searches every rule, from its own start). Returns how many rules have a start of
-- their own. Parameters: $enforce.
UPDATE pnode SET since = s.since, banned_until = CASE WHEN $enforce THEN s.banned_until ELSE 0 END
FROM rule_info r
JOIN rule_sched s ON s.rule = r.name
WHERE pnode.rule = r.rule;
SELECT count(*) FROM rule_sched WHERE since IS NOT NULL
