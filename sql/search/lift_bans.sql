-- egg's backoff scheduler at saturation: while rules are banned the e-graph is not saturated;
-- every ban is moved forward by the same amount, so that the first to end ends at $iteration
-- (those rules are searched in the next iteration). Returns how many bans were moved.
-- Parameters: $iteration.
UPDATE rule_sched
SET banned_until = banned_until
    - (SELECT min(banned_until) FROM rule_sched
       WHERE banned_until > $iteration AND rule IN (SELECT name FROM rule_info))
    + $iteration
WHERE banned_until > $iteration AND rule IN (SELECT name FROM rule_info)
