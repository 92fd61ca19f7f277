-- Union-find rows that are not fully path-compressed (the root was itself merged away) or point
-- at a class that does not exist; and merged-away ids that are still classes.
SELECT id, root FROM uf WHERE root IN (SELECT id FROM uf) OR root NOT IN (SELECT id FROM eclass)
UNION ALL
SELECT id, id FROM eclass WHERE id IN (SELECT id FROM uf)
