"""Facts of values (relsat.graph.facts): what constants, arithmetic and layouts keep; the
e-graph's table ``fact`` (loaded, computed for rule-built e-nodes, merged on union); guards that
read them; ONNX's opaque mask operators bounded (relsat.onnx.masks)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from relsat import Options, optimize
from relsat import onnx as ronnx
from relsat.engine.egraph import EGraph
from relsat.engine.explore import Limits, explore
from relsat.engine.facts import read_facts
from relsat.graph.builder import GraphBuilder
from relsat.graph.facts import FLT_MAX, Facts, analyse, of_value, rounded, transfer, weakest
from relsat.graph.graph import Ref
from relsat.graph.ops import Params
from relsat.onnx.masks import opaque_facts
from relsat.rewrite.rulefile import load_rules, parse_rules


def _table(d: int = 8) -> np.ndarray:
    half = np.arange(3 * d // 2, dtype=np.float32).reshape(3, d // 2) / 10
    return np.concatenate([half, half], axis=-1)


def test_a_constants_facts() -> None:
    t = _table()
    f = of_value(t)
    assert (f.lo, f.hi, f.halves, f.pairs) == (0.0, pytest.approx(1.1), True, False)
    assert of_value(np.repeat(t[:, :4], 2, axis=-1)).pairs
    assert not of_value(np.array([1.0, np.inf], np.float32)).finite
    assert of_value(np.array([-FLT_MAX, 0.0], np.float32)).finite
    assert of_value(t).digest == of_value(t.copy()).digest != of_value(t * 2).digest


def test_layouts_and_arithmetic_keep_what_they_keep() -> None:
    b = GraphBuilder()
    x = b.input([3, 8], name="x")
    t = b.weight([3, 8], name="t", value=_table())
    kept = {
        "scaled": b.mul(t, b.scalar(-2.0)),
        "cos": b.cos(t),
        "unsqueezed": b.reshape(t, [1, 3, 8]),
        "transposed": b.transpose(b.reshape(t, [3, 1, 8]), [1, 0, 2]),
        "sum": b.add(t, t),
        "row": b.add(t, b.weight([3, 1], name="r", value=np.ones((3, 1), np.float32))),
    }
    lost = {
        "times_x": b.mul(t, x),
        "last_moved": b.transpose(t, [1, 0]),
        "flattened": b.reshape(t, [24]),
        "softmax": b.softmax(t),
    }
    g = b.build(*kept.values(), *lost.values())
    facts = analyse(g)
    outs = dict(zip([*kept, *lost], g.outputs, strict=True))
    assert all(facts[outs[k]].halves for k in kept), kept
    assert not any(facts.get(outs[k], Facts()).halves for k in lost)
    assert (facts[outs["scaled"]].lo, facts[outs["scaled"]].hi) == (pytest.approx(-2.2), 0.0)
    assert facts[outs["softmax"]].finite and facts[outs["softmax"]].nonneg
    assert outs["times_x"] not in facts  # x is unknown: nothing is


def test_a_softmax_is_bounded_only_where_its_input_is() -> None:
    """A row of -inf (a fully masked row) or one holding +inf or NaN gives NaN: a softmax of an
    input without bounds has none."""
    b = GraphBuilder()
    x = b.input([2, 4], name="x")
    scaled = b.mul(b.weight([2, 4], name="w", value=np.full((2, 4), 0.5, np.float32)), x)
    known = b.softmax(b.weight([2, 4], name="k", value=np.ones((2, 4), np.float32)))
    g = b.build(b.softmax(x), b.softmax(scaled), known)
    facts = analyse(g)
    assert g.outputs[0] not in facts and g.outputs[1] not in facts
    assert (facts[g.outputs[2]].lo, facts[g.outputs[2]].hi) == (0.0, 1.0)
    with np.errstate(invalid="ignore"):
        row = np.full(4, -np.inf, np.float32)
        assert np.isnan(np.exp(row - row.max()) / np.exp(row - row.max()).sum()).all()


def test_concat_of_one_tensor_twice_has_equal_halves_and_of_two_has_not() -> None:
    b = GraphBuilder()
    h, g = b.input([2, 4], name="h"), b.input([2, 4], name="g")
    graph = b.build(b.concat(1, [h, h]), b.concat(1, [h, g]), b.concat(0, [h, h]))
    facts = analyse(graph)
    assert facts[graph.outputs[0]].halves
    assert graph.outputs[1] not in facts and graph.outputs[2] not in facts


def test_weakest_is_what_every_occurrence_has() -> None:
    a, c = Facts(0.0, 1.0, halves=True), Facts(-1.0, 0.5, halves=False)
    assert weakest([a, c]) == Facts(-1.0, 1.0)
    assert weakest([a, None]) is None


def _masked_add(fill: float, dtype: int = TensorProto.BOOL) -> onnx.ModelProto:
    """``scores + Where(mask, 0, fill)`` with the mask a graph input: bool, or cast from int."""
    nodes = []
    mask = "mask"
    if dtype != TensorProto.BOOL:
        nodes.append(helper.make_node("Cast", ["mask"], ["mask_b"], to=TensorProto.BOOL))
        mask = "mask_b"
    nodes += [
        helper.make_node("Where", [mask, "zero", "fill"], ["m"]),
        helper.make_node("Add", ["s", "m"], ["out"]),
    ]
    inits = [
        helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
        helper.make_tensor("fill", TensorProto.FLOAT, [], [fill]),
    ]
    graph = helper.make_graph(
        nodes,
        "mask",
        [
            helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 2, 4, 4]),
            helper.make_tensor_value_info("mask", dtype, [1, 1, 4, 4]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2, 4, 4])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", 17)])


@pytest.mark.parametrize(
    ("fill", "finite"),
    [(-1e9, True), (float(np.finfo(np.float32).min), True), (-np.inf, False)],
)
def test_an_onnx_mask_is_finite_when_its_fills_are(fill: float, finite: bool) -> None:
    graph = ronnx.load(_masked_add(fill))
    mask = next(n for n in graph.nodes if n.op == "opaque" and n.params["type"] == "Where")
    f = analyse(graph, opaque=opaque_facts).get(Ref(mask.id))
    assert (f is not None and f.finite) == finite


@pytest.mark.parametrize(("condition", "bounds"), [(True, (0.0, 0.0)), (False, (-1e9, -1e9))])
def test_a_settled_condition_picks_one_branch_of_where(
    condition: bool, bounds: tuple[float, float]
) -> None:
    """``Where(c, 0, -1e9)`` with ``c`` a constant all true (torch's ViT export: no padding to
    mask) is 0 everywhere, all false -1e9: the mask's bounds are one branch's, not both."""
    model = _masked_add(-1e9)
    graph_ = model.graph
    graph_.input.pop()  # the mask becomes a constant
    value = np.full((1, 1, 4, 4), condition)
    graph_.initializer.append(onnx.numpy_helper.from_array(value, "mask"))
    graph = ronnx.load(model)
    mask = next(n for n in graph.nodes if n.op == "opaque" and n.params["type"] == "Where")
    f = analyse(graph, opaque=opaque_facts)[Ref(mask.id)]
    assert (f.lo, f.hi) == bounds


def test_the_egraph_keeps_facts_per_class_and_merges_them_on_union() -> None:
    b = GraphBuilder()
    h = b.weight([2, 4], name="h", value=np.arange(8, dtype=np.float32).reshape(2, 4))
    table = b.concat(1, [h, h])
    out = b.slice(table, axis=1, start=0, end=4)
    eg = EGraph.from_graph(b.build(b.mul(out, b.scalar(1.0))))
    before = read_facts(eg.db)
    assert sum(f.halves for f in before.values()) == 1  # the concat
    rules = parse_rules(
        "# name: slice-of-halves\n"
        "(slice ?a:int 0 ?h:int 1 (concat ?a ?n:int ?x ?x)) => ?x\nwhere ?h == dim(?x, ?a)\n"
        "# name: mul-by-one\n(ewmul ?x (scalar 1.0)) => ?x\n"
    )
    explore(eg, list(rules))
    rows = eg.db.execute("SELECT class, count(*) FROM fact GROUP BY class HAVING count(*) > 1")
    assert rows == []  # one row per class
    assert not any(eg.audit().values())
    merged = eg.db.execute("SELECT f.lo, f.hi FROM output o JOIN fact f ON f.class = o.class")
    assert merged == [(0.0, 7.0)]  # the output is h: its bounds


def test_rule_built_enodes_get_facts_and_guards_read_them() -> None:
    """Negations built by a rule, of a table of equal halves and of one of unequal halves: the
    new e-nodes' classes have the fact where it holds, and a rule guarded by halves(?t) fires on
    those only."""
    b = GraphBuilder()
    h, g = b.input([2, 4], name="h"), b.input([2, 4], name="g")
    same, apart = b.concat(1, [h, h]), b.concat(1, [h, g])
    eg = EGraph.from_graph(b.build(b.cos(same), b.cos(apart)))
    build = parse_rules("# name: neg-neg\n(cos ?t) => (cos (neg (neg ?t)))\n")
    explore(eg, list(build), limits=Limits(iterations=1))
    negs = eg.db.execute(
        "SELECT f.halves FROM enode e LEFT JOIN fact f ON f.class = e.class WHERE e.op = 'neg'"
    )
    assert sorted(bool(h) for (h,) in negs) == [False, False, True, True]
    guarded = parse_rules("# name: mark\n(neg ?t) => (sigmoid ?t)\nwhere halves(?t)\n")
    explore(eg, list(guarded), limits=Limits(iterations=2))  # one more
    read = eg.db.execute(
        "SELECT f.halves FROM enode e LEFT JOIN fact f ON f.class = e.c0 WHERE e.op = 'sigmoid'"
    )
    assert read == [(True,), (True,)]


def test_a_user_rule_file_guarded_by_a_fact_fuses_with_no_python(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Rotary on [S, D] tables (rank 2), a spelling the shipped rules lack: fused by a rule in a
    file, guarded by halves."""
    rule = tmp_path / "rotary2d.rules"
    rule.write_text(
        "# name: rotary-half-2d\n"
        "(ewadd (ewmul ?x ?c) (ewmul (concat 3 4 (neg (slice 3 ?h:int ?d:int 1 ?x)) "
        "(slice 3 0 ?h 1 ?x)) ?s)) => (rotary 0 ?x (slice 1 0 ?h 1 ?c) (slice 1 0 ?h 1 ?s))\n"
        "where ?d == 2 * ?h and dim(?x, -1) == ?d and rank(?c) == 2 and rank(?s) == 2 "
        "and halves(?c) and halves(?s)\n"
    )
    b = GraphBuilder()
    x = b.input([1, 2, 3, 8], name="x")
    c = b.weight([3, 8], name="c", value=_table())
    s = b.weight([3, 8], name="s", value=_table() * 0.5)
    rot = b.concat(3, [b.neg(b.slice(x, axis=3, start=4, end=8)), b.slice(x, 3, 0, 4)])
    spelled = b.add(b.mul(x, c), b.mul(rot, s))
    result = optimize(b.build(spelled), Options(rules=load_rules(rule)))
    assert result.graph.op_counts()["rotary"] == 1 and result.verified
    # the same with tables of unequal halves: not fused
    b = GraphBuilder()
    x = b.input([1, 2, 3, 8], name="x")
    c = b.weight([3, 8], name="c", value=np.random.default_rng(0).random((3, 8), np.float32))
    rot = b.concat(3, [b.neg(b.slice(x, axis=3, start=4, end=8)), b.slice(x, 3, 0, 4)])
    spelled = b.add(b.mul(x, c), b.mul(rot, c))
    result = optimize(b.build(spelled), Options(rules=load_rules(rule)))
    assert "rotary" not in result.graph.op_counts()


