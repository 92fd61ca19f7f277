"""relsat.optimize end to end: explore, price, extract, decode, verify."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

from relsat import (
    GraphBuilder,
    IlpOptions,
    Limits,
    Options,
    Result,
    VerificationError,
    models,
    optimize,
)
from relsat.cost import AnalyticModel, CostModel, OpSignature
from relsat.cost.model import Pricing
from relsat.engine.egraph import EGraph
from relsat.errors import RelsatError, SettingsError
from relsat.graph.serial import to_json
from relsat.onnx.runtime import OrtSettings

NASRNN = models.load("nasrnn")


def depthwise_pair():  # type: ignore[no-untyped-def]
    """Two depthwise convs of one input, concatenated: TENSAT's unguarded shared-input merge
    rewrites this into one wrong grouped conv (SEMANTICS.md §7 item 3)."""
    b = GraphBuilder()
    x = b.input([1, 8, 12, 12], name="x")
    y1 = b.conv2d(x, b.weight([8, 1, 3, 3], name="w1"), padding="SAME")
    y2 = b.conv2d(x, b.weight([8, 1, 3, 3], name="w2"), padding="SAME")
    return b.build(b.concat(1, [y1, y2]))


@cache
def nasrnn_3() -> Result:
    """NASRNN optimized with three iterations, once: the tests below only read the result."""
    return optimize(models.load("nasrnn"), Options(limits=Limits(iterations=3)))


@cache
def squeezenet(extractor: str = "ilp") -> Result:
    """SqueezeNet optimized with ``extractor``, once per extractor (the tests only read it)."""
    return optimize(models.load("squeezenet"), Options(extractor=extractor))


def test_optimize_nasrnn() -> None:
    result = nasrnn_3()
    assert result.verified
    assert result.cost_after < result.cost_before
    assert result.reduction > 0.25  # fused gate matmuls; TENSAT's historical run: 33 %
    assert result.extraction.status == "optimal"
    assert result.graph.op_counts()["matmul"] < result.original.op_counts()["matmul"]
    report = result.report()
    assert "cost" in report and "verify   passed" in report
    assert set(result.seconds) >= {"explore", "price", "extract", "verify"}


@pytest.mark.parametrize("extractor", ["greedy", "greedy-dag", "ilp"])
def test_extractors(extractor: str) -> None:
    result = squeezenet(extractor)
    assert result.verified and result.cost_after <= result.cost_before
    assert result.graph.op_counts()["relu"] < 26  # ReLUs fused into the convs


def test_unguarded_rules_are_caught_by_verification() -> None:
    graph = depthwise_pair()
    with pytest.raises(VerificationError) as info:
        optimize(graph, Options(guards=False))
    assert info.value.check == "numpy" and info.value.comparison is not None
    assert not info.value.comparison.ok
    result = optimize(graph)  # guarded: the merge is refused, the result is right
    assert result.verified


def test_egraph_kept_in_a_file(tmp_path: Path) -> None:
    path = tmp_path / "nasrnn.duckdb"
    result = optimize(
        models.load("nasrnn"), Options(db=path, limits=Limits(iterations=2), verify=False)
    )
    counts = result.egraph.counts()
    result.egraph.close()
    again = EGraph(path)
    assert again.counts() == counts
    assert again.db.scalar("SELECT count(*) FROM enode_cost") == counts[0]
    assert again.db.scalar("SELECT count(*) FROM run") == 1


BAD_SETTINGS = [  # (what is called, the option its SettingsError names)
    (lambda: Limits(nodes=0), "nodes"),
    (lambda: Limits(nodes=-5), "nodes"),
    (lambda: Limits(nodes=2.5), "nodes"),
    (lambda: Limits(iterations=-1), "iterations"),
    (lambda: Limits(iterations=True), "iterations"),
    (lambda: Limits(seconds=-3), "seconds"),
    (lambda: Limits(seconds=float("nan")), "seconds"),
    (lambda: Options(k_multi=-1), "k_multi"),
    (lambda: Options(limits=15), "limits"),  # type: ignore[arg-type]
    (lambda: Options(cost_model="tpu"), "cost_model"),
    (lambda: Options(extractor="annealing"), "extractor"),
    (lambda: Options(cycle_filter="sometimes"), "cycle_filter"),
    (lambda: IlpOptions(time_limit=0), "time_limit"),
    (lambda: IlpOptions(time_limit=-1), "time_limit"),
    (lambda: IlpOptions(mip_gap=-0.1), "mip_gap"),
    (lambda: IlpOptions(mip_gap=2), "mip_gap"),
    (lambda: IlpOptions(order="topological"), "order"),  # type: ignore[arg-type]
    (lambda: Options(concat="gratis"), "concat"),
    (lambda: Options(precompute_weights="yes"), "precompute_weights"),  # type: ignore[arg-type]
    (lambda: AnalyticModel("z80"), "device"),
    (lambda: AnalyticModel(compute_efficiency=0), "compute_efficiency"),
    (lambda: AnalyticModel(bandwidth_efficiency=1.5), "bandwidth_efficiency"),
    (lambda: AnalyticModel(gemm_tile=(16, 0, 8)), "gemm_tile"),
    (lambda: Pricing(concat="sometimes"), "concat"),  # type: ignore[arg-type]
    (lambda: OrtSettings(threads=-1), "threads"),
    (lambda: OrtSettings(level="max"), "level"),
]


@pytest.mark.parametrize(("call", "option"), BAD_SETTINGS)
def test_bad_settings_are_typed_value_errors(call: Callable[[], object], option: str) -> None:
    with pytest.raises(SettingsError) as err:
        call()
    assert isinstance(err.value, RelsatError) and isinstance(err.value, ValueError)
    assert err.value.option == option
    assert str(err.value).startswith(f"{option} must be ")


def test_egraph_written_as_extraction_gym_json(tmp_path: Path) -> None:
    from relsat.cost import AnalyticModel, price_egraph
    from relsat.engine.explore import explore
    from relsat.engine.problem import egraph_problem, save_egraph_json
    from relsat.extract import extract, is_acyclic
    from relsat.extract.gym import load

    eg = EGraph.from_graph(models.load("nasrnn"))
    explore(eg, limits=Limits(iterations=2))
    price_egraph(eg, AnalyticModel("h100"))
    path = tmp_path / "nasrnn.json"
    save_egraph_json(eg, path)
    again = load(path)
    direct, _, _ = egraph_problem(eg)
    assert again.n_nodes == int((~direct.forbidden).sum())
    assert any(op.startswith("matmul[0]") for op in again.node_ops or [])
    a, b = extract(again, method="ilp"), extract(direct, method="ilp")
    assert abs(a.cost - b.cost) < 1e-9
    assert is_acyclic(again, a.choice)


def test_device_cost_model_uses_a_shipped_table_with_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import relsat.pipeline.price as pipeline
    from relsat.cost import AnalyticModel, CostTable, OpSignature, TableModel

    h100 = Options(cost_model="h100")
    assert isinstance(pipeline.cost_model(h100, onnx=False), AnalyticModel)  # nothing shipped
    table = CostTable()  # a fixture, clearly not a measurement: one signature, 1 ms
    sig = OpSignature("relu", (), "", ((1, 512),), (1, 512))
    table.insert("h100", [sig], [1.0], source="fixture")
    monkeypatch.setattr(pipeline, "shipped_costs", lambda device: table)
    model = pipeline.cost_model(h100, onnx=False)
    assert isinstance(model, TableModel)
    options = Options(cost_model=model, limits=Limits(iterations=1), verify=False)
    result = optimize(models.load("nasrnn"), options)
    assert result.cost_fallbacks is not None and result.cost_fallbacks > 0
    assert "priced by the fallback model" in result.report()


def test_opaque_ops_without_kernels_skip_numpy_verification() -> None:
    from relsat import GraphBuilder

    b = GraphBuilder()
    x = b.input([4, 8], name="x")
    (y,) = b.opaque("Softmax", [b.relu(b.relu(x))], [[4, 8]], {"axis": -1})
    result = optimize(b.build(y))  # verify=True, but Softmax has no NumPy kernel
    assert not result.verified
    assert "no NumPy kernel for Softmax" in result.report()
    assert result.graph.op_counts()["opaque"] == 1


def test_ties_go_to_the_input_graph() -> None:
    """Re-associating or commuting adds changes no price: the input graph stays as it is."""
    b = GraphBuilder()
    x, y, z = (b.input([1, 64, 8, 8], name=n) for n in "xyz")
    g = b.build(b.relu(b.add(b.add(x, y), z)))
    result = optimize(g)
    assert result.rewrites() == {} and result.graph.op_counts() == g.op_counts()
    assert result.cost_after == result.cost_before
    # beside a real gain (ReLU fused into the conv), the adds still stay as they were
    w = b.weight([64, 64, 3, 3], name="w")
    g = b.build([b.relu(b.add(b.add(x, y), z)), b.relu(b.conv2d(b.add(b.add(x, z), y), w))])
    result = optimize(g)
    assert result.cost_after < result.cost_before
    assert result.rewrites() == {"conv-relu-fuse": 1}


class _FreeActivations(CostModel):
    """ReLU and concat cost nothing, a conv 2 ms, 1 ms with its ReLU fused."""

    name, device = "test", "test"

    def cost(self, sig: OpSignature) -> float:
        return {"conv2d": 1.0 if sig.params[3] == 2 else 2.0}.get(sig.op, 0.0)


def test_an_exact_tie_with_fewer_enodes_still_keeps_the_input() -> None:
    """Moving two free ReLUs through a concat is an exact price tie that saves an e-node: only
    the input graph's preference keeps the ReLUs where they were (without it, fewer e-nodes win),
    while a real gain beside it is taken."""
    b = GraphBuilder()
    x, y = b.input([1, 4, 8, 8], name="x"), b.input([1, 4, 8, 8], name="y")
    conv = b.relu(b.conv2d(x, b.weight([4, 4, 3, 3], name="w")))
    g = b.build([b.concat(1, [b.relu(x), b.relu(y)]), conv])
    result = optimize(g, Options(cost_model=_FreeActivations()))
    assert result.rewrites() == {"conv-relu-fuse": 1}
    assert (result.cost_before, result.cost_after) == (2.0, 1.0)


def test_attribution_names_the_rules_that_paid() -> None:
    result = nasrnn_3()
    gains = result.attribution()
    assert set(gains) <= set(result.rewrites()) and gains
    assert all(0 <= ms <= result.cost_before for ms in gains.values())
    assert max(gains.values()) > 0  # without the top rule the result is dearer
    assert "gains    " in result.report(gains=True)


def test_same_inputs_same_output() -> None:
    """The same model, rules, cost table and settings give the same graph on every run."""
    first, second = squeezenet(), optimize(models.load("squeezenet"))  # ilp: the default
    assert to_json(first.graph) == to_json(second.graph)


def test_a_unit_folded_into_the_operators_after_it_pays_no_rewrite_margin() -> None:
    """conv -> batchnorm -> relu, as the input graph (classes 1, 2, 3 over an input, class 0);
    the rules add the conv with the batchnorm folded in (class 2) and with the ReLU too (class
    3), both priced as the conv's unit, and a merged conv of another unit (class 4): the two
    folds are the conv kernel the input already runs (no margin), the merge is a new price."""
    import numpy as np

    from relsat.extract import Problem
    from relsat.pipeline.price import refolded

    # nodes: input, conv, batchnorm, relu | conv+bn, conv+bn+relu, merged conv
    node_class = [0, 1, 2, 3, 2, 3, 4]
    children = [[], [0], [1], [2], [0], [0], [0]]
    unit = np.array([0, 1, 2, 3, 1, 1, 5])
    born0 = np.array([True, True, True, True, False, False, False])
    ptr = np.cumsum([0, *map(len, children)])
    problem = Problem(
        node_class=np.array(node_class),
        node_cost=np.ones(7),
        child_ptr=ptr,
        child_idx=np.array([c for kids in children for c in kids]),
        roots=np.array([3]),
    )
    assert refolded(problem, unit, born0).tolist() == [False] * 4 + [True, True, False]
    # without the batchnorm's fold, the ReLU's replaces a batchnorm: a new price
    unit[4] = 6
    assert refolded(problem, unit, born0).tolist() == [False] * 7
