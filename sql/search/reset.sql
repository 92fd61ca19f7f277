-- Empty the work tables before a search phase. No parameters.
DELETE FROM sub;
DELETE FROM match;
DELETE FROM cand;
DELETE FROM newnode;
DELETE FROM used;
DELETE FROM pending
