-- The e-node limit inside a phase: matches are applied in match-id order (deterministic: by rule,
-- then root classes and bindings) for as long as the distinct new e-nodes they build fit in
-- $budget (what is left of the limit after the earlier chunks of the phase); from the first match
-- of the chunk in `cand` that would go past it on, every match still ok, in this chunk or a later
-- one, is capped (not applied, counted in `capped`). Runs after the shape check, so only matches
-- that would really be applied count. Parameters: $budget.
UPDATE match SET ok = false, capped = true
WHERE ok AND mid >= (
    WITH firsts AS (  -- each new class, with the first match that builds it
        SELECT min(c.mid) AS mid
        FROM cand c JOIN match m ON m.mid = c.mid
        WHERE m.ok AND c.fresh
        GROUP BY c.class
    ), running AS (
        SELECT mid, sum(count(*)) OVER (ORDER BY mid) AS total FROM firsts GROUP BY mid
    )
    SELECT min(mid) FROM running WHERE total > $budget
)
