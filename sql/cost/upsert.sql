-- Move the staged rows of cost_in into cost, replacing rows of the same (device, key).
-- No parameters.
INSERT OR REPLACE INTO cost SELECT DISTINCT ON (device, key) * FROM cost_in;
DELETE FROM cost_in;
