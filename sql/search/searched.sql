-- After a single-pattern phase: the rules of the program it searched (not banned at $iteration)
-- go on from the phase's semi-naive start, no longer their own. Parameters: $iteration.
UPDATE rule_sched SET since = NULL
WHERE since IS NOT NULL AND banned_until <= $iteration
  AND rule IN (SELECT name FROM rule_info WHERE NOT multi)
