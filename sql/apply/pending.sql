-- The highest match id of the phase (its matches are ids 1 .. this, less those a backoff ban
-- discarded), and whether any match has a guard. No parameters.
SELECT (SELECT coalesce(max(mid), 0) FROM match),
       EXISTS (SELECT 1 FROM rguard WHERE rule IN (SELECT DISTINCT rule FROM match))
