-- The representative terms (one per class) of at most $size operators, smallest first.
-- Parameters: $size.
SELECT id, size
FROM synth_term
WHERE id = class AND size <= $size
ORDER BY id
