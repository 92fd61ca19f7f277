-- How many matches the phase found, and whether any of them has a guard. No parameters.
SELECT (SELECT count(*) FROM match),
       EXISTS (SELECT 1 FROM rguard WHERE rule IN (SELECT DISTINCT rule FROM match))
