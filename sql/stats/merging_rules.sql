-- The rules whose right-hand side is an operand of their left (`and-true`: true and b is b; the
-- template op `same`) that applied matches: what they did is a union of classes, which no chosen
-- e-node records. What a report names when the extracted graph differs from the input with no
-- e-node of a rule in it. No parameters.
SELECT s.rule, sum(s.applied)
FROM rule_stats s
WHERE s.rule IN (SELECT i.name FROM rule_info i JOIN tnode t ON t.rule = i.rule WHERE t.op = 'same')
GROUP BY s.rule
HAVING sum(s.applied) > 0
ORDER BY 2 DESC, 1
