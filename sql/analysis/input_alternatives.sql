-- Whether a chosen e-node ($chosen: e-node ids, one per chosen class) shares its class with
-- another e-node of the input graph (born 0): two input e-nodes are one class only where a rule
-- made a union (x and true = x), so a choice with such a class may not be the input's
-- computation even though every e-node it chose is the input's. Parameters: $chosen.
SELECT EXISTS (
    SELECT 1
    FROM (SELECT unnest($chosen) AS id) k
    JOIN enode c ON c.id = k.id
    JOIN enode o ON o.class = c.class AND o.id <> c.id
    WHERE c.born = 0 AND o.born = 0 AND NOT o.filtered
)
