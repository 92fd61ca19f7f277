-- The e-graph: e-nodes, e-classes with their analysis, union-find, outputs.
-- No parameters. Children and absent parameters are -1 (never NULL), so that equality joins
-- and the hash-cons key work without IS NOT DISTINCT FROM.

CREATE TABLE IF NOT EXISTS meta (
    key   VARCHAR PRIMARY KEY,    -- 'schema_version', 'relsat_version', ...
    value VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS enode (
    id     BIGINT  NOT NULL,      -- e-node id, unique, never reused
    op     VARCHAR NOT NULL,      -- operator (TENSAT's name: matmul, conv2d, concat, split_0, ...)
    p0     INTEGER NOT NULL,      -- integer parameters in TENSAT's argument order, -1 if absent
                                  -- (opaque: p0 the key of its ONNX type, for rules to test)
    p1     INTEGER NOT NULL,
    p2     INTEGER NOT NULL,
    p3     INTEGER NOT NULL,
    p4     INTEGER NOT NULL,
    p5     INTEGER NOT NULL,
    s      VARCHAR NOT NULL,      -- string parameter: tensor name, reshape shape, perm, opaque signature
    arity  INTEGER NOT NULL,      -- number of children
    c0     BIGINT  NOT NULL,      -- child e-class ids (canonical after rebuild), -1 if absent
    c1     BIGINT  NOT NULL,
    c2     BIGINT  NOT NULL,
    c3     BIGINT  NOT NULL,
    c4     BIGINT  NOT NULL,
    c5     BIGINT  NOT NULL,
    c6     BIGINT  NOT NULL,
    c7     BIGINT  NOT NULL,
    class  BIGINT  NOT NULL,      -- the e-class this e-node belongs to (canonical after rebuild)
    born   INTEGER NOT NULL,      -- iteration that created it (0 = input graph)
    stamp  INTEGER NOT NULL,      -- last iteration that created or re-canonicalized it (semi-naive)
    rule   VARCHAR,              -- the rule whose application created it (NULL for the input graph)
    filtered BOOLEAN NOT NULL     -- on the cycle filter list: ignored by searches, never extracted
);

CREATE TABLE IF NOT EXISTS eclass (
    id          BIGINT    NOT NULL,  -- canonical e-class id
    kind        VARCHAR   NOT NULL,  -- 'tensor', 'pair' (a split), 'unit' (a noop)
    shape       INTEGER[] NOT NULL,  -- tensor shape; for a pair: piece 0
    shape2      INTEGER[],           -- pair only: piece 1
    splits      INTEGER[][],         -- TASO split history per dim (input-graph classes)
    all_weights BOOLEAN   NOT NULL,  -- computable from weights alone (TENSAT's all_weights)
    born        INTEGER   NOT NULL
);

-- Facts about an e-class's values (relsat.graph.facts; the analysis rules' guards read:
-- finite(?m), nonneg(?x), halves(?c), pairs(?c), lo(?a), hi(?a)): one row per class where
-- something is known.
-- Seeded from the input graph, computed for rule-built e-nodes (relsat.engine.facts), merged on
-- union (the tighter bounds, either layout fact).
CREATE TABLE IF NOT EXISTS fact (
    class  BIGINT  NOT NULL,
    lo     DOUBLE,               -- every value >= lo (NULL: unknown); within float32's range
    hi     DOUBLE,               -- every value <= hi (NULL: unknown)
    halves BOOLEAN NOT NULL,     -- the halves of the last axis are equal (concat(h, h))
    pairs  BOOLEAN NOT NULL,     -- entries 2i and 2i+1 of the last axis are equal
    digest VARCHAR,              -- a constant's value hash (NULL: not a constant, or too large)
    affine VARCHAR,              -- an integer tensor's affine form over the dims, as JSON text
                                 -- (relsat.onnx.affine; NULL: unknown)
    grid   BIGINT[],             -- a GatherND index: the dims of the data it reads whole
                                 -- (relsat.onnx.affine.grid_dims; NULL: no index grid)
    rows   BIGINT[]              -- a row index: the dims > 1 of the data it reads whole,
                                 -- flattened (relsat.onnx.affine.row_dims; NULL: none)
);

-- Union-find, kept fully path-compressed: every merged-away id points straight at its root.
CREATE TABLE IF NOT EXISTS uf (
    id   BIGINT NOT NULL,
    root BIGINT NOT NULL
);

-- The graph outputs: output position -> e-class (canonical after rebuild).
CREATE TABLE IF NOT EXISTS output (
    pos   INTEGER NOT NULL,
    class BIGINT  NOT NULL
);
