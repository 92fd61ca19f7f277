# ruff: noqa: E501
"""List parameters in rules: the shape operators (transpose, reshape) in patterns, with
variables of type ``ints``, list literals, list functions and the ``shape`` fact.

The e-graph keeps a shape operator's list in its string column (``"0_2_1_3"``); a variable binds
the list's key (a hash) in a match slot, conditions and right-hand sides read the list back
(``strs``), and a list a right-hand side computes travels with its match as text (``match.sv``).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from relsat.engine.compile import MAX_VARS, expr_sql
from relsat.engine.db import sql_text
from relsat.engine.egraph import EGraph
from relsat.engine.explore import explore
from relsat.errors import RuleError
from relsat.graph.builder import GraphBuilder
from relsat.graph.ops import f32_bits
from relsat.rewrite.check import check_rule
from relsat.rewrite.check import evaluate as evaluate_rule
from relsat.rewrite.exprs import evaluate
from relsat.rewrite.rulefile import RULES_DIR, format_rules, load_rules, parse_rules

LAYOUT = load_rules(RULES_DIR / "layout.rules")


def _rows(eg: EGraph, op: str) -> set[tuple[str, str | None]]:
    """(list parameter, rule that built it) of every e-node of ``op``."""
    rows = eg.db.execute("SELECT s, rule FROM enode WHERE op = $op", {"op": op})
    return {(str(s), r) for s, r in rows}


def _explore(graph_out: object, b: GraphBuilder, rules: object) -> EGraph:
    eg = EGraph.from_graph(b.build(graph_out))  # type: ignore[arg-type]
    explore(eg, list(rules), audit=True)  # type: ignore[call-overload]
    return eg


# --- the language ---------------------------------------------------------------------------


def test_list_variables_literals_and_functions_round_trip() -> None:
    text = """\
# name: t
(transpose (transpose ?x ?p:ints ?a:int) ?q:ints ?b:int) => (transpose ?x (compose ?p ?q) ?b)
where len(?p) == len(?q) and ?q != [0, 1] and at(?p, -1) >= 0

