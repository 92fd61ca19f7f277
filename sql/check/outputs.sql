-- Graph outputs that do not name a canonical e-class.
SELECT pos, class FROM output WHERE class NOT IN (SELECT id FROM eclass)
