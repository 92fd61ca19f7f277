-- Work tables of one iteration (emptied at the start of each phase). No parameters.
-- They persist across iterations so that prepared statements stay valid.

-- Partial matches: the classes where pattern node pid matches, with its variable bindings.
CREATE TABLE IF NOT EXISTS sub (
    pid INTEGER NOT NULL, root BIGINT NOT NULL, fresh BOOLEAN NOT NULL, jk BIGINT NOT NULL,
    v0 BIGINT, v1 BIGINT, v2 BIGINT, v3 BIGINT, v4 BIGINT, v5 BIGINT,
    v6 BIGINT, v7 BIGINT, v8 BIGINT, v9 BIGINT, v10 BIGINT, v11 BIGINT
);

-- Matches of whole rules: one row per (rule, roots, bindings).
CREATE TABLE IF NOT EXISTS match (
    mid BIGINT NOT NULL, rule INTEGER NOT NULL, root0 BIGINT NOT NULL, root1 BIGINT NOT NULL,
    v BIGINT[] NOT NULL, ok BOOLEAN NOT NULL,
    cycle BOOLEAN NOT NULL,    -- refused by the cycle pre-filter
    capped BOOLEAN NOT NULL,   -- not applied: the phase reached the e-node limit before it
    -- the texts of the values the right-hand side computes (after the variable slots of v): a
    -- list's ("0_2_1_3"), NULL for a number
    sv VARCHAR[]
);

-- Instantiated right-hand-side nodes: per match and template, the node and its class.
CREATE TABLE IF NOT EXISTS cand (
    mid BIGINT NOT NULL, tid INTEGER NOT NULL, height INTEGER NOT NULL, op VARCHAR NOT NULL,
    p0 INTEGER NOT NULL, p1 INTEGER NOT NULL, p2 INTEGER NOT NULL, p3 INTEGER NOT NULL,
    p4 INTEGER NOT NULL, p5 INTEGER NOT NULL, arity INTEGER NOT NULL,
    c0 BIGINT NOT NULL, c1 BIGINT NOT NULL,
    class BIGINT,              -- existing class (hash-cons hit) or a fresh id
    fresh BOOLEAN NOT NULL,    -- the node does not exist yet
    c2 BIGINT NOT NULL,        -- third child (fused bias ops), else -1
    c3 BIGINT NOT NULL,        -- fourth child (attention's bias), else -1
    s VARCHAR NOT NULL DEFAULT '', -- the list parameter of a shape operator ("0_2_1_3"), else ''
    c4 BIGINT NOT NULL, c5 BIGINT NOT NULL,  -- children 4 to 7 (a batchnorm's), else -1
    c6 BIGINT NOT NULL, c7 BIGINT NOT NULL
);

-- Distinct new e-nodes of the phase, with the analysis of their (new) class.
CREATE TABLE IF NOT EXISTS newnode (
    class BIGINT NOT NULL, op VARCHAR NOT NULL,
    p0 INTEGER NOT NULL, p1 INTEGER NOT NULL, p2 INTEGER NOT NULL, p3 INTEGER NOT NULL,
    p4 INTEGER NOT NULL, p5 INTEGER NOT NULL, arity INTEGER NOT NULL,
    c0 BIGINT NOT NULL, c1 BIGINT NOT NULL,
    kind VARCHAR, shape INTEGER[], shape2 INTEGER[], splits INTEGER[][], all_weights BOOLEAN,
    valid BOOLEAN NOT NULL,
    rule INTEGER NOT NULL,     -- the first rule (lowest match id) that built it
    c2 BIGINT NOT NULL,        -- third child, else -1
    c3 BIGINT NOT NULL,        -- fourth child, else -1
    s VARCHAR NOT NULL DEFAULT '', -- the list parameter, else ''
    c4 BIGINT NOT NULL, c5 BIGINT NOT NULL,  -- children 4 to 7, else -1
    c6 BIGINT NOT NULL, c7 BIGINT NOT NULL
);

-- The new classes that the accepted matches use (inserted into the e-graph).
CREATE TABLE IF NOT EXISTS used (class BIGINT NOT NULL);

-- The class graph (e-nodes not filtered) and each class's rank (longest path to a leaf), for
-- the cycle pre-filter (relsat/cycles.py).
CREATE TABLE IF NOT EXISTS cedge (class BIGINT NOT NULL, child BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS crank (class BIGINT NOT NULL, rank BIGINT NOT NULL);

-- Pending unions (class pairs), and one round's canonical mapping old -> new.
CREATE TABLE IF NOT EXISTS pending (a BIGINT NOT NULL, b BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS remap (old BIGINT NOT NULL, new BIGINT NOT NULL);

-- Facts of values (relsat/engine/facts.py): the classes whose facts changed since their readers'
-- were computed, and one round of unions' merged facts (sql/rebuild/merge_facts.sql).
CREATE TABLE IF NOT EXISTS fact_changed (class BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS fact_merged (
    class BIGINT NOT NULL, lo DOUBLE, hi DOUBLE, halves BOOLEAN NOT NULL, pairs BOOLEAN NOT NULL,
    digest VARCHAR, affine VARCHAR, grid BIGINT[], rows BIGINT[]
);
