-- E-nodes whose class or a child class is not a canonical e-class (dangling or non-canonical id).
SELECT e.id, e.op, e.class, e.c0, e.c1
FROM enode e
WHERE e.class NOT IN (SELECT id FROM eclass)
   OR (e.c0 >= 0 AND e.c0 NOT IN (SELECT id FROM eclass))
   OR (e.c1 >= 0 AND e.c1 NOT IN (SELECT id FROM eclass))
   OR (e.c2 >= 0 AND e.c2 NOT IN (SELECT id FROM eclass))
   OR (e.c3 >= 0 AND e.c3 NOT IN (SELECT id FROM eclass))
   OR (e.c4 >= 0 AND e.c4 NOT IN (SELECT id FROM eclass))
   OR (e.c5 >= 0 AND e.c5 NOT IN (SELECT id FROM eclass))
   OR (e.c6 >= 0 AND e.c6 NOT IN (SELECT id FROM eclass))
   OR (e.c7 >= 0 AND e.c7 NOT IN (SELECT id FROM eclass))
