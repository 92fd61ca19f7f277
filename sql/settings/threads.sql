-- Run this connection's statements on $n threads (relsat/db.py Database.fit_threads).
-- Parameters: $n.
SET threads = $n
