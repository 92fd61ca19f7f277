-- The pending unions, as class pairs (relsat/rebuild.py computes their components). No parameters.
SELECT a, b FROM pending
