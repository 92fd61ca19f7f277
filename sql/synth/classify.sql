-- Give each new term (class NULL) its class: the smallest term of equal type (shape and split
-- history: TENSAT's split reads it) and fingerprint
-- among the representatives so far and the new terms (so an older representative wins).
-- No parameters.
UPDATE synth_term t
SET class = k.cls
FROM (
    SELECT n.id, min(r.id) AS cls
    FROM synth_term n
    JOIN synth_term r
      ON r.shape = n.shape AND r.splits = n.splits AND r.fp = n.fp
     AND (r.class IS NULL OR r.id = r.class)
    WHERE n.class IS NULL
    GROUP BY n.id
) k
WHERE t.id = k.id
