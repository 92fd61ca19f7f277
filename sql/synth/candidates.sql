-- The candidate equations of $size: each term of that size that is not its class's
-- representative, beside the representative. `collision`: both are exact and their exact
-- fingerprints differ (their float fingerprints agree by chance). Parameters: $size.
SELECT t.id, t.class, (t.fpx IS NOT NULL AND r.fpx IS NOT NULL AND t.fpx <> r.fpx) AS collision
FROM synth_term t
JOIN synth_term r ON r.id = t.class
WHERE t.size = $size AND t.id <> t.class
ORDER BY t.id
