# ruff: noqa: E501
"""The rule language that says what varies between spellings: typed parameter variables,
conditions over parameters and facts, right-hand-side arithmetic, commutative matching.

Each fusion is tried in several spellings and parameter values that no rule names literally, and
beside its near misses; the bad inputs are refused with the place named.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from relsat import Options, optimize
from relsat.engine.compile import compile_rules
from relsat.engine.db import Database, sql_text
from relsat.engine.egraph import EGraph
from relsat.errors import RuleError
from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.ops import f32_bits, opaque_key
from relsat.rewrite.check import check_rule, evaluate
from relsat.rewrite.rulefile import RULES_DIR, format_rules, load_rules, parse_rules
from relsat.rewrite.rules import COMMUTATIVE, Pattern, Rule, Var, onnx_type

SHIPPED = load_rules()
DECODER = load_rules(RULES_DIR / "decoder.rules")
TRANSFORMER = load_rules(RULES_DIR / "transformer.rules")


# --- the language ---------------------------------------------------------------------------

TEXT = """\
# name: gqa-any
(matmul 0 (softmax (matmul 0 ?q (repeatkv ?n:int ?kt))) (repeatkv ?n ?v)) => (gqa 1.0 ?q ?kt ?v (scalar 0.0))
where ?n >= 1 and rank(?q) == 4 and dim(?q, -3) % ?n == 0

# name: repeat-of-repeat
(repeatkv ?n:int (repeatkv ?m:int ?x)) => (repeatkv (* ?n ?m) ?x)
where 1 <= ?n <= 64
ordered

