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
UPDATE enode SET
    class = coalesce(m.mp[class], class),
    c0 = coalesce(m.mp[c0], c0), c1 = coalesce(m.mp[c1], c1), c2 = coalesce(m.mp[c2], c2),
    c3 = coalesce(m.mp[c3], c3), c4 = coalesce(m.mp[c4], c4), c5 = coalesce(m.mp[c5], c5),
    c6 = coalesce(m.mp[c6], c6), c7 = coalesce(m.mp[c7], c7),
    stamp = $epoch
FROM (SELECT map(list(old), list(new)) AS mp FROM remap) m
WHERE enode.id IN (
    SELECT t.id
    FROM (SELECT id, unnest([class, c0, c1, c2, c3, c4, c5, c6, c7]) AS k FROM enode) t
    JOIN remap r ON r.old = t.k);
UPDATE output SET class = r.new FROM remap r WHERE output.class = r.old