def test_the_rule_check_masks_a_row_where_a_softmax_adds_a_mask() -> None:
    """An eager attention fused without ``finite(?m)`` differs where a mask row is all -inf
    (NaN unfused, 0 fused): the check draws that edge case and prints it; the shipped rule,
    which requires the fact, passes."""
    from relsat.rewrite.check import check_rule
    from relsat.rewrite.rulefile import RULES_DIR

    bad = parse_rules(
        "# name: eager-unguarded\n"
        "(matmul 0 (softmax (ewadd (matmul 0 ?q ?kt) ?m)) ?v) => (attention 1.0 ?q ?kt ?v ?m)\n"
    )["eager-unguarded"]
    verdict = check_rule(bad)
    assert verdict.status == "numeric-mismatch" and "a row of -inf in ?m" in verdict.line()
    shipped = load_rules(RULES_DIR / "transformer.rules")
    assert check_rule(shipped["attention-eager-fuse"]).ok
    assert check_rule(shipped["attention-masked-fuse"]).ok


def test_a_float32_sum_just_past_the_range_rounds_to_the_lowest() -> None:
    """float32's lowest plus a bias far smaller than its ulp (2^104) rounds to the lowest: the
    sum of BLOOM's padding mask and its ALiBi bias is finite; a bias near the ulp is not."""
    mask, small, large = Facts(-FLT_MAX, 0.0), Facts(-(2.0**62), 2.0**62), Facts(-(2.0**104), 0.0)
    shapes = [(1, 4, 1, 8), (1, 1, 8, 8)]
    summed = transfer("ewadd", Params(), shapes, (1, 4, 8, 8), [small, mask])
    assert summed is not None and (summed.lo, summed.hi) == (-FLT_MAX, 2.0**62)
    assert not (transfer("ewadd", Params(), shapes, (1, 4, 8, 8), [large, mask]) or Facts()).finite
    assert rounded(-FLT_MAX - 2.0**102, FLT_MAX + 1.0) == (-FLT_MAX, FLT_MAX)
    assert rounded(-FLT_MAX - 2.0**103, None) == (None, None)


