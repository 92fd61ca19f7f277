-- The three rules with the most matches since iteration $first, with the e-nodes they were
-- first to build: what a stop at a limit names. Parameters: $first.
SELECT rule, sum(matches), sum(new_enodes)
FROM rule_stats
WHERE iteration >= $first
GROUP BY rule
ORDER BY 2 DESC, 1
LIMIT 3
