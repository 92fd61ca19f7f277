-- The synthesizer's tables (relsat.synth.terms): operator templates and enumerated terms.
-- No parameters.

-- One row per operator template: an operator with its integer parameters fixed; `kind` says
-- which children fit (see relsat/synth/vocab.py), `arity` how many tensor children it takes.
CREATE TABLE synth_op (
    op    VARCHAR NOT NULL,
    kind  VARCHAR NOT NULL,
    arity INTEGER NOT NULL,
    p0    INTEGER,
    p1    INTEGER,
    p2    INTEGER,
    p3    INTEGER
);

-- One row per enumerated term: a variable or constant (size 0) or an operator template applied
-- to representative terms c0, c1. `weight`: every leaf below is a weight variable. `fp`: float fingerprint; `fpx`: exact (modular) fingerprint,
-- NULL for a term with an inexact operator; `class`: the term that represents every term of
-- equal type (shape, split history) and fingerprint (the smallest id); only representatives
-- are built upon.
CREATE TABLE synth_term (
    id    BIGINT    NOT NULL PRIMARY KEY,
    size  INTEGER   NOT NULL,
    op    VARCHAR   NOT NULL,
    p0    INTEGER,
    p1    INTEGER,
    p2    INTEGER,
    p3    INTEGER,
    c0    BIGINT,
    c1    BIGINT,
    shape INTEGER[] NOT NULL,
    splits INTEGER[][] NOT NULL,  -- split history: per dimension, the concat boundaries recorded
    weight BOOLEAN  NOT NULL,  -- computable from weight variables alone (TENSAT's all_weights)
    fp    BIGINT    NOT NULL,
    fpx   BIGINT,
    class BIGINT
);