def _cumsum_model(source: int, cast_to: int | None, exclusive: int = 0) -> onnx.ModelProto:
    """``Cast(CumSum(Cast(mask, int64), axis 1), cast_to)``, the mask [2, 6] of type ``source``
    (BLOOM's ALiBi positions: the cumulative sum of the attention mask)."""
    nodes = [
        helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.INT64),
        helper.make_node("CumSum", ["m", "axis"], ["c"], exclusive=exclusive),
    ]
    out, dtype = "c", TensorProto.INT64
    if cast_to is not None:
        nodes.append(helper.make_node("Cast", ["c"], ["y"], to=cast_to))
        out, dtype = "y", cast_to
    graph = helper.make_graph(
        nodes,
        "cumsum",
        [helper.make_tensor_value_info("mask", source, [2, 6])],
        [helper.make_tensor_value_info(out, dtype, [2, 6])],
        [helper.make_tensor("axis", TensorProto.INT64, [], [1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", 17)])


@pytest.mark.parametrize(
    ("source", "cast_to", "exclusive", "bounds"),
    [
        (TensorProto.BOOL, TensorProto.FLOAT, 0, (0.0, 6.0)),  # 1..6 terms of 0 or 1
        (TensorProto.BOOL, TensorProto.FLOAT, 1, (0.0, 5.0)),  # 0..5 terms
        (TensorProto.INT8, TensorProto.FLOAT, 0, (-768.0, 762.0)),  # 6 * int8's range
        (TensorProto.BOOL, TensorProto.BOOL, 0, (0.0, 1.0)),  # a Cast to bool: 0 or 1
        # an int64 mask: its cumulative sum may wrap around; int64's range, which a float holds
        (TensorProto.INT64, TensorProto.FLOAT, 0, (-(2.0**63), 2.0**63)),
        (TensorProto.INT32, None, 0, (-6 * 2.0**31, 6 * 2.0**31)),  # within int64's
    ],
)
def test_a_cumulative_sum_is_bounded_by_its_terms(
    source: int, cast_to: int | None, exclusive: int, bounds: tuple[float, float]
) -> None:
    graph = ronnx.load(_cumsum_model(source, cast_to, exclusive))
    f = analyse(graph, opaque=opaque_facts)[graph.outputs[0]]
    assert (f.lo, f.hi) == bounds


def test_facts_of_enodes_built_in_a_phase_that_read_facts_are_computed() -> None:
    """A phase whose guards read facts brings them up to date before it applies its matches; the
    e-nodes it then builds carry that phase's epoch, and their facts are computed too (else a
    guard reading them later finds nothing)."""
    b = GraphBuilder()
    t = b.weight([2, 4], name="t", value=np.arange(8, dtype=np.float32).reshape(2, 4) - 3)
    eg = EGraph.from_graph(b.build(b.neg(t), b.relu(b.neg(t))))
    rules = parse_rules(
        "# name: probe\n(neg ?t) => (neg (ewmul ?t (scalar 1.0)))\nwhere finite(?t)\n"
        "# name: build\n(relu ?t) => (relu (ewadd ?t (scalar 0.0)))\n"
    )
    explore(eg, list(rules), limits=Limits(iterations=1))
    built = eg.db.execute(
        "SELECT f.lo, f.hi FROM enode e LEFT JOIN fact f ON f.class = e.class"
        " WHERE e.op = 'ewadd' AND NOT e.filtered"
    )
    assert built == [(-4.0, 3.0)]
