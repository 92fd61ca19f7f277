-- Ids used twice: e-node ids and e-class ids are unique.
SELECT 'enode' AS tbl, id FROM enode GROUP BY id HAVING count(*) > 1
UNION ALL
SELECT 'eclass', id FROM eclass GROUP BY id HAVING count(*) > 1