# name: lit
(transpose ?x [0 2 1 3] 0) => (reshape (transpose ?x [0 2 1 3] 0) (shape ?x))
where shape(?x) == [1, 2, 2, 3] or iota(4) == [0 1 2 3]
"""
    rules = parse_rules(text)
    assert parse_rules(format_rules(rules)) == rules
    t = rules["t"]
    assert {(p.name, p.type) for p in t.params} == {
        ("p", "ints"),
        ("a", "int"),
        ("q", "ints"),
        ("b", "int"),
    }
    assert str(t.rhs[0]) == "(transpose ?x (compose ?p ?q) ?b)"
    assert str(rules["lit"].lhs[0]) == "(transpose ?x [0 2 1 3] 0)"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("(transpose ?x 1 0) => (relu ?x)", "argument 'perm' must be a list"),
        ("(transpose ?x ?p:int 0) => (relu ?x)", "argument 'perm' must be a list"),
        ("(transpose ?x [0 x] 0) => (relu ?x)", "a list holds integers, found 'x'"),
        ("(transpose ?x [0 1 0) => (relu ?x)", "a list holds integers, found ')'"),
        ("(transpose ?x [0 1", "'[' at col 15 is never closed"),
        (
            "(reshape ?x ?s:ints) => (reshape ?x ?s)\nwhere ?s < [4 6]",
            "lists compare with == and != and join with + only",
        ),
        ("(reshape ?x ?s:ints) => (reshape ?x ?s)\nwhere len(3) == 1", "len takes ints"),
        (
            "(reshape ?x ?s:ints) => (reshape ?x (shape ?y))",
            "uses ?y, which no left-hand side binds",
        ),
        ("(reshape ?x ?s:ints) => (reshape ?x (+ ?s 1))", "argument 'shape' must be a list"),
        (
            "(reshape ?x ?s:ints) => (reshape ?x ?s)\nwhere ?s == [dim(?x, 0), 1.5]",
            "a list holds integers, got [dim(?x, 0), 1.5]",
        ),
        ("(reshape ?x ?s:ints) => (reshape ?x ?s)\nwhere prod(3) == 3", "prod takes ints"),
        (
            "(reshape ?x ?s:ints) => (reshape ?x ?s)\nwhere take(?s, ?s) == ?s",
            "take takes ints, int",
        ),
    ],
)
def test_bad_list_rules_are_refused_with_the_place(body: str, message: str) -> None:
    with pytest.raises(RuleError, match=re.escape(message)) as err:
        parse_rules("# name: r\n" + body + "\n", path="f.rules")
    assert err.value.path == "f.rules" and err.value.line is not None


def test_list_functions_evaluate_as_the_engine_computes_them() -> None:
    [rule] = parse_rules(
        "# name: r\n(transpose ?x ?p:ints 0) => (relu ?x)\n"
        "where compose(?p, [2 1 0]) == [1 0 2] and at(?p, -1) == 1 and len(iota(3)) == 3\n"
    )
    (cond,) = rule.guards
    db = EGraph().db  # the engine's SQL for the same condition, the list given as a literal
    # (1 0): the composition points past the list, undefined in both (a refused match)
    for p, want in (((2, 0, 1), True), ((0, 2, 1), False), ((1, 0), False)):
        literal = expr_sql(p, str, str)
        sql = expr_sql(cond.expr, lambda _, lit=literal: lit, str)  # type: ignore[union-attr]
        assert bool(evaluate(cond.expr, {"p": p}, {})) is want  # type: ignore[union-attr]
        assert bool(db.scalar(f"SELECT coalesce({sql}, false)")) is want


@pytest.mark.parametrize(
    ("shape", "want"),
    [
        ((2, 3, 4), True),
        ((6, 4), True),
        ((2, 3, 5), False),
        ((1, 1, 1, 4), True),
        ((4,), True),
        ((), False),
    ],
)
def test_computed_lists_and_take_append_prod_agree_with_the_engine(
    shape: tuple[int, ...], want: bool
) -> None:
    """A flatten of the leading dims, written with a computed list and with the list functions:
    Python's evaluator and the engine's SQL give the same verdict (a take past the list is
    undefined in both)."""
    [rule] = parse_rules(
        "# name: r\n(reshape ?x ?f:ints) => (reshape ?x ?f)\n"
        "where ?f == [prod(take(shape(?x), -1)), dim(?x, -1)] and "
        "append(take(?f, -1), 4) == [prod(take(shape(?x), -1)), 4] and len(take(?f, -2)) == 0\n"
    )
    (cond,) = rule.guards
    db = EGraph().db
    f = (math.prod(shape[:-1]), 4)
    sql = expr_sql(
        cond.expr,  # type: ignore[union-attr]
        lambda _: expr_sql(f, str, str),
        lambda _: "g",  # the e-class row: its shape
    )
    assert bool(evaluate(cond.expr, {"f": f}, {"x": shape})) is want  # type: ignore[union-attr]
    row = f"(SELECT {expr_sql(shape, str, str)} AS shape) g"
    assert bool(db.scalar(f"SELECT coalesce({sql}, false) FROM {row}")) is want


@pytest.mark.parametrize(
    ("shape", "n", "want"),
    [((2, 3, 4), 1, (3, 4)), ((2, 3, 4), -1, (4,)), ((2, 3), 2, ()), ((2, 3), 3, None)],
)
def test_drop_agrees_with_the_engine(shape: tuple[int, ...], n: int, want: object) -> None:
    """``drop(shape(?x), n)``: the list without its first n items (the last -n for a negative
    n), undefined past the list, in Python's evaluator and the engine's SQL alike."""
    [rule] = parse_rules(f"# name: r\n(relu ?x) => (relu ?x)\nwhere drop(shape(?x), {n}) == [7]\n")
    (cond,) = rule.guards
    drop = cond.expr.args[0]  # type: ignore[union-attr]
    assert evaluate(drop, {}, {"x": shape}) == want
    sql = expr_sql(drop, str, lambda _: "g")
    row = f"(SELECT {expr_sql(shape, str, str)} AS shape) g"
    got = EGraph().db.scalar(f"SELECT {sql} FROM {row}")
    assert (None if got is None else tuple(got)) == want


def test_the_apply_sql_reads_computed_lists_past_the_variable_slots() -> None:
    # instantiate.sql reads a computed list's text at slot qs >= MAX_VARS (match.sv[qs - 11])
    text = sql_text("apply/instantiate")
    assert f"t.qs >= {MAX_VARS} THEN m.sv[t.qs - {MAX_VARS - 1}]" in text


# --- the engine -----------------------------------------------------------------------------


def test_transposes_and_reshapes_in_a_chain_fold() -> None:
    b = GraphBuilder()
    x = b.input([2, 3, 4], name="x")
    y = b.transpose(b.transpose(b.relu(x), [1, 0, 2]), [2, 1, 0])
    eg = _explore(b.reshape(b.reshape(y, [4, 6]), [24]), b, LAYOUT)
    # [1 0 2] then [2 1 0]: out[i] = in[p[q[i]]] = [2 0 1]
    assert ("2_0_1", "transpose-of-transpose") in _rows(eg, "transpose")
    assert ("24", "reshape-of-reshape") in _rows(eg, "reshape")
    keys = {k for (k,) in eg.db.execute("SELECT h FROM strs WHERE s = '2_0_1'")}
    assert keys == {eg.db.scalar("SELECT skey('2_0_1')")}


def test_a_list_literal_matches_that_list_only_and_a_repeated_variable_the_same_list() -> None:
    rules = parse_rules(
        "# name: lit\n(relu (transpose ?x [0 2 1] ?s:int)) => (transpose (relu ?x) [0 2 1] ?s)\n\n"
        "# name: same\n(ewadd (transpose ?a ?p:ints ?s:int) (transpose ?b ?p ?t:int)) => (transpose (ewadd ?a ?b) ?p ?s)\nordered\n"
    )
    b = GraphBuilder()
    x, z, w = (
        b.input(s, name=n) for s, n in (([2, 3, 4], "x"), ([2, 3, 4], "z"), ([4, 2, 3], "w"))
    )
    hits = b.relu(b.transpose(x, [0, 2, 1]))
    misses = b.relu(b.transpose(x, [2, 1, 0]))
    same = b.add(b.transpose(x, [1, 0, 2]), b.transpose(z, [1, 0, 2]))
    other = b.add(b.transpose(x, [1, 0, 2]), b.transpose(w, [2, 1, 0]))
    eg = EGraph.from_graph(b.build([hits, misses, same, b.reshape(other, [24])]))
    explore(eg, list(rules), audit=True)
    built = {(s, r) for s, r in _rows(eg, "transpose") if r}
    assert built == {("0_2_1", "lit"), ("1_0_2", "same")}


def test_a_right_hand_side_builds_a_list_from_a_fact() -> None:
    rules = parse_rules(
        "# name: back\n(reshape (reshape ?x ?a:ints) ?b:ints) => (reshape (relu ?x) (shape ?x))\n"
        "where ?b == shape(?x)\n"
    )
    b = GraphBuilder()
    x = b.input([2, 3, 4], name="x")
    eg = _explore(b.reshape(b.reshape(x, [6, 4]), [2, 3, 4]), b, rules)
    assert ("2_3_4", "back") in _rows(eg, "reshape")


def test_a_composition_past_the_permutation_is_not_applied() -> None:
    # a rule that composes lists of different lengths: the item past the end has no value, so
    # the match is refused (no list with a hole is written)
    rules = parse_rules(
        "# name: odd\n(transpose (transpose ?x ?p:ints ?a:int) ?q:ints ?b:int) => (transpose ?x (compose ?p [0 1 2 5]) ?b)\n"
    )
    b = GraphBuilder()
    x = b.input([2, 3, 4], name="x")
    eg = _explore(b.transpose(b.transpose(x, [1, 0, 2]), [2, 1, 0]), b, rules)
    assert {r for _, r in _rows(eg, "transpose")} == {None}


# --- the checker ----------------------------------------------------------------------------


def test_the_checker_draws_lists_and_names_them_in_a_counterexample() -> None:
    assert all(check_rule(r).ok for r in LAYOUT)
    wrong = parse_rules(
        "# name: wrong\n(transpose (transpose ?x ?p:ints ?a:int) ?q:ints ?b:int) => (transpose ?x (compose ?q ?p) ?b)\n\n"
        "# name: lost\n(reshape (transpose ?x ?p:ints ?a:int) ?b:ints) => (reshape ?x ?b)\n"
    )
    verdicts = {r.name: check_rule(r) for r in wrong}
    assert not any(v.ok for v in verdicts.values())
    assert "?q = [" in verdicts["wrong"].line() and "?p = [" in verdicts["lost"].line()


# --- projections and attention packed by rules (what the pack stage did after extraction) -----

SHIPPED = {r.name: r for r in load_rules()}
PACKED = SHIPPED["attention-packed"]


def _projections(b: GraphBuilder, x: object, perms: dict[str, list[int]], heads: int) -> list:
    """q, k, v of ``x [B, S, 16]`` as relsat reads them: a flatten, a 2-D Gemm with its bias,
    an unflatten into ``heads`` heads, a transpose."""
    batch, seq, width = x.shape  # type: ignore[attr-defined]
    out = []
    for name, perm in perms.items():
        w, bias = b.weight([width, width], name=f"w{name}"), b.weight([width], name=f"b{name}")
        y = b.matmul_bias(b.reshape(x, [batch * seq, width]), w, bias)  # type: ignore[arg-type]
        out.append(b.transpose(b.reshape(y, [batch, seq, heads, width // heads]), perm))
    return out


def test_a_rule_packs_attention_with_its_projections() -> None:
    """One rule for the packed attention: three sub-patterns (q, kt, v), list variables (the
    flatten ?f, the head split ?h, wildcards for the shuffle flags) pinned by conditions, a
    parameter computed from a list ((at ?h 2): the heads) and the fused kernel on the right."""
    assert [str(s) for s in PACKED.slots] == [
        "?sc",
        "?x",
        "?f",
        "?wq",
        "?bq",
        "?h",
        "?wk",
        "?bk",
        "?wv",
        "?bv",
        "?m",
    ]
    b = GraphBuilder()
    x, mask = b.input([1, 8, 16], name="x"), b.input([1, 1, 8, 8], name="m")
    perms = {"q": [0, 2, 1, 3], "k": [0, 2, 3, 1], "v": [0, 2, 1, 3]}
    q, kt, v = _projections(b, x, perms, heads=2)
    out = b.transpose(b.attention(q, kt, v, mask, 0.25), [0, 2, 1, 3])
    eg = _explore(out, b, [PACKED])
    ((heads_, scale, cls),) = eg.db.execute("SELECT p0, p1, class FROM enode WHERE op = 'mha'")
    assert heads_ == 2 and scale == f32_bits(0.25)
    packed = eg.db.scalar(
        "SELECT class FROM enode WHERE op = 'reshape' AND rule = 'attention-packed'"
    )
    assert packed == eg.db.scalar(
        "SELECT class FROM enode WHERE op = 'transpose' AND rule IS NULL ORDER BY id DESC LIMIT 1"
    )
    assert cls is not None


@pytest.mark.parametrize(
    ("perms", "why"),
    [
        ({"q": [0, 2, 1, 3], "k": [0, 2, 1, 3], "v": [0, 2, 1, 3]}, "k not transposed for q @ kt"),
        ({"q": [0, 2, 1, 3], "k": [0, 2, 3, 1], "v": [0, 2, 3, 1]}, "v transposed"),
    ],
)
def test_near_misses_of_the_packed_attention_are_not_packed(
    perms: dict[str, list[int]], why: str
) -> None:
    b = GraphBuilder()
    x = b.input([1, 4, 16], name="x")
    q, kt, v = _projections(b, x, perms, heads=4)  # [1, 4, 4, 4]: square, so any order types
    out = b.attention(q, kt, v, b.input([1, 1, 4, 4], name="m"), 0.5)
    eg = _explore(b.transpose(out, [0, 2, 1, 3]), b, [PACKED])
    assert eg.db.scalar("SELECT count(*) FROM enode WHERE op = 'mha'") == 0, why


@pytest.mark.parametrize(
    ("h", "kind"),
    [((1, 8, 2, 8), "equal"), ((1, 8, 4, 4), "equal"), ((2, 4, 2, 8), "equal")],
)
def test_the_packed_attention_equals_its_spelled_out_form(h: tuple[int, ...], kind: str) -> None:
    batch, seq = h[:2]
    shapes = {"x": (batch, seq, 16), "m": (1, 1, seq, seq)}
    shapes |= {f"w{p}": (16, 16) for p in "qkv"} | {f"b{p}": (16,) for p in "qkv"}
    values = {"sc": 0.25, "h": h, "f": (batch * seq, 16), "_:int": 1}
    outcome = evaluate_rule(PACKED, shapes, values=values)
    assert outcome.kind == kind, outcome.detail


def test_a_flatten_of_another_width_does_not_pack() -> None:
    # x [1, 8, 16] flattened to [16, 8]: projections of half-rows, not of x; the condition on
    # the flatten refuses it (and mha's shape check would refuse the right-hand side)
    shapes = {"x": (1, 8, 16), "m": (1, 1, 8, 8)}
    shapes |= {f"w{p}": (8, 16) for p in "qkv"} | {f"b{p}": (16,) for p in "qkv"}
    values = {"sc": 0.25, "h": (1, 8, 2, 16), "f": (16, 8), "_:int": 1}
    assert evaluate_rule(PACKED, shapes, values=values).kind == "guards-fail"


@pytest.mark.parametrize("residual_first", [True, False])
def test_projections_become_one_matmul_on_their_input_and_fold_their_bias(
    residual_first: bool,
) -> None:
    """layout.rules' projection-as-linear and transformer.rules' bias-gelu-of-linear and
    skip-layernorm-of-linear: the 2-D views around a projection dropped, its bias taken by the
    kernel after it (the residual add in either operand order); each sound in the NumPy
    executor's values."""
    b = GraphBuilder()
    x = b.input([2, 3, 8], name="x")
    flat = b.reshape(x, [6, 8])
    plain = b.reshape(b.matmul(flat, b.weight([8, 4], name="w1")), [2, 3, 4])
    gelu = b.gelu(b.reshape(b.matmul_bias(flat, b.weight([8, 8]), b.weight([8])), [2, 3, 8]))
    residual = b.reshape(b.matmul_bias(flat, b.weight([8, 8]), b.weight([8])), [2, 3, 8])
    summed = b.add(residual, gelu) if residual_first else b.add(gelu, residual)
    norm = b.layernorm(summed, b.weight([8]), b.weight([8]), 1e-5)
    rules = [SHIPPED[n] for n in ("projection-as-linear", "bias-gelu-of-linear")]
    rules.append(SHIPPED["skip-layernorm-of-linear"])
    eg = _explore([plain, norm], b, rules)
    made = dict(eg.db.execute("SELECT op, count(*) FROM enode WHERE rule IS NOT NULL GROUP BY op"))
    assert made == {"linear": 3, "biasgelu": 1, "skiplayernorm": 1, "concat": 2}
    for name in ("projection-as-linear", "bias-gelu-of-linear", "skip-layernorm-of-linear"):
        assert check_rule(SHIPPED[name]).ok


