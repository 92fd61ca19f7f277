"""Rules marked ``runtime``: fusions onnxruntime makes itself when it loads a model. A model whose
only rewrites are such is kept as it is, neither verified nor timed against its own runtime
form (relsat.pipeline.verify.unchanged)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import relsat
import relsat.onnx
from relsat import models
from relsat.engine.egraph import EGraph
from relsat.engine.explore import Limits, Schedule, StopReason, explore
from relsat.errors import DatabaseError, RuleSyntaxError
from relsat.rewrite.rulefile import load_rules, parse_rules

RNG = np.random.default_rng(7)
ANALYTIC = {"cost_model": "analytic-cpu", "precompute_weights": True}


def _weight(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(np.float32), name)


def _conv_bn_relu(*, turned: bool = False) -> onnx.ModelProto:
    """conv -> batchnorm -> relu, what onnxruntime folds into one Conv (``turned``: then two
    transposes that cancel, which relsat folds away: not a rewrite marked ``runtime``)."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "t", "m", "v"], ["n"], epsilon=1e-3),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    inits = [_weight("w", 4, 4, 3, 3), _weight("b", 4), _weight("s", 4), _weight("t", 4)]
    inits += [_weight("m", 4), numpy_helper.from_array(np.full(4, 0.8, np.float32), "v")]
    out = "y"
    if turned:
        nodes.append(helper.make_node("Transpose", ["y"], ["t1"], perm=[0, 2, 3, 1]))
        nodes.append(helper.make_node("Transpose", ["t1"], ["z"], perm=[0, 3, 1, 2]))
        out = "z"
    graph = helper.make_graph(
        nodes,
        "cbr",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_flag_parses_prints_and_is_refused_twice() -> None:
    text = "# name: r\n(relu (relu ?x)) => (relu ?x)\nruntime\n"
    rule = parse_rules(text)["r"]
    assert rule.runtime and "\nruntime" in str(rule)
    assert not parse_rules("# name: r\n(relu (relu ?x)) => (relu ?x)\n")["r"].runtime
    with pytest.raises(RuleSyntaxError, match="'runtime' given twice"):
        parse_rules(text + "runtime\n")
    shipped = {r.name for r in load_rules() if r.runtime}
    assert {"conv-batchnorm-fold", "conv-bias-relu-fuse", "matmul-bias-fuse"} <= shipped
    assert not any(name.endswith("-unfuse") for name in shipped)


def test_a_model_with_only_runtime_rewrites_is_kept_untimed() -> None:
    """The batch norm folded and the ReLU fused, as onnxruntime does: the input is kept, not
    verified, exported or timed (timing on, as by default)."""
    result = relsat.optimize(_conv_bn_relu(), relsat.Options(**ANALYTIC))
    assert {"conv-bias-batchnorm-fold", "conv-bias-relu-fuse"} <= set(result.rewrites())
    assert (result.kept, result.why) == ("original", "no rewrite")
    assert result.latency is None and result.exported is None
    assert result.verification == "not needed (unchanged)"


def test_a_model_with_another_rewrite_is_verified_and_written() -> None:
    result = relsat.optimize(_conv_bn_relu(turned=True), relsat.Options(**ANALYTIC, timing=None))
    assert result.run.tidied  # the two transposes folded away: not a runtime rule's rewrite
    assert result.verification == "passed" and result.ort_check == "passed"
    assert (result.kept, result.why) == ("optimized", "not timed")


# ---------------------------------------------------------------------------------------------
# Runtime phases: the runtime rules run before the first multi-pattern phase


def _sibling_conv_relus(*, bias: bool = True) -> onnx.ModelProto:
    """Two Conv + Relu of one input, each its own output: an Inception block's 1x1 reductions
    before its branches go on apart. The importer writes each Conv and Relu apart; the sibling
    merge (one conv of stacked weights, its ReLU fused) is a multi-pattern rule over the fused
    units."""
    nodes, inits = [], []
    for k in (1, 2):
        inputs = ["x", f"w{k}", f"b{k}"] if bias else ["x", f"w{k}"]
        nodes.append(helper.make_node("Conv", inputs, [f"c{k}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{k}"], [f"r{k}"]))
        inits += [_weight(f"w{k}", 8, 8, 3, 3)] + ([_weight(f"b{k}", 8)] if bias else [])
    graph = helper.make_graph(
        nodes,
        "siblings",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info(r, TensorProto.FLOAT, [1, 8, 16, 16]) for r in ("r1", "r2")],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _egraph(model: onnx.ModelProto) -> EGraph:
    return EGraph.from_graph(relsat.onnx.load(model))


#: Merged convs with their ReLU fused (of stacked weights) that a multi-pattern rule built.
MERGED_FUSED = (
    "SELECT count(*) FROM enode e JOIN enode w ON w.class = e.c1 "
    "WHERE e.op = $op AND e.p3 = 2 AND w.op = 'concat' "
    "AND e.rule IN (SELECT name FROM rule_info WHERE multi)"
)


@pytest.mark.parametrize(("bias", "op"), [(True, "conv2d_bias"), (False, "conv2d")])
def test_sibling_conv_relus_of_an_onnx_model_merge_at_k_multi_1(bias: bool, op: str) -> None:
    """ONNX's Conv and Relu are fused by the runtime phases before iteration 0's multi-pattern
    phase, which merges the fused convs (one conv, its ReLU fused), as it does on a graph in
    TENSAT's format. Without them it sees only the unfused convs (the ReLUs are fused into the
    merged conv later, by way of other rules, in this small graph)."""
    result = relsat.optimize(
        _sibling_conv_relus(bias=bias), relsat.Options(**ANALYTIC, timing=None)
    )
    phases = [(s.iteration, s.phase) for s in result.iterations]
    assert phases[:3] == [(0, "runtime"), (0, "runtime"), (0, "multi")]
    assert result.db.scalar(MERGED_FUSED, {"op": op}) >= 1
    assert result.graph.op_counts()[op] == 1 and "relu" not in result.graph.op_counts()
    assert result.verification == "passed"

    off = relsat.optimize(
        _sibling_conv_relus(bias=bias),
        relsat.Options(**ANALYTIC, timing=None, runtime_first=False),
    )
    assert "runtime" not in {s.phase for s in off.iterations}
    assert off.db.scalar(MERGED_FUSED, {"op": op}) == 0


def test_runtime_phases_run_to_a_fixpoint_and_are_recorded() -> None:
    """Batch norm folded, then the ReLU fused into the folded conv, then nothing: three runtime
    phases, each a stats row with its rules' rows, before the multi-pattern phase."""
    eg = _egraph(_conv_bn_relu())
    result = explore(eg, limits=Limits(iterations=1), schedule=Schedule(runtime_first=True))
    assert [s.phase for s in result.iterations] == ["runtime"] * 3 + ["multi", "single"]
    assert [s.applied > 0 for s in result.iterations[:3]] == [True, True, False]
    rules = eg.sql("SELECT DISTINCT rule FROM rule_stats WHERE applied > 0").column(0)
    assert {"conv-bias-batchnorm-fold", "conv-bias-relu-fuse"} <= set(rules.to_pylist())
    stored = eg.sql("SELECT phase FROM iteration_stats ORDER BY epoch").column(0).to_pylist()
    assert stored == [s.phase for s in result.iterations]
    assert not any(eg.audit().values())


def test_runtime_first_changes_nothing_where_the_runtime_rules_find_nothing() -> None:
    """TENSAT's graphs come fused: Inception-v3 explores to the same e-graph with or without
    the runtime phases (one, finding nothing), and by default there are none."""
    plain = EGraph.from_graph(models.load("inceptionv3"))
    first = EGraph.from_graph(models.load("inceptionv3"))
    a = explore(plain)
    b = explore(first, schedule=Schedule(runtime_first=True))
    assert "runtime" not in {s.phase for s in a.iterations}
    assert [(s.phase, s.matches) for s in b.iterations[:1]] == [("runtime", 0)]
    assert (a.enodes, a.eclasses) == (b.enodes, b.eclasses)


def test_runtime_phases_respect_the_limits() -> None:
    """No iteration, no runtime phase; no time, none either; an e-node limit caps a runtime
    phase like any other (the stop is NODE_LIMIT), and the e-graph continued with a higher
    limit reaches the one explored in one go."""
    schedule = Schedule(runtime_first=True)
    model = _sibling_conv_relus()
    eg = _egraph(model)
    for limits in (Limits(iterations=0), Limits(seconds=0.0)):
        assert explore(eg, limits=limits, schedule=schedule).iterations == ()
    whole = _egraph(model)
    explore(whole, schedule=schedule)
    start = eg.counts()[0]
    capped = explore(eg, limits=Limits(nodes=start + 1), schedule=schedule)
    assert capped.stop is StopReason.NODE_LIMIT and capped.enodes <= start + 1
    assert [(s.phase, s.capped > 0) for s in capped.iterations] == [("runtime", True)]
    again = explore(eg, schedule=schedule)
    assert again.iterations[0].phase == "runtime" and again.stop is StopReason.SATURATED
    assert eg.counts() == whole.counts()
    assert not any(eg.audit().values())


def test_an_egraph_stopped_in_its_runtime_phases_goes_on_from_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failure in the second runtime phase rolls it back; the first stays, and the e-graph
    explored again goes on with the runtime phases (resume), then iteration 0's multi-pattern
    phase, to the e-graph explored in one go, with the same phases recorded."""
    import relsat.engine.phase as ph

    model, schedule = _conv_bn_relu(), Schedule(runtime_first=True)
    whole = _egraph(model)
    explore(whole, schedule=schedule)
    real, calls = ph.check_new, {"n": 0}

    def failing(db):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 2:
            raise DatabaseError("disk full (simulated)")
        return real(db)

    eg = _egraph(model)
    monkeypatch.setattr(ph, "check_new", failing)
    with pytest.raises(DatabaseError, match="simulated"):
        explore(eg, schedule=schedule)
    assert eg.sql("SELECT phase FROM iteration_stats").column(0).to_pylist() == ["runtime"]
    monkeypatch.setattr(ph, "check_new", real)
    again = explore(eg, schedule=schedule)
    assert [s.phase for s in again.iterations][:3] == ["runtime", "runtime", "multi"]
    cols = "iteration, phase, matches, applied, new_enodes, merged, enodes"
    assert eg.sql(f"SELECT {cols} FROM iteration_stats ORDER BY epoch").equals(
        whole.sql(f"SELECT {cols} FROM iteration_stats ORDER BY epoch")
    )
    assert eg.counts() == whole.counts()
    # stopped between the runtime phases and the multi-pattern one: goes on with the latter
    eg = _egraph(model)
    explore(eg, limits=Limits(iterations=1), schedule=schedule)
    eg.db.execute("DELETE FROM iteration_stats WHERE phase <> 'runtime'")
    assert explore(eg, schedule=schedule).iterations[0].phase == "multi"
