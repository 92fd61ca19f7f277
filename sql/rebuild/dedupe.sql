-- After congruence closure, equal e-nodes sit in the same class: keep the oldest (smallest id)
-- of each, looking only at e-nodes stamped $epoch (as the newer or the older of a pair: two
-- joins, each building on the stamped e-nodes only, where one join with an OR of both sides'
-- stamps would hash the whole table). Parameters: $epoch.
DELETE FROM enode
WHERE id IN (
    WITH recent AS MATERIALIZED (SELECT * FROM enode WHERE stamp = $epoch)
    SELECT b.id
    FROM enode a
    JOIN recent b
      ON a.op = b.op AND a.p0 = b.p0 AND a.p1 = b.p1 AND a.p2 = b.p2 AND a.p3 = b.p3
     AND a.p4 = b.p4 AND a.p5 = b.p5 AND a.s = b.s AND a.arity = b.arity
     AND a.c0 = b.c0 AND a.c1 = b.c1 AND a.c2 = b.c2 AND a.c3 = b.c3
     AND a.c4 = b.c4 AND a.c5 = b.c5 AND a.c6 = b.c6 AND a.c7 = b.c7
     AND a.class = b.class AND a.id < b.id
    UNION
    SELECT b.id
    FROM recent a
    JOIN enode b
      ON a.op = b.op AND a.p0 = b.p0 AND a.p1 = b.p1 AND a.p2 = b.p2 AND a.p3 = b.p3
     AND a.p4 = b.p4 AND a.p5 = b.p5 AND a.s = b.s AND a.arity = b.arity
     AND a.c0 = b.c0 AND a.c1 = b.c1 AND a.c2 = b.c2 AND a.c3 = b.c3
     AND a.c4 = b.c4 AND a.c5 = b.c5 AND a.c6 = b.c6 AND a.c7 = b.c7
     AND a.class = b.class AND a.id < b.id
)