# name: eps
(layernorm ?eps:float ?x ?g ?b) => (layernorm ?eps ?x ?g ?b)
where 0 < ?eps < 1e-3 or not weights(?x)
"""


def test_typed_variables_conditions_and_arithmetic_round_trip() -> None:
    rules = parse_rules(TEXT)
    assert parse_rules(format_rules(rules)) == rules
    gqa = rules["gqa-any"]
    assert [str(p) for p in gqa.params] == ["?n"] and gqa.params[0].type == "int"
    assert [str(v) for v in gqa.slots] == ["?q", "?n", "?kt", "?v"]
    assert str(gqa.guards[0]) == "?n >= 1 and rank(?q) == 4 and dim(?q, -3) % ?n == 0"
    assert str(rules["repeat-of-repeat"].rhs[0]) == "(repeatkv (* ?n ?m) ?x)"
    assert rules["repeat-of-repeat"].ordered and not gqa.ordered


@pytest.mark.parametrize(
    ("text", "line", "col", "message"),
    [
        ("(repeatkv ?n:int ?x) => (relu ?n)", 2, 31, "?n is a number (int), used as a tensor"),
        ("(repeatkv ?n:float ?x) => (relu ?x)", 2, None, "parameter 1 is int, ?n is float"),
        ("(repeatkv ?n:int ?x) => (repeatkv ?m ?x)", 2, 35, "'count' must be an integer"),
        ("(repeatkv ?n:int ?x) => (repeatkv ?m:int ?x)", 2, None, "?m, which no left-hand side"),
        ("(repeatkv ?n:int ?x) => (repeatkv (/ ?n 0) ?x)", 2, None, "division by zero"),
        ("(repeatkv ?n:int ?x) => (repeatkv (* ?n 2) ?x)\nwhere ?n / 0 > 1", 3, 10, "by zero"),
        ("(repeatkv ?n:int ?x) => (relu ?x)\nwhere dtype(?x) == 1", 3, 7, "unknown guard 'dtype'"),
        ("(repeatkv ?n:int ?x) => (relu ?x)\nwhere ?n + 1", 3, 7, "not a number"),
        ("(repeatkv (* ?n:int 2) ?x) => (relu ?x)", 2, None, "in a left-hand side"),
        ("(repeatkv ?n:int ?x) => (repeatkv (* ?n 2.0) ?x)", 2, None, "is float"),
        ("(repeatkv ?n:int ?x) => (repeatkv ?n:float ?x)", 2, 35, "used as int and as float"),
        ("(repeatkv ?n:vec ?x) => (relu ?x)", 2, 11, "unknown type 'vec'"),
    ],
)
def test_bad_rules_name_the_place(text: str, line: int, col: int | None, message: str) -> None:
    with pytest.raises(RuleError) as err:
        parse_rules(f"# name: bad\n{text}\n", path="user.rules")
    assert err.value.path == "user.rules" and err.value.line == line
    assert col is None or err.value.col == col
    assert message in str(err.value)


def test_a_file_with_a_bad_rule_loads_nothing(tmp_path: Path) -> None:
    f = tmp_path / "mine.rules"
    f.write_text(
        "# name: fine\n(relu (relu ?x)) => (relu ?x)\n\n# name: bad\n"
        "(repeatkv ?n:int ?x) => (relu ?x)\nwhere size(?n) > 1\n"
    )
    with pytest.raises(RuleError, match=r"mine\.rules:6"):
        load_rules(f)


# --- no copies -------------------------------------------------------------------------------


def _tensat(rule: Rule) -> bool:
    return any(s.startswith(("converted", "predefined")) for s in rule.sources)


def _shape_of(p: Pattern) -> str:
    """A pattern with every number blanked and commutative operands in a fixed order."""
    args = []
    for a in p.args:
        args.append(_shape_of(a) if isinstance(a, Pattern) else str(a))
    if p.op in COMMUTATIVE:
        args = sorted(args)
    return "(" + " ".join([p.op, *args]) + ")"


def test_no_two_rules_of_relsat_differ_only_in_numbers_or_operand_order() -> None:
    """relsat's own rules (TENSAT's converted ones excepted): no family of copies that differ in
    an epsilon, a head or group size, a stride, or the order of an Add's or Mul's operands."""
    families: dict[str, list[str]] = defaultdict(list)
    for rule in (*SHIPPED, *load_rules(RULES_DIR / "extra")):
        if _tensat(rule):
            continue
        pairs = zip(rule.lhs, rule.rhs, strict=True)
        sides = " ; ".join(f"{_shape_of(a)} => {_shape_of(b)}" for a, b in pairs)
        key = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "#", re.sub(r"\?\w+", "?", sides))
        families[key].append(rule.name)
    copies = {k: v for k, v in families.items() if len(v) > 1}
    assert not copies, copies


def test_the_view_of_turned_enodes_knows_the_commutative_operators() -> None:
    """relsat's own commutative operators are named in the view, the ONNX ones by their opaque
    keys in table ``commuting``, and a turned e-node of each is in the view."""
    view = sql_text("schema/program")
    (ops,) = re.findall(r"WHERE \(op IN \(([^)]*)\)", view)
    own = {op for op in COMMUTATIVE if onnx_type(op) is None}
    assert {o.strip(" '") for o in ops.split(",")} == own == {"ewadd", "ewmul"}
    egraph = EGraph()
    keys = {k for (k,) in egraph.db.execute("SELECT key FROM commuting")}
    onnx_ops = [t for t in map(onnx_type, COMMUTATIVE) if t]
    assert keys == {opaque_key(t) for t in onnx_ops} and "And" in onnx_ops
    b = GraphBuilder()
    x, y = b.input([2, 3], name="x"), b.input([2, 3], name="y")
    both = b.opaque("And", [x, y], [[2, 3]], {})[0]
    one = b.opaque("Sub", [x, y], [[2, 3]], {})[0]
    egraph = EGraph.from_graph(b.build(b.add(both, one)))
    turned = egraph.db.execute("SELECT op, s FROM enode_either WHERE turned ORDER BY op, s", {})
    assert [(op, s.split("|")[0]) for op, s in turned] == [("ewadd", ""), ("opaque", "And")]


@pytest.mark.parametrize("value", [1e-5, 1e-6, 3e-6, 1e-12, -2.5, 0.0, 1e-40, 7.0, 65504.0])
def test_the_f32_functions_read_and_write_float_bits(value: float) -> None:
    db = Database()
    got = db.scalar("SELECT f32($b)", {"b": f32_bits(value)})
    assert got == pytest.approx(float(np.float32(value)), rel=1e-12, abs=0.0)
    assert db.scalar("SELECT f32bits($v)", {"v": value}) == f32_bits(value)
    assert db.scalar("SELECT f32bits(f32($b))", {"b": f32_bits(value)}) == f32_bits(value)


def test_f32bits_refuses_what_float32_cannot_hold() -> None:
    db = Database()
    assert db.execute("SELECT f32bits(1e39), f32bits('nan'::DOUBLE), f32bits(NULL)") == [
        (None, None, None)
    ]
    assert db.scalar("SELECT f32(2139095040)") is None  # infinity's bits


def test_conditions_and_arithmetic_compile_to_one_statement_each() -> None:
    program = compile_rules(SHIPPED)
    assert program.cond_sql is not None and program.cond_sql.count("UPDATE") == 1
    assert "f32(m.v[" in program.cond_sql and "g0.shape" in program.cond_sql
    # one shipped rule computes a parameter: a composed permutation (rules/layout.rules)
    assert program.derive_sql is not None and program.derive_sql.count("UPDATE") == 1
    assert "list_select(l" in program.derive_sql and "LEFT JOIN lists l" in program.derive_sql
    derived = compile_rules(parse_rules(TEXT))
    assert derived.derive_sql is not None and "(m.v[1] * m.v[2])" in derived.derive_sql


def test_the_generated_statements_for_some_rules_hold_their_cases_only() -> None:
    """A phase runs the statements with the cases of the rules it matched (DuckDB plans the
    whole rule set's in ~40 ms): all of them give the whole statement, none gives none."""
    program = compile_rules(SHIPPED)
    conds, derives = [c.rule for c in program.conds], [c.rule for c in program.derives]
    assert program.cond_for(conds) == program.cond_sql
    assert program.derive_for(derives) == program.derive_sql
    assert program.cond_for([]) is None and program.derive_for([]) is None
    some = conds[:2]
    sql = program.cond_for(some + [r for r in range(len(SHIPPED)) if r not in conds][:3])
    assert sql is not None and sql.count(" THEN ") >= 2
    assert [r for r in conds if f"WHEN {r} THEN" in sql] == some
    assert program.cond_sql is not None
    assert sql.count("LEFT JOIN") < program.cond_sql.count("LEFT JOIN")  # the joins they read


# --- fusions at values no rule names, in several spellings, and near misses ------------------


def _rms(b: GraphBuilder, x: Tensor, g: Tensor, eps: float, spelling: str) -> Tensor:
    ms = b.add(b.reducemean(b.pow(x, b.scalar(2.0))), b.scalar(eps))
    if spelling == "pow-half":  # Gemma: (ms + eps) ^ -0.5, the scale first
        return b.mul(b.mul(x, b.pow(ms, b.scalar(-0.5))), g)
    r = b.reciprocal(b.sqrt(ms))
    if spelling == "scale-last":
        return b.mul(b.mul(x, r), g)
    if spelling == "scale-first-r-first":
        return b.mul(g, b.mul(r, x))
    if spelling == "div-one":
        return b.mul(b.mul(x, b.div(b.scalar(1.0), b.sqrt(ms))), g)
    return b.mul(b.div(x, b.sqrt(ms)), g)  # "div", scale last


@pytest.mark.parametrize(
    "spelling", ["pow-half", "scale-last", "scale-first-r-first", "div-one", "div"]
)
def test_rmsnorm_fuses_at_an_unusual_epsilon_in_every_spelling(spelling: str) -> None:
    b = GraphBuilder()
    x = b.input([1, 8, 48], name="x")
    y = _rms(b, x, b.weight([48]), 3e-6, spelling)
    near = _rms(b, b.relu(x), b.weight([48]), 0.5, spelling)  # not an epsilon: left alone
    result = optimize(b.build(y, near), Options(rules=DECODER))
    rms = [n for n in result.graph.nodes if n.op == "rmsnorm"]
    assert len(rms) == 1 and result.verified
    assert rms[0].params is not None and rms[0].params["epsilon"] == pytest.approx(3e-6)


def _rotary(b: GraphBuilder, x: Tensor, cos: Tensor, sin: Tensor, cut: int) -> Tensor:
    d = x.shape[-1]
    rotated = b.concat(3, [b.neg(b.slice(x, 3, cut, d)), b.slice(x, 3, 0, cut)])
    return b.add(b.mul(rotated, sin), b.mul(cos, x))  # the operands in the other order


@pytest.mark.parametrize("d", [48, 80, 256])
def test_rotary_fuses_at_any_head_size_and_not_at_a_wrong_cut(d: int) -> None:
    b = GraphBuilder()
    q = b.input([1, 2, 4, d], name="q")
    c, s = b.weight([1, 1, 4, d // 2], name="c"), b.weight([1, 1, 4, d // 2], name="s")
    cos, sin = b.concat(3, [c, c]), b.concat(3, [s, s])
    good = _rotary(b, q, cos, sin, d // 2)
    wrong = _rotary(b, b.relu(q), cos, sin, d // 4)  # a rotation by a quarter: not rotary
    result = optimize(b.build(good, wrong), Options(rules=DECODER))
    assert result.graph.op_counts()["rotary"] == 1 and result.verified


def test_the_rotary_condition_is_what_makes_the_rule_sound() -> None:
    rule = DECODER["rotary-half-fuse"]
    shapes = {"x": (1, 1, 2, 4), "c": (1, 1, 2, 4), "s": (1, 1, 2, 4)}
    assert evaluate(rule, shapes, values={"h": 2, "d": 4}).kind == "equal"
    unguarded = evaluate(rule, shapes, guards=(), values={"h": 2, "d": 4})
    assert unguarded.kind == "different"  # the tables drawn with unequal halves
    # without halves(?c) and halves(?s), the tables are drawn with unequal halves
    arity = [g for g in rule.guards if "halves" not in str(g)]
    assert evaluate(rule, shapes, guards=arity, values={"h": 2, "d": 4}).kind == "different"
    assert evaluate(rule, shapes, values={"h": 1, "d": 4}).kind == "guards-fail"


def _attention(b: GraphBuilder, q: Tensor, kt: Tensor, v: Tensor, n: int) -> Tensor:
    scores = b.matmul(q, b.repeatkv(kt, n))
    return b.matmul(b.softmax(scores), b.repeatkv(v, n))


@pytest.mark.parametrize(("heads", "kv"), [(16, 1), (32, 2), (3, 1), (6, 2)])
def test_grouped_attention_fuses_at_any_group_size(heads: int, kv: int) -> None:
    b = GraphBuilder()
    q = b.input([1, heads, 4, 8], name="q")
    kt, v = b.input([1, kv, 8, 4], name="kt"), b.input([1, kv, 4, 8], name="v")
    rules = [*DECODER, *TRANSFORMER]  # the attention rules fuse first, then gqa-fuse
    result = optimize(b.build(_attention(b, q, kt, v, heads // kv)), Options(rules=rules))
    assert result.graph.op_counts().get("gqa") == 1 and result.verified


def _layernorm(
    b: GraphBuilder, x: Tensor, g: Tensor, bias: Tensor, eps: float, order: str
) -> Tensor:
    d = b.sub(x, b.reducemean(x))
    var = b.reducemean(b.pow(d, b.scalar(2.0)))
    den = b.sqrt(b.add(b.scalar(eps), var) if order == "swapped" else b.add(var, b.scalar(eps)))
    n = b.div(d, den)
    return b.add(bias, b.mul(g, n)) if order == "swapped" else b.add(b.mul(n, g), bias)


@pytest.mark.parametrize(
    ("eps", "order"), [(1e-5, "as-torch"), (3e-6, "swapped"), (1e-12, "swapped")]
)
def test_layernorm_fuses_at_any_epsilon_and_operand_order(eps: float, order: str) -> None:
    b = GraphBuilder()
    x = b.input([2, 8, 32], name="x")
    y = _layernorm(b, x, b.weight([32]), b.weight([32]), eps, order)
    result = optimize(b.build(y), Options(rules=TRANSFORMER))
    assert result.graph.op_counts().get("layernorm") == 1 and result.verified


def test_a_user_adds_a_fusion_with_a_rule_file_and_no_python(tmp_path: Path) -> None:
    """A LayerNorm whose root is spelled as a power, (var + eps) ^ 0.5 (no shipped rule has
    it), fused by a rule written in a file of the user's own."""
    f = tmp_path / "mine.rules"
    f.write_text(
        "# name: layernorm-root-as-power\n"
        "(ewadd (ewmul (ewdiv (ewsub ?x (reducemean ?x)) (ewpow (ewadd (reducemean (ewpow "
        "(ewsub ?x (reducemean ?x)) (scalar 2.0))) (scalar ?eps:float)) (scalar 0.5))) ?g) ?b)"
        " => (layernorm ?eps ?x ?g ?b)\nwhere 0 < ?eps < 0.01 and rank(?g) == 1 and rank(?b) == 1\n"
    )
    b = GraphBuilder()
    x = b.input([2, 8, 32], name="x")
    d = b.sub(x, b.reducemean(x))
    var = b.reducemean(b.pow(d, b.scalar(2.0)))
    n = b.div(d, b.pow(b.add(var, b.scalar(2e-6)), b.scalar(0.5)))
    graph = b.build(b.add(b.mul(n, b.weight([32])), b.weight([32])))
    assert "layernorm" not in optimize(graph, Options(rules=TRANSFORMER)).graph.op_counts()
    result = optimize(graph, Options(rules=load_rules(f)))
    assert result.graph.op_counts().get("layernorm") == 1 and result.verified
    assert check_rule(load_rules(f)[0]).status == "ok"


# --- ONNX operators kept opaque ----------------------------------------------------------------


def test_an_onnx_operator_is_matched_by_its_type_and_round_trips() -> None:
    text = (
        "# name: guard\n(onnx.Where (onnx.IsNaN ?x) ?z ?x) => (nanzero ?x)\nwhere size(?z) == 1\n"
    )
    rules = parse_rules(text)
    assert parse_rules(format_rules(rules)) == rules
    (rule,) = rules
    assert str(rule.lhs[0]) == "(onnx.Where (onnx.IsNaN ?x) ?z ?x)"
    assert [str(v) for v in rule.slots] == ["?x", "?z"]
    assert SHIPPED["nanzero-guard"].lhs[0].op == "onnx.Where"


@pytest.mark.parametrize(
    ("text", "col", "message"),
    [
        ("(relu ?x) => (onnx.Relu ?x)", 15, "an opaque operator cannot be built by a rule"),
        ("(onnx.Abs ?x) => (relu (onnx.Abs ?x))", 25, "cannot be built by a rule"),
        ("(onnx.IsNan ?x) => (relu ?x)", 2, "unknown ONNX operator 'IsNan'"),
        ("(onnx.Gelu_ ?x) => (relu ?x)", 2, "unknown ONNX operator"),
        ("(onnx.IsNaN ?x ?y) => (relu ?x)", 1, "onnx.IsNaN takes 1 tensor input, got 2"),
        ("(relu (onnx.IsNaN)) => (relu ?x)", 7, "takes 1 tensor input, got 0"),
        ("(onnx.IsNaN 1) => (relu ?x)", 13, "must be a tensor"),
        ("(ox.Abs ?x) => (relu ?x)", 2, "unknown operator 'ox.Abs'"),
        ("(onnx.Gather ?d ?i) => (relu ?d)", 14, "argument 'axis' must be an integer"),
        ("(onnx.Flatten 1) => (relu ?x)", 1, "takes its attribute axis, then 1 tensor input"),
    ],
)
def test_bad_onnx_operators_name_the_place(text: str, col: int, message: str) -> None:
    with pytest.raises(RuleError) as err:
        parse_rules(f"# name: bad\n{text}\n", path="user.rules")
    assert (err.value.path, err.value.line, err.value.col) == ("user.rules", 2, col)
    assert message in str(err.value)


def test_a_rule_built_in_python_cannot_build_an_onnx_operator() -> None:
    x = Var("x")
    with pytest.raises(RuleError, match="cannot be built by a rule"):
        Rule("r", (Pattern("relu", (x,)),), (Pattern("onnx.Relu", (x,)),))
    with pytest.raises(RuleError, match="unknown ONNX operator"):
        Pattern("onnx.NoSuchOp", (x,))


def test_two_onnx_types_with_one_key_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from relsat.engine import compile as compile_module

    rules = parse_rules(
        "# name: a\n(relu (onnx.Abs ?x)) => (relu ?x)\n\n# name: b\n(relu (onnx.Neg ?x)) => (relu ?x)\n"
    )
    compile_rules(rules)
    monkeypatch.setattr(compile_module, "opaque_key", lambda kind: 7)
    with pytest.raises(RuleError, match="ONNX types Abs and Neg share the key 7"):
        compile_rules(rules)


def test_an_onnx_attribute_a_rule_names_is_matched() -> None:
    """A Gather's axis is its e-node's ``p1`` (ONNX's default 0 where the node gives none):
    ``(onnx.Gather 0 ?d ?i)`` matches the gathers along axis 0 and not the one along axis 1."""
    from relsat.engine.explore import Limits, explore

    b = GraphBuilder()
    d, i = b.input([4, 4], name="d"), b.input([4, 4], name="i")
    (given,) = b.opaque("Gather", [d, i], [(4, 4, 4)], {"axis": 0})
    (default,) = b.opaque("Gather", [d, i], [(4, 4, 4)], {})
    (other,) = b.opaque("Gather", [d, i], [(4, 4, 4)], {"axis": 1})
    eg = EGraph.from_graph(b.build(given, default, other))
    axes = eg.db.execute("SELECT s[1:6], p1 FROM enode WHERE op = 'opaque' ORDER BY id")
    assert [p1 for _, p1 in axes] == [0, 0, 1]
    rules = parse_rules("# name: r\n(onnx.Gather 0 ?d ?i) => (relu ?d)\n")
    matched = sum(s.matches for s in explore(eg, rules, limits=Limits(iterations=1)).iterations)
    assert matched == 2  # given and by default, not axis 1 (then refused: another shape)


def test_every_onnx_operator_has_a_key_of_its_own() -> None:
    """31 bits: about 1 in 2**31 per pair; none of ONNX's operators (any domain) share one."""
    import onnx.defs

    from relsat.graph.ops import opaque_key

    names = {
        s.name if s.domain in ("", "ai.onnx") else f"{s.domain}.{s.name}"
        for s in onnx.defs.get_all_schemas_with_history()
    }
    keys = {opaque_key(n) for n in names}
    assert len(keys) == len(names) > 150 and all(0 <= k < 2**31 for k in keys)


def test_a_user_rule_matches_an_onnx_operator(tmp_path: Path) -> None:
    """|x| * |x| = x * x, in a rule file of the user's own: checked on load, found in an ONNX
    model's opaque Abs, and numerically sound."""
    import onnx
    from onnx import TensorProto, helper

    from relsat import onnx as ronnx

    f = tmp_path / "mine.rules"
    f.write_text("# name: abs-square\n(ewmul (onnx.Abs ?x) (onnx.Abs ?x)) => (ewmul ?x ?x)\n")
    rules = load_rules(f)  # a user's file: its types are checked on load
    assert check_rule(rules[0]).status == "ok"
    n = helper.make_node
    graph = helper.make_graph(
        [n("Abs", ["x"], ["a"]), n("Mul", ["a", "a"], ["y"])],
        "abs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    g = ronnx.load(model)
    assert [n.params["type"] for n in g.nodes if n.op == "opaque"] == ["Abs"]
    result = optimize(g, Options(rules=rules))
    assert "opaque" not in result.graph.op_counts() and result.verified
