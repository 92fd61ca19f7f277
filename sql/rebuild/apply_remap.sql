-- Apply one round of unions: `remap` maps every merged-away class to its new root (the smallest id
-- of its component). Keeps union-find fully path-compressed, merges the analysis into the root
-- (all_weights is OR'ed, as TENSAT does), and re-canonicalizes only the e-nodes that mention a
-- merged-away class, stamping them with $epoch so the next search sees them as new.
-- Parameters: $epoch.
UPDATE uf SET root = r.new FROM remap r WHERE uf.root = r.old;
INSERT INTO uf SELECT old, new FROM remap;
UPDATE eclass SET all_weights = true
WHERE NOT all_weights
  AND id IN (SELECT r.new FROM remap r JOIN eclass o ON o.id = r.old WHERE o.all_weights);
DELETE FROM eclass WHERE id IN (SELECT old FROM remap);
-- Each column is looked up with a join on the touched rows only (a MAP lookup per column costs
-- a scan of the map: quadratic in the number of unions).
UPDATE enode SET
    class = u.class, c0 = u.c0, c1 = u.c1, c2 = u.c2, c3 = u.c3, c4 = u.c4, c5 = u.c5,
    c6 = u.c6, c7 = u.c7, stamp = $epoch
FROM (
    SELECT e.id, coalesce(rk.new, e.class) AS class,
           coalesce(r0.new, e.c0) AS c0, coalesce(r1.new, e.c1) AS c1,
           coalesce(r2.new, e.c2) AS c2, coalesce(r3.new, e.c3) AS c3,
           coalesce(r4.new, e.c4) AS c4, coalesce(r5.new, e.c5) AS c5,
           coalesce(r6.new, e.c6) AS c6, coalesce(r7.new, e.c7) AS c7
    FROM enode e
    LEFT JOIN remap rk ON rk.old = e.class
    LEFT JOIN remap r0 ON r0.old = e.c0
    LEFT JOIN remap r1 ON r1.old = e.c1
    LEFT JOIN remap r2 ON r2.old = e.c2
    LEFT JOIN remap r3 ON r3.old = e.c3
    LEFT JOIN remap r4 ON r4.old = e.c4
    LEFT JOIN remap r5 ON r5.old = e.c5
    LEFT JOIN remap r6 ON r6.old = e.c6
    LEFT JOIN remap r7 ON r7.old = e.c7
    WHERE e.id IN (
        SELECT t.id
        FROM (SELECT id, unnest([class, c0, c1, c2, c3, c4, c5, c6, c7]) AS k FROM enode) t
        JOIN remap r ON r.old = t.k)
) u
WHERE enode.id = u.id;
UPDATE output SET class = r.new FROM remap r WHERE output.class = r.old
