-- Settle the matches of the chunk in `cand` after the shape check. A match is refused when any node it would
-- create is invalid or its right-hand side's type is not its root class's. No parameters.
UPDATE match SET ok = false
WHERE ok AND mid IN (SELECT c.mid FROM cand c JOIN newnode n ON n.class = c.class
                     WHERE c.fresh AND NOT n.valid);
-- A right-hand side must compute the type (kind and shapes) of the class it is unioned with: a
-- rule that changes a shape is refused when it fires, so an e-class never mixes types.
-- (The roots are listed with a UNION ALL, one per right-hand side: an OR in the join condition
-- would make it a nested-loop join.)
UPDATE match SET ok = false
WHERE ok AND mid IN (
    WITH roots AS (
        SELECT c.mid, c.class, c.fresh, m.root0 AS root
        FROM cand c JOIN tnode t ON t.tid = c.tid JOIN match m ON m.mid = c.mid
        WHERE m.ok AND t.root_of & 1 = 1
        UNION ALL
        SELECT c.mid, c.class, c.fresh, m.root1
        FROM cand c JOIN tnode t ON t.tid = c.tid JOIN match m ON m.mid = c.mid
        WHERE m.ok AND t.root_of & 2 = 2
    )
    SELECT x.mid
    FROM roots x
    JOIN eclass r ON r.id = x.root
    LEFT JOIN newnode n ON x.fresh AND n.class = x.class
    LEFT JOIN eclass e ON NOT x.fresh AND e.id = x.class
    WHERE coalesce(n.kind, e.kind) IS DISTINCT FROM r.kind
       OR coalesce(n.shape, e.shape) IS DISTINCT FROM r.shape
       OR coalesce(n.shape2, e.shape2) IS DISTINCT FROM r.shape2
)
