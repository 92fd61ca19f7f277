-- The program's template children (`tkid`) from `tnode`: one row per child of kind 2 (a
-- template of lower height), so that instantiating a height joins the built children once, not
-- once per child position. No parameters.
DELETE FROM tkid;
INSERT INTO tkid
SELECT tid, pos, child
FROM (
    SELECT tid,
           unnest([k0, k1, k2, k3, k4, k5, k6, k7]) AS kind,
           unnest([r0, r1, r2, r3, r4, r5, r6, r7]) AS child,
           unnest(range(8)) AS pos
    FROM tnode
)
WHERE kind = 2
