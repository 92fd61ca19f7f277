-- The highest match id of the phase (its matches are ids 1 .. this, less those a backoff ban
-- discarded), whether any match has a guard, the rules matched that have 'where' conditions and
-- those that compute right-hand-side values (NULL: none; the generated statements run only
-- then, and only with these rules' cases). No parameters.
WITH matched AS (SELECT DISTINCT rule FROM match)
SELECT (SELECT coalesce(max(mid), 0) FROM match),
       EXISTS (SELECT 1 FROM rguard WHERE rule IN (SELECT rule FROM matched)),
       (SELECT list(rule ORDER BY rule) FROM rule_info
        WHERE conds AND rule IN (SELECT rule FROM matched)),
       (SELECT list(rule ORDER BY rule) FROM rule_info
        WHERE derives AND rule IN (SELECT rule FROM matched))
