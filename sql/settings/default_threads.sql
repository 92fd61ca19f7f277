-- Back to DuckDB's default number of threads (one per core; relsat/db.py Database.fit_threads).
-- No parameters.
RESET threads
