-- The backoff scheduler's check after a single-pattern search: the rules whose new matches exceed
-- their threshold ($limit doubled for every earlier ban), with the number found, the semi-naive
-- start their search used (their own after a ban, else $since) and how often they were banned.
-- Parameters: $limit, $since.
SELECT r.name, c.n, coalesce(s.since, $since) AS since, coalesce(s.times_banned, 0) AS times_banned
FROM (SELECT rule, count(*) AS n FROM match GROUP BY rule) c
JOIN rule_info r ON r.rule = c.rule
LEFT JOIN rule_sched s ON s.rule = r.name
WHERE c.n > $limit * (2::BIGINT ** least(coalesce(s.times_banned, 0), 40))
ORDER BY r.name
