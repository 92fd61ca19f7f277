-- The neutral rules' window (relsat/engine/phase.py, relsat/engine/relevance.py): the rules
-- $rules (rule ids of the loaded program) are not searched from this iteration on, as if banned
-- until $never. Run before the first search past the window, and again after every sync of the
-- backoff scheduler's state (which rewrites `pnode.banned_until`). Parameters: $rules, $never.
UPDATE pnode SET banned_until = $never WHERE rule IN (SELECT unnest($rules))
