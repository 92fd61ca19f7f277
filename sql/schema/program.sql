-- The compiled rule program (relsat/compile.py): rules as rows, loaded once per run.
-- No parameters.

CREATE TABLE IF NOT EXISTS rule_info (
    rule      INTEGER NOT NULL,  -- rule id (position in the rule set)
    name      VARCHAR NOT NULL,
    multi     BOOLEAN NOT NULL,  -- two left-hand sides
    symmetric_pairs BOOLEAN NOT NULL,  -- multi: sources equal up to renaming, pairs tried once
    pid0      INTEGER NOT NULL,  -- root pattern node of the first left-hand side
    pid1      INTEGER NOT NULL,  -- multi: root pattern node of the second, else -1
    key       VARCHAR NOT NULL,  -- what the rule does (relsat.compile.rule_key)
    conds     BOOLEAN NOT NULL DEFAULT false,  -- has 'where' conditions (Program.cond_sql)
    derives   BOOLEAN NOT NULL DEFAULT false   -- computes values (Program.derive_sql)
);

-- Left-hand-side pattern nodes. A node matches an e-node with the same op, literals and arity;
-- child position j (0 to 7) binds variable slot x_j, or must be in a class matched by one of the
-- node's sub-patterns (at most three, at any positions: dpid, spid, tpid).
CREATE TABLE IF NOT EXISTS pnode (
    rule INTEGER NOT NULL, pid INTEGER NOT NULL, lhs INTEGER NOT NULL, is_root BOOLEAN NOT NULL,
    height INTEGER NOT NULL,   -- 0: all children are variables
    op VARCHAR NOT NULL, l0 INTEGER NOT NULL, l1 INTEGER NOT NULL, l2 INTEGER NOT NULL,
    l3 INTEGER NOT NULL, arity INTEGER NOT NULL,
    x0 INTEGER NOT NULL, x1 INTEGER NOT NULL,        -- variable slot at child 0 / 1, or -1
    jslot INTEGER NOT NULL,    -- multi roots: slot of the first shared variable (join key), or -1
    multi BOOLEAN NOT NULL,
    x2 INTEGER NOT NULL,       -- variable slot at child 2 (fused bias ops), or -1
    x3 INTEGER NOT NULL,       -- variable slot at child 3 (attention's bias), or -1
    -- variable slots at children 4 to 7 (a batchnorm's mean and variance), or -1
    x4 INTEGER NOT NULL DEFAULT -1, x5 INTEGER NOT NULL DEFAULT -1,
    x6 INTEGER NOT NULL DEFAULT -1, x7 INTEGER NOT NULL DEFAULT -1,
    -- the deep sub-pattern (the first of height - 1, from whose matches the search finds this
    -- node's) and up to two others, each as pattern node and child position, or -1
    dpid INTEGER NOT NULL, dpos INTEGER NOT NULL, spid INTEGER NOT NULL, spos INTEGER NOT NULL,
    tpid INTEGER NOT NULL DEFAULT -1, tpos INTEGER NOT NULL DEFAULT -1,
    -- parameter variables: the slot that integer argument i binds (its literal l_i is then not
    -- tested), or -1
    y0 INTEGER NOT NULL, y1 INTEGER NOT NULL, y2 INTEGER NOT NULL, y3 INTEGER NOT NULL,
    comm BOOLEAN NOT NULL,     -- a commutative op (relsat.rewrite.rules.COMMUTATIVE): either order
    -- the list parameter (a transpose's perm, a reshape's shape: the e-node's string s): the
    -- literal it must equal (NULL: any), or the slot a variable binds it to (its key, skey(s)),
    -- or -1
    ls VARCHAR, ys INTEGER NOT NULL DEFAULT -1,
    -- the backoff scheduler's state of the node's rule (relsat/phase.py, `rule_sched`): the
    -- semi-naive start of a rule whose matches were discarded by a ban (NULL: the phase's), and
    -- the iteration from which it is searched again
    since INTEGER, banned_until INTEGER NOT NULL DEFAULT 0,
    -- where slot k's binding comes from (relsat/engine/compile.py _slot_sources): child j as j,
    -- integer argument i as 8 + i, the list parameter as 12, or -1 (not bound here); and
    -- whether a slot is bound at two children (their classes must be equal)
    w0 INTEGER NOT NULL, w1 INTEGER NOT NULL, w2 INTEGER NOT NULL, w3 INTEGER NOT NULL,
    w4 INTEGER NOT NULL, w5 INTEGER NOT NULL, w6 INTEGER NOT NULL, w7 INTEGER NOT NULL,
    w8 INTEGER NOT NULL, w9 INTEGER NOT NULL, w10 INTEGER NOT NULL, w11 INTEGER NOT NULL,
    dup BOOLEAN NOT NULL
);

-- Right-hand-side templates: child j (0 to 7) is a variable slot (k_j = 1) or another template
-- (k_j = 2).
CREATE TABLE IF NOT EXISTS tnode (
    rule INTEGER NOT NULL, tid INTEGER NOT NULL, height INTEGER NOT NULL, op VARCHAR NOT NULL,
    p0 INTEGER NOT NULL, p1 INTEGER NOT NULL, p2 INTEGER NOT NULL, p3 INTEGER NOT NULL,
    p4 INTEGER NOT NULL, p5 INTEGER NOT NULL, arity INTEGER NOT NULL,
    k0 INTEGER NOT NULL, r0 INTEGER NOT NULL, k1 INTEGER NOT NULL, r1 INTEGER NOT NULL,
    cut_slot INTEGER NOT NULL, cut_dim INTEGER NOT NULL,  -- split: cut = dim cut_dim of slot
    root_of INTEGER NOT NULL,  -- bit i set: the root of right-hand side i
    -- parameter i from slot q_i of the match (a parameter variable, or the value of the
    -- right-hand side's arithmetic, appended after the variable slots), or -1: the literal p_i
    q0 INTEGER NOT NULL, q1 INTEGER NOT NULL, q2 INTEGER NOT NULL, q3 INTEGER NOT NULL,
    q4 INTEGER NOT NULL, q5 INTEGER NOT NULL,
    k2 INTEGER NOT NULL, r2 INTEGER NOT NULL,         -- child 2, as k0/r0 (0: none)
    k3 INTEGER NOT NULL, r3 INTEGER NOT NULL,         -- child 3 (attention's bias)
    -- children 4 to 7 (a batchnorm's mean and variance)
    k4 INTEGER NOT NULL DEFAULT 0, r4 INTEGER NOT NULL DEFAULT -1,
    k5 INTEGER NOT NULL DEFAULT 0, r5 INTEGER NOT NULL DEFAULT -1,
    k6 INTEGER NOT NULL DEFAULT 0, r6 INTEGER NOT NULL DEFAULT -1,
    k7 INTEGER NOT NULL DEFAULT 0, r7 INTEGER NOT NULL DEFAULT -1,
    dref INTEGER NOT NULL,     -- the first template child of height - 1, or -1 (height 0)
    -- the list parameter: the literal s, or from slot qs of the match (a variable's key, read
    -- back through `strs`; a computed list's text, `match.sv`), or -1
    s VARCHAR NOT NULL DEFAULT '', qs INTEGER NOT NULL DEFAULT -1
);

-- The template children of each template (tnode's k_i = 2): child template `child` at position
-- `pos` of template `tid` (filled from tnode with the program, sql/apply/template_children.sql).
CREATE TABLE IF NOT EXISTS tkid (tid INTEGER NOT NULL, pos INTEGER NOT NULL, child INTEGER NOT NULL);

CREATE TABLE IF NOT EXISTS rguard (
    rule INTEGER NOT NULL, name VARCHAR NOT NULL,
    a0 INTEGER NOT NULL, a1 INTEGER NOT NULL, a2 INTEGER NOT NULL, a3 INTEGER NOT NULL
);

-- A list parameter's key (the value a variable of type ints binds): a 63-bit hash of its text
-- ("0_2_1_3"), so that it fits a match's slot and equal lists have equal keys.
CREATE OR REPLACE MACRO skey(t) AS CAST(hash(t) >> 1 AS BIGINT);

-- The search's reading of an e-node for a pattern node (sql/search/match*.sql): the binding of
-- one slot from its source `w` (child j as j, integer parameter i as 8 + i, the list parameter's
-- key as 12, -1: not bound here; relsat/engine/compile.py _slot_sources), the child class at
-- position `pos`, and whether every child bound to a slot already bound at an earlier child
-- (slots x0…x7, -1: a sub-pattern) has that child's class.
CREATE OR REPLACE MACRO slot_value(w, c0, c1, c2, c3, c4, c5, c6, c7, p0, p1, p2, p3, sk) AS
    CASE w WHEN -1 THEN NULL WHEN 0 THEN c0 WHEN 1 THEN c1 WHEN 2 THEN c2 WHEN 3 THEN c3
           WHEN 4 THEN c4 WHEN 5 THEN c5 WHEN 6 THEN c6 WHEN 7 THEN c7 WHEN 8 THEN p0
           WHEN 9 THEN p1 WHEN 10 THEN p2 WHEN 11 THEN p3 ELSE sk END;
CREATE OR REPLACE MACRO child_at(pos, c0, c1, c2, c3, c4, c5, c6, c7) AS
    CASE pos WHEN 0 THEN c0 WHEN 1 THEN c1 WHEN 2 THEN c2 WHEN 3 THEN c3 WHEN 4 THEN c4
             WHEN 5 THEN c5 WHEN 6 THEN c6 ELSE c7 END;
CREATE OR REPLACE MACRO repeats_agree(x0, x1, x2, x3, x4, x5, x6, x7,
                                      c0, c1, c2, c3, c4, c5, c6, c7) AS
    (x1 < 0 OR c1 = CASE x1 WHEN x0 THEN c0 ELSE c1 END)
    AND (x2 < 0 OR c2 = CASE x2 WHEN x0 THEN c0 WHEN x1 THEN c1 ELSE c2 END)
    AND (x3 < 0 OR c3 = CASE x3 WHEN x0 THEN c0 WHEN x1 THEN c1 WHEN x2 THEN c2 ELSE c3 END)
    AND (x4 < 0 OR c4 = CASE x4 WHEN x0 THEN c0 WHEN x1 THEN c1 WHEN x2 THEN c2 WHEN x3 THEN c3
                                ELSE c4 END)
    AND (x5 < 0 OR c5 = CASE x5 WHEN x0 THEN c0 WHEN x1 THEN c1 WHEN x2 THEN c2 WHEN x3 THEN c3
                                WHEN x4 THEN c4 ELSE c5 END)
    AND (x6 < 0 OR c6 = CASE x6 WHEN x0 THEN c0 WHEN x1 THEN c1 WHEN x2 THEN c2 WHEN x3 THEN c3
                                WHEN x4 THEN c4 WHEN x5 THEN c5 ELSE c6 END)
    AND (x7 < 0 OR c7 = CASE x7 WHEN x0 THEN c0 WHEN x1 THEN c1 WHEN x2 THEN c2 WHEN x3 THEN c3
                                WHEN x4 THEN c4 WHEN x5 THEN c5 WHEN x6 THEN c6 ELSE c7 END);

-- The ONNX operators relsat keeps opaque whose two inputs commute, by the key of their type
-- (relsat.graph.ops.opaque_key; relsat.rewrite.rules.COMMUTATIVE), written with the schema.
CREATE TABLE IF NOT EXISTS commuting (key INTEGER NOT NULL);

-- E-nodes as patterns see them: every e-node as it is (turned = false), and the e-nodes of a
-- commutative operator (relsat.rewrite.rules.COMMUTATIVE: ewadd, ewmul, and the opaque ONNX
-- operators of `commuting` with two inputs) once more with their two operands swapped (turned =
-- true), so that one pattern matches either operand order (a pattern node with comm = false only
-- sees e-nodes not turned); `sk`: the key of a shape operator's list parameter.
CREATE OR REPLACE VIEW enode_either AS
SELECT id, op, p0, p1, p2, p3, p4, p5, s, arity, c0, c1, c2, c3, c4, c5, c6, c7, class, born,
       stamp, rule, filtered, false AS turned,
       CASE WHEN op IN ('transpose', 'reshape', 'expand') THEN skey(s) END AS sk
FROM enode
UNION ALL
SELECT id, op, p0, p1, p2, p3, p4, p5, s, arity, c1, c0, c2, c3, c4, c5, c6, c7, class, born,
       stamp, rule, filtered, true AS turned, NULL AS sk
FROM enode
WHERE (op IN ('ewadd', 'ewmul')
       OR (op = 'opaque' AND arity = 2 AND p0 IN (SELECT key FROM commuting)))
  AND c0 <> c1;

-- The lists of the e-graph's shape operators by key, where a variable's key is read back as its
-- text (a list a right-hand side computes travels as text with its match, `match.sv`).
CREATE OR REPLACE VIEW strs AS
SELECT DISTINCT skey(s) AS h, s FROM enode WHERE op IN ('transpose', 'reshape', 'expand');

-- ...and as lists, for the generated statements to join (relsat.engine.compile).
CREATE OR REPLACE VIEW lists AS
SELECT h, list_transform(string_split(s, '_'), lambda x: CAST(x AS BIGINT)) AS v FROM strs;

-- A list parameter's value from its key (NULL: no such list).
CREATE OR REPLACE MACRO ilist(key) AS (
    SELECT list_transform(string_split(s, '_'), lambda x: CAST(x AS BIGINT))
    FROM strs WHERE h = key LIMIT 1
);
