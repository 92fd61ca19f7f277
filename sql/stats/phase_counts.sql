-- Totals of the phase just applied: matches found, applied, refused by the cycle pre-filter, not
-- applied because of the e-node limit, and new e-nodes. No parameters.
SELECT (SELECT count(*) FROM match),
       (SELECT count(*) FROM match WHERE ok),
       (SELECT count(*) FROM match WHERE cycle),
       (SELECT count(*) FROM match WHERE capped),
       (SELECT count(*) FROM used)
