-- The cost table (operator signature -> milliseconds, per device) and the priced e-nodes.
-- No parameters. Created on demand by relsat.cost; a cost table saved as Parquet has these columns.

CREATE TABLE IF NOT EXISTS cost (
    device VARCHAR NOT NULL,   -- device the time is for ('h100', 't4', ...)
    key    VARCHAR NOT NULL,   -- OpSignature.key: compact JSON of op, params, s, inputs, output
    op     VARCHAR NOT NULL,
    p0     INTEGER NOT NULL,   -- integer parameters in the e-node encoding, -1 if absent
    p1     INTEGER NOT NULL,
    p2     INTEGER NOT NULL,
    p3     INTEGER NOT NULL,
    p4     INTEGER NOT NULL,
    p5     INTEGER NOT NULL,
    s      VARCHAR NOT NULL,
    inputs VARCHAR NOT NULL,   -- JSON list of input shapes, in argument order
    output VARCHAR NOT NULL,   -- JSON output shape
    ms     DOUBLE  NOT NULL,   -- one run, milliseconds
    source VARCHAR NOT NULL,   -- 'analytic', 'measured:<backend>', ...
    spread DOUBLE,             -- IQR of the repeats over their median; NULL: unknown
    load   DOUBLE,             -- others' share of the CPU while timed; NULL: unknown
    PRIMARY KEY (device, key)
);

-- A cost table of a database written before spread and load existed: the columns added (at
-- the end, where CREATE puts them), its rows' NULL (unknown).
ALTER TABLE cost ADD COLUMN IF NOT EXISTS spread DOUBLE;
ALTER TABLE cost ADD COLUMN IF NOT EXISTS load DOUBLE;

-- Staging for set-at-a-time upserts (cost/upsert.sql).
CREATE TEMP TABLE IF NOT EXISTS cost_in AS SELECT * FROM cost LIMIT 0;

-- Every e-node's price under one model and policy (relsat.cost.price_egraph), replaced each time.
CREATE TABLE IF NOT EXISTS enode_cost (
    enode BIGINT NOT NULL,
    ms    DOUBLE NOT NULL
);
