# ruff: noqa: E501
"""The batched rule program finds exactly the matches of the per-rule conjunctive queries."""

from __future__ import annotations

import numpy as np
import pytest

from relsat import models
from relsat.engine import phase
from relsat.engine.compile import rule_sql
from relsat.engine.egraph import EGraph
from relsat.engine.explore import Limits, explore, find_matches
from relsat.graph.builder import GraphBuilder, Tensor
from relsat.rewrite.rulefile import RULES_DIR, load_rules, parse_rules

RULES = load_rules()


def _oracle(eg: EGraph, multi: bool) -> set[tuple]:
    found = set()
    for rule in RULES:
        if rule.is_multi != multi:
            continue
        for row in eg.db.execute(rule_sql(rule)):
            roots = row[:2] if multi else (row[0], -1)
            found.add((rule.name, *roots, tuple(row[2 if multi else 1 :])))
    return found


def _engine(eg: EGraph, multi: bool) -> set[tuple]:
    table = find_matches(eg, RULES, multi=multi).to_pylist()
    out = set()
    for r in table:
        n = len(RULES[r["rule"]].slots)  # tensor and parameter variables
        out.add((r["rule"], r["root0"], r["root1"], tuple(r["v"][:n])))
    assert len(out) == len(table), "the engine reported a match twice"
    return out


@pytest.mark.parametrize("name", ["nasrnn", "resnext50", "squeezenet", "bert", "inceptionv3"])
@pytest.mark.parametrize("iterations", [0, 2])
def test_engine_matches_equal_per_rule_sql(name: str, iterations: int) -> None:
    eg = EGraph.from_graph(models.load(name))
    if iterations:
        explore(eg, RULES, limits=Limits(iterations=iterations))
    found = 0
    for multi in (False, True):
        engine, oracle = _engine(eg, multi), _oracle(eg, multi)
        assert engine == oracle, (sorted(engine - oracle)[:5], sorted(oracle - engine)[:5])
        found += len(engine)
    assert found > 0


DEEP = parse_rules(
    """\
# name: three-subpatterns
(attention ?s:float (relu ?q) (relu ?k) (relu ?v) ?m) => (attention ?s ?q ?k ?v ?m)

# name: a-repeat-across-subpatterns
(attention ?s:float (relu ?q) ?k (relu ?q) ?m) => (attention ?s ?q ?k ?q ?m)

# name: third-position
(conv2d_bias ?a:int ?b:int ?c:int ?d:int ?x ?w (relu ?bias)) => (conv2d_bias ?a ?b ?c ?d ?x ?w ?bias)

# name: fifth-position
(batchnorm ?e:float ?x ?g ?b ?m (relu ?v)) => (batchnorm ?e ?x ?g ?b ?m ?v)

# name: a-repeat-at-four-and-five
(batchnorm ?e:float ?x ?g ?b ?m ?m) => (batchnorm ?e ?x ?g ?b ?m ?m)
"""
)


def _deep_graph() -> EGraph:
    b = GraphBuilder()
    q, kt, v = (
        b.input(s, name=n)
        for s, n in (([1, 2, 4, 4], "q"), ([1, 2, 4, 4], "k"), ([1, 2, 4, 4], "v"))
    )
    mask = b.input([1, 1, 4, 4], name="m")
    outs = [
        b.attention(b.relu(q), b.relu(kt), b.relu(v), mask, 0.5),  # three sub-patterns
        b.attention(b.relu(q), kt, b.relu(q), mask, 0.5),  # the same class twice
        b.attention(b.relu(q), b.relu(kt), v, mask, 0.5),  # v not a relu: a near miss
        b.attention(b.relu(q), kt, b.relu(v), mask, 0.25),  # q and v differ: a near miss
    ]
    x = b.input([1, 4, 6, 6], name="x")
    w = b.weight([4, 4, 3, 3], name="w")
    bias = b.weight([1, 4, 1, 1], name="bias")
    outs.append(b.conv2d_bias(x, w, b.relu(bias), (1, 1), "SAME", "NONE"))
    g, beta, m, var = (b.weight([4], name=n) for n in ("g", "beta", "mean", "var"))
    outs.append(b.batchnorm(x, g, beta, m, b.relu(var)))  # a sub-pattern at child 4
    outs.append(b.batchnorm(x, g, beta, var, var))  # one class at children 3 and 4
    outs.append(b.batchnorm(x, g, beta, m, var))  # a near miss of both
    return EGraph.from_graph(b.build(outs))


