-- How many matches the phase found, the height of the tallest right-hand side among their rules
-- (so that instantiation runs only the levels it needs), and whether any of them has a guard.
-- No parameters.
SELECT (SELECT count(*) FROM match),
       coalesce((SELECT max(t.height) FROM tnode t
                 WHERE t.rule IN (SELECT DISTINCT rule FROM match)), -1),
       EXISTS (SELECT 1 FROM rguard WHERE rule IN (SELECT DISTINCT rule FROM match))
