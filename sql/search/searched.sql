-- After a phase: the rules of its kind ($multi) in the program it searched (not banned at
-- $iteration) go on from the phase's semi-naive start, no longer their own. Parameters:
-- $iteration, $multi.
UPDATE rule_sched SET since = NULL
WHERE since IS NOT NULL AND banned_until <= $iteration
  AND rule IN (SELECT name FROM rule_info WHERE multi = $multi)
