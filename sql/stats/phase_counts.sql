-- Totals of the phase just applied: matches found, matches applied, new e-nodes.
-- No parameters.
SELECT (SELECT count(*) FROM match),
       (SELECT count(*) FROM match WHERE ok),
       (SELECT count(*) FROM used)
