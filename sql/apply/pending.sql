-- The highest match id of the phase (its matches are ids 1 .. this, less those a backoff ban
-- discarded), whether any match has a guard, whether any has 'where' conditions and whether
-- any computes right-hand-side values (the generated statements run only then). No parameters.
WITH matched AS (SELECT DISTINCT rule FROM match)
SELECT (SELECT coalesce(max(mid), 0) FROM match),
       EXISTS (SELECT 1 FROM rguard WHERE rule IN (SELECT rule FROM matched)),
       EXISTS (SELECT 1 FROM rule_info WHERE conds AND rule IN (SELECT rule FROM matched)),
       EXISTS (SELECT 1 FROM rule_info WHERE derives AND rule IN (SELECT rule FROM matched))
