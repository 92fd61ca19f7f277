-- Terms and classes (representatives) of $size. Parameters: $size.
SELECT count(*) AS terms, count(*) FILTER (WHERE id = class) AS classes
FROM synth_term
WHERE size = $size
