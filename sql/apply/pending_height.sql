-- How many matches the phase found, and the height of the tallest right-hand side among their
-- rules (so that instantiation runs only the levels it needs). No parameters.
SELECT (SELECT count(*) FROM match),
       coalesce((SELECT max(t.height) FROM tnode t
                 WHERE t.rule IN (SELECT DISTINCT rule FROM match)), -1)