def test_near_misses_of_a_projection_keep_their_views() -> None:
    """A flatten that is not of the leading dims (x [2, 3, 8] viewed as [3, 16]: rows mixed
    across the batch), and an unflatten to another shape: no MatMul on x replaces them."""
    b = GraphBuilder()
    x = b.input([2, 3, 8], name="x")
    mixed = b.reshape(b.matmul(b.reshape(x, [3, 16]), b.weight([16, 4])), [2, 3, 2])
    other = b.reshape(b.matmul(b.reshape(x, [6, 8]), b.weight([8, 4])), [3, 2, 4])
    eg = _explore([mixed, other], b, [SHIPPED["projection-as-linear"]])
    assert _rows(eg, "linear") == set()


def test_a_projection_unflattened_into_heads_keeps_the_head_split() -> None:
    b = GraphBuilder()
    x = b.input([2, 3, 8], name="x")
    heads = b.reshape(b.matmul(b.reshape(x, [6, 8]), b.weight([8, 8])), [2, 3, 2, 4])
    eg = _explore(b.relu(heads), b, [SHIPPED["projection-as-linear-heads"]])
    assert _rows(eg, "reshape") >= {("2_3_2_4", "projection-as-linear-heads")}
    assert _rows(eg, "linear") == {("", "projection-as-linear-heads")}


