-- Facts of values kept for a class that is not canonical, kept twice, or with bounds that
-- contradict each other (lo > hi: a fact merged from an unsound one).
SELECT class FROM fact WHERE class NOT IN (SELECT id FROM eclass)
UNION ALL
SELECT class FROM fact GROUP BY class HAVING count(*) > 1
UNION ALL
SELECT class FROM fact WHERE lo > hi