@pytest.mark.parametrize("recursive", [True, False])
def test_subpatterns_at_any_position_match_as_the_per_rule_sql(
    recursive: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(phase, "RECURSIVE_BELOW", 10**9 if recursive else 0)
    eg = _deep_graph()
    table = find_matches(eg, DEEP, multi=False).to_pylist()
    engine = {
        (DEEP[r["rule"]].name, r["root0"], tuple(r["v"][: len(DEEP[r["rule"]].slots)]))
        for r in table
    }
    oracle = {
        (rule.name, row[0], tuple(row[1:]))
        for rule in DEEP
        for row in eg.db.execute(rule_sql(rule))
    }
    assert engine == oracle
    assert sorted(name for name, _, _ in engine) == [
        "a-repeat-across-subpatterns",
        "a-repeat-at-four-and-five",
        "fifth-position",
        "third-position",
        "three-subpatterns",
    ]


OPAQUE = parse_rules(
    """\
# name: any-where
(onnx.Where ?c ?a ?b) => (ewadd ?b (ewmul ?c (ewsub ?a ?b)))

# name: abs-square
(ewmul (onnx.Abs ?x) (onnx.Abs ?x)) => (ewmul ?x ?x)
"""
) + load_rules(RULES_DIR / "transformer.rules")


def _opaque_graph() -> EGraph:
    """ONNX operators kept opaque: torch's NaN guard, its near misses (another tensor, a fill of
    1, IsInf, an IsNaN of the com.microsoft domain) and a square of Abs."""
    b = GraphBuilder()
    x, y = b.input([2, 3], name="x"), b.input([2, 3], name="y")
    zero = b.weight([1], name="zero", value=np.zeros(1, np.float32))
    one = b.weight([1], name="one", value=np.ones(1, np.float32))

    def op(kind: str, *xs: Tensor, domain: str = "") -> Tensor:
        attrs = {"_onnx": {"domain": domain, "inputs": ["t"] * len(xs)}}
        return b.opaque(kind, xs, [(2, 3)], attrs)[0]

    nan = op("IsNaN", x)
    outs = [
        op("Where", nan, zero, x),  # the guard
        op("Where", nan, zero, y),  # another tensor
        op("Where", nan, one, x),  # a fill of 1
        op("Where", op("IsInf", x), zero, x),  # IsInf
        op("Where", op("IsNaN", x, domain="com.microsoft"), zero, x),  # another domain's IsNaN
        b.mul(op("Abs", x), op("Abs", x)),
        b.mul(op("Abs", x), op("Abs", y)),  # two tensors: a near miss
    ]
    return EGraph.from_graph(b.build(*outs))


@pytest.mark.parametrize("recursive", [True, False])
def test_onnx_operators_match_as_the_per_rule_sql(
    recursive: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(phase, "RECURSIVE_BELOW", 10**9 if recursive else 0)
    eg = _opaque_graph()
    table = find_matches(eg, OPAQUE, multi=False).to_pylist()
    engine = {
        (OPAQUE[r["rule"]].name, r["root0"], tuple(r["v"][: len(OPAQUE[r["rule"]].slots)]))
        for r in table
    }
    oracle = {
        (rule.name, row[0], tuple(row[1:]))
        for rule in OPAQUE
        if not rule.is_multi
        for row in eg.db.execute(rule_sql(rule))
    }
    assert engine == oracle
    names = sorted(name for name, _, _ in engine)
    # five Where (IsNaN of the contrib domain is another operator), one square of Abs (which
    # square-as-pow sees too), one guard: not its near misses
    assert names == ["abs-square", *["any-where"] * 5, "nanzero-guard", "square-as-pow"]
    guard = {root for name, root, _ in engine if name == "nanzero-guard"}
    assert len(guard) == 1
