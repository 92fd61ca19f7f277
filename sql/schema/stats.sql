-- Run statistics: one row per iteration and phase, one row per rule and iteration.

CREATE TABLE IF NOT EXISTS iteration_stats (
    iteration     INTEGER NOT NULL,
    phase         VARCHAR NOT NULL,  -- 'runtime' (runtime rules first), 'multi' or 'single'
    matches       BIGINT  NOT NULL,  -- new matches found (semi-naive)
    applied       BIGINT  NOT NULL,  -- matches whose right-hand side was inserted
    rejected      BIGINT  NOT NULL,  -- matches refused by the shape check or a guard
    rejected_cycle BIGINT NOT NULL,  -- matches refused by the cycle pre-filter
    filtered      BIGINT  NOT NULL,  -- e-nodes put on the cycle filter list by the post-pass
    new_enodes    BIGINT  NOT NULL,
    new_eclasses  BIGINT  NOT NULL,
    unions        BIGINT  NOT NULL,  -- classes merged away (including congruence)
    enodes        BIGINT  NOT NULL,  -- e-nodes after the phase
    eclasses      BIGINT  NOT NULL,
    search_s      DOUBLE  NOT NULL,
    apply_s       DOUBLE  NOT NULL,
    rebuild_s     DOUBLE  NOT NULL,
    cycle_s       DOUBLE  NOT NULL,  -- cycle filtering (pre-filter and post-pass)
    statements    INTEGER NOT NULL,  -- SQL statements issued in the phase
    plan_s        DOUBLE  NOT NULL,  -- DuckDB planning (PREPARE) time in the phase
    exec_s        DOUBLE  NOT NULL,  -- DuckDB execution (EXECUTE) time in the phase
    merged        BIGINT  NOT NULL,  -- e-nodes merged away by congruence (new_enodes - merged:
                                     -- the net change of the e-node count)
    capped        BIGINT  NOT NULL,  -- matches not applied: the e-node limit was reached first
    epoch         INTEGER NOT NULL,  -- the phase's stamp (semi-naive search resumes from it)
    banned        BIGINT  NOT NULL   -- matches discarded by the backoff scheduler (rules banned)
);

CREATE TABLE IF NOT EXISTS rule_stats (
    iteration  INTEGER NOT NULL,
    rule       VARCHAR NOT NULL,
    matches    BIGINT  NOT NULL,
    applied    BIGINT  NOT NULL,
    rejected   BIGINT  NOT NULL,  -- by the shape check or a guard
    rejected_cycle BIGINT NOT NULL,  -- by the cycle pre-filter
    new_enodes BIGINT  NOT NULL,
    capped     BIGINT  NOT NULL,  -- not applied: the e-node limit was reached first
    banned     BIGINT  NOT NULL   -- discarded: the backoff scheduler banned the rule
);

-- The backoff scheduler's state (relsat/phase.py): one row per rule ever banned, or new to an
-- e-graph explored before (sql/search/new_rules.sql: not banned, `since` 0). A rule is not
-- searched in iterations < banned_until; `since` is where its semi-naive search starts again
-- (the matches a ban discarded are found anew; the whole e-graph for a new rule), NULL once it
-- has been searched from there.
CREATE TABLE IF NOT EXISTS rule_sched (
    rule         VARCHAR NOT NULL,
    since        INTEGER,
    banned_until INTEGER NOT NULL,
    times_banned INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS run (
    started    TIMESTAMP NOT NULL,
    iterations INTEGER   NOT NULL,
    stop       VARCHAR   NOT NULL,  -- the StopReason
    seconds    DOUBLE    NOT NULL,
    settings   VARCHAR   NOT NULL   -- JSON of the limits and options
);