# --- wildcards and float arithmetic ---------------------------------------------------------


def test_a_wildcard_matches_anything_binds_nothing_and_cannot_be_used() -> None:
    text = "# name: w\n(relu (transpose ?x ?_ ?_)) => (transpose (relu ?x) [2 0 1] 1)\n"
    [rule] = parse_rules(text)
    assert [str(s) for s in rule.slots] == ["?x"]
    assert parse_rules(format_rules([rule])) == parse_rules(text)
    b = GraphBuilder()
    x = b.input([2, 3, 4], name="x")
    y = b.add(b.relu(b.transpose(x, [2, 0, 1])), b.relu(b.transpose(x, [2, 0, 1], shuffle=False)))
    eg = _explore(y, b, [rule])
    # both relus (shuffle 1 and 0) matched: one class now, with the one transpose(relu x)
    relus = eg.db.execute(
        "SELECT DISTINCT e.class FROM enode e JOIN enode t ON t.class = e.c0 WHERE e.op = 'relu' AND t.op = 'transpose'"
    )
    assert len(relus) == 1
    with pytest.raises(RuleError, match="is a wildcard"):
        parse_rules("# name: w\n(transpose ?x ?_ ?_) => (transpose ?x ?_ 0)\n")


def test_a_right_hand_side_computes_a_float_parameter_in_float32() -> None:
    [rule] = parse_rules(
        "# name: fold\n(ewmul (ewmul ?x (scalar ?a:float)) (scalar ?b:float)) => (ewmul ?x (scalar (* ?a ?b)))\nordered\n"
    )
    assert check_rule(rule).ok
    b = GraphBuilder()
    x = b.input([4], name="x")
    eg = _explore(b.mul(b.mul(x, b.scalar(0.35355338)), b.scalar(0.35355338)), b, [rule])
    bits = eg.db.scalar("SELECT p0 FROM enode WHERE op = 'scalar' AND rule = 'fold'")
    assert bits == f32_bits(float(np.float32(0.35355338)) * float(np.float32(0.35355338)))
