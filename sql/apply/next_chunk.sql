-- Make room for the next chunk of a phase's matches (relsat/explore.py): its right-hand sides are
-- instantiated afresh. `newnode`, `used` and `pending` keep the whole phase. No parameters.
DELETE FROM cand
