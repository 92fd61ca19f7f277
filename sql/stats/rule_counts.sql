-- One rule_stats row per rule that matched in the phase just applied: matches, applied,
-- rejected by the shape check or a guard, rejected by the cycle pre-filter, the new e-nodes it was
-- first to build, and matches not applied because of the e-node limit. Returns the rows: their
-- sums are the phase's totals (each new e-node is counted under one rule). Parameters: $iteration.
INSERT INTO rule_stats
SELECT $iteration, r.name, count(*), count(*) FILTER (WHERE m.ok),
       count(*) FILTER (WHERE NOT m.ok AND NOT m.cycle AND NOT m.capped),
       count(*) FILTER (WHERE m.cycle),
       coalesce(any_value(n.built), 0),
       count(*) FILTER (WHERE m.capped), 0
FROM match m
JOIN rule_info r ON r.rule = m.rule
LEFT JOIN (SELECT rule, count(*) AS built FROM newnode
           WHERE class IN (SELECT class FROM used) GROUP BY rule) n ON n.rule = m.rule
GROUP BY r.name
RETURNING *
