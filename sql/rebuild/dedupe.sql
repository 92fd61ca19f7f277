-- After congruence closure, equal e-nodes sit in the same class: keep the oldest (smallest id)
-- of each, looking only at pairs with an e-node stamped $epoch. One join that builds on the
-- stamped e-nodes (`recent`) and deletes the newer of each pair; a join of the whole table with
-- itself on an OR of both sides' stamps would hash every e-node. Parameters: $epoch.
DELETE FROM enode
WHERE id IN (
    SELECT greatest(r.id, o.id)
    FROM enode o
    JOIN (SELECT * FROM enode WHERE stamp = $epoch) r
      ON o.op = r.op AND o.p0 = r.p0 AND o.p1 = r.p1 AND o.p2 = r.p2 AND o.p3 = r.p3
     AND o.p4 = r.p4 AND o.p5 = r.p5 AND o.s = r.s AND o.arity = r.arity
     AND o.c0 = r.c0 AND o.c1 = r.c1 AND o.c2 = r.c2 AND o.c3 = r.c3
     AND o.c4 = r.c4 AND o.c5 = r.c5 AND o.c6 = r.c6 AND o.c7 = r.c7
     AND o.class = r.class AND o.id <> r.id
)
