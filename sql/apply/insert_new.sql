-- Settle the phase's matches and insert what they build. A match is refused (shape check) when any
-- node it would create is invalid or its right-hand side's type is not its root class's; the new
-- classes and e-nodes used by the remaining matches are inserted (stamp = born = $epoch), and each
-- remaining match queues the union of its root(s) with the class of its right-hand side(s).
-- Parameters: $epoch.
UPDATE match SET ok = false
WHERE ok AND mid IN (SELECT c.mid FROM cand c JOIN newnode n ON n.class = c.class
                     WHERE c.fresh AND NOT n.valid);
-- A right-hand side must compute the type (kind and shapes) of the class it is unioned with: a
-- rule that changes a shape is refused when it fires, so an e-class never mixes types.
UPDATE match SET ok = false
WHERE ok AND mid IN (
    SELECT c.mid
    FROM cand c
    JOIN tnode t ON t.tid = c.tid AND t.root_of > 0
    JOIN match m ON m.mid = c.mid
    JOIN eclass r
      ON (t.root_of & 1 = 1 AND r.id = m.root0) OR (t.root_of & 2 = 2 AND r.id = m.root1)
    LEFT JOIN newnode n ON c.fresh AND n.class = c.class
    LEFT JOIN eclass e ON NOT c.fresh AND e.id = c.class
    WHERE coalesce(n.kind, e.kind) IS DISTINCT FROM r.kind
       OR coalesce(n.shape, e.shape) IS DISTINCT FROM r.shape
       OR coalesce(n.shape2, e.shape2) IS DISTINCT FROM r.shape2
);
DELETE FROM used;
INSERT INTO used
    SELECT DISTINCT c.class FROM cand c JOIN match m ON m.mid = c.mid WHERE m.ok AND c.fresh;
INSERT INTO eclass
    SELECT n.class, n.kind, n.shape, n.shape2, n.splits, n.all_weights, $epoch
    FROM newnode n WHERE n.class IN (SELECT class FROM used);
INSERT INTO enode
    SELECT (SELECT coalesce(max(id), -1) FROM enode) + row_number() OVER (ORDER BY n.class), n.op, n.p0, n.p1, n.p2, n.p3,
           n.p4, n.p5, '', n.arity, n.c0, n.c1, n.c2, -1, -1, -1, -1, -1, n.class, $epoch, $epoch,
           r.name, false
    FROM newnode n JOIN rule_info r ON r.rule = n.rule
    WHERE n.class IN (SELECT class FROM used);
INSERT INTO pending
    SELECT DISTINCT m.root0, c.class
    FROM match m JOIN cand c ON c.mid = m.mid JOIN tnode t ON t.tid = c.tid
    WHERE m.ok AND t.root_of & 1 = 1 AND m.root0 <> c.class
    UNION
    SELECT DISTINCT m.root1, c.class
    FROM match m JOIN cand c ON c.mid = m.mid JOIN tnode t ON t.tid = c.tid
    WHERE m.ok AND t.root_of & 2 = 2 AND m.root1 <> c.class
