-- Every e-node with its operator signature: op, params (an opaque e-node's p0 and p1, its type's
-- key and an attribute for rules, are left out: both are in s, and price keys stay as they
-- were), s, its children's shapes in argument order, its output shape (its e-class's; piece 0
-- for a split's pair), whether all its children are weight-only (`all_weights`) and whether each is
-- (`weight_only`, in argument order). Identical signatures share a `sig` number (0-based, dense).
-- A split_0/split_1 child is a pair class: its shape is piece 0 (irrelevant, they cost 0).
-- $constants (BOOLEAN): whether `weight_only` is part of the signature (for cost models whose
-- price depends on which inputs are weight-only); false numbers signatures as before.
WITH child AS (
    SELECT id AS enode,
           unnest(range(arity)) AS pos,
           unnest([c0, c1, c2, c3, c4, c5, c6, c7][1:arity]) AS class
    FROM enode
), args AS (
    SELECT c.enode,
           list(k.shape ORDER BY c.pos) AS inputs,
           list(k.all_weights ORDER BY c.pos) AS weight_only,
           bool_and(k.all_weights) AS all_weights
    FROM child c JOIN eclass k ON k.id = c.class
    GROUP BY c.enode
), sig AS (
    SELECT e.id AS enode, e.op, CASE WHEN e.op = 'opaque' THEN -1 ELSE e.p0 END AS p0,
           CASE WHEN e.op = 'opaque' THEN -1 ELSE e.p1 END AS p1, e.p2, e.p3, e.p4, e.p5, e.s,
           coalesce(a.inputs, []::INTEGER[][]) AS inputs,
           o.shape AS output,
           coalesce(a.all_weights, false) AS all_weights,
           coalesce(a.weight_only, []::BOOLEAN[]) AS weight_only
    FROM enode e
    JOIN eclass o ON o.id = e.class
    LEFT JOIN args a ON a.enode = e.id
)
SELECT *,
       dense_rank() OVER (
           ORDER BY op, p0, p1, p2, p3, p4, p5, s, inputs, output,
                    CASE WHEN $constants THEN weight_only END
       ) - 1 AS sig
FROM sig
ORDER BY enode
