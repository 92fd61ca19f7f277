-- Insert what the chunk's settled matches build (after sql/apply/settle.sql and, at the e-node
-- limit, sql/apply/cap_nodes.sql): the new classes and e-nodes used by the matches still ok
-- (stamp = born = $epoch), and each such match queues the union of its root(s) with the class of
-- its right-hand side(s). `cand` holds the chunk being applied, `used` and `newnode` the whole
-- phase so far: the chunk's own new classes are those numbered from its smallest fresh id on
-- (sql/apply/instantiate.sql numbers each chunk above the earlier ones). A right-hand side
-- `(same ?x)` (a rule whose right-hand side is one of its variables) is never inserted: its
-- match is merged with the class of ?x.
-- Parameters: $epoch.
INSERT INTO used
    SELECT DISTINCT c.class FROM cand c JOIN match m ON m.mid = c.mid WHERE m.ok AND c.fresh;
INSERT INTO eclass
    SELECT n.class, n.kind, n.shape, n.shape2, n.splits, n.all_weights, $epoch
    FROM newnode n
    WHERE n.class IN (SELECT class FROM used) AND n.op <> 'same'
      AND n.class >= (SELECT min(class) FROM cand WHERE fresh);
INSERT INTO enode
    SELECT (SELECT coalesce(max(id), -1) FROM enode) + row_number() OVER (ORDER BY n.class), n.op, n.p0, n.p1, n.p2, n.p3,
           n.p4, n.p5, n.s, n.arity, n.c0, n.c1, n.c2, n.c3, n.c4, n.c5, n.c6, n.c7, n.class, $epoch,
           $epoch,
           r.name, false
    FROM newnode n JOIN rule_info r ON r.rule = n.rule
    WHERE n.class IN (SELECT class FROM used) AND n.op <> 'same'
      AND n.class >= (SELECT min(class) FROM cand WHERE fresh);
INSERT INTO pending
    SELECT DISTINCT m.root0, c.class
    FROM match m JOIN cand c ON c.mid = m.mid JOIN tnode t ON t.tid = c.tid
    WHERE m.ok AND t.root_of & 1 = 1 AND m.root0 <> c.class AND c.op <> 'same'
    UNION
    SELECT DISTINCT m.root1, c.class
    FROM match m JOIN cand c ON c.mid = m.mid JOIN tnode t ON t.tid = c.tid
    WHERE m.ok AND t.root_of & 2 = 2 AND m.root1 <> c.class AND c.op <> 'same'
    UNION
    SELECT DISTINCT m.root0, c.c0
    FROM match m JOIN cand c ON c.mid = m.mid JOIN tnode t ON t.tid = c.tid
    WHERE m.ok AND t.root_of & 1 = 1 AND m.root0 <> c.c0 AND c.op = 'same'
    UNION
    SELECT DISTINCT m.root1, c.c0
    FROM match m JOIN cand c ON c.mid = m.mid JOIN tnode t ON t.tid = c.tid
    WHERE m.ok AND t.root_of & 2 = 2 AND m.root1 <> c.c0 AND c.op = 'same'
