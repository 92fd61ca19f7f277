-- E-classes that no e-node belongs to.
SELECT id FROM eclass WHERE id NOT IN (SELECT class FROM enode)
