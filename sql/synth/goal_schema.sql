-- The goal search's tables (relsat.synth.search): the values of the enumerated terms and the
-- targets looked up among them, each as a random projection of its value vector (broadcast to
-- the goal's shape), so that a lookup within a tolerance is a range join. No parameters.

-- One row per representative term that can take part in a spelling: `proj` the projection of
-- its (finite) values.
CREATE TABLE synth_value (
    id   BIGINT  NOT NULL PRIMARY KEY,
    size INTEGER NOT NULL,
    proj DOUBLE  NOT NULL
);

-- One row per target of a lookup batch: the projection's range [lo, hi] that a term within the
-- tolerance of the target's values falls in.
CREATE TABLE synth_target (
    tid  BIGINT  NOT NULL,
    lo   DOUBLE  NOT NULL,
    hi   DOUBLE  NOT NULL
);
