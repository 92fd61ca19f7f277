-- The facts of the classes a round of unions merges (`remap`: old -> new root), combined into
-- the root's (relsat.graph.facts.Facts.merge: the tighter bounds, either layout fact, either
-- affine form, index grid or rows: both hold); the roots whose facts these are go to
-- `fact_changed`, so that their readers' facts are computed again.
-- Run before sql/rebuild/apply_remap.sql. No parameters.
DELETE FROM fact_merged;
INSERT INTO fact_merged
    SELECT coalesce(r.new, f.class), max(f.lo), min(f.hi), bool_or(f.halves), bool_or(f.pairs),
           max(f.digest), max(f.affine), max(f.grid), max(f.rows)
    FROM fact f LEFT JOIN remap r ON r.old = f.class
    WHERE f.class IN (SELECT old FROM remap UNION SELECT new FROM remap)
    GROUP BY 1;
DELETE FROM fact WHERE class IN (SELECT old FROM remap UNION SELECT new FROM remap);
INSERT INTO fact SELECT * FROM fact_merged;
INSERT INTO fact_changed SELECT class FROM fact_merged
