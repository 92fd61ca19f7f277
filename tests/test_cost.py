"""Costs: formulas, the analytic model's invariants, policies, the cost table, pricing e-graphs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relsat import GraphBuilder, models
from relsat.cost import (
    DEVICES,
    ZERO_COST,
    AnalyticModel,
    CostError,
    CostModel,
    CostTable,
    OpSignature,
    Pricing,
    TableModel,
    kernels,
    price_egraph,
)
from relsat.engine.egraph import EGraph
from relsat.engine.explore import Limits, explore
from relsat.errors import RelsatError

H100, T4 = AnalyticModel("h100"), AnalyticModel("t4")


def sig(
    op: str, inputs: Sequence[Sequence[int]], output: Sequence[int], *params: int
) -> OpSignature:
    return OpSignature(op, params, "", tuple(map(tuple, inputs)), tuple(output))


def conv(x: Sequence[int], w: Sequence[int], act: int = 0, stride: int = 1) -> OpSignature:
    n, _, h, wd = x
    out = (n, w[0], -(-h // stride), -(-wd // stride))  # SAME
    return sig("conv2d", [x, w], out, stride, stride, 0, act)


class Counting(CostModel):
    """A model that records what it is asked to price."""

    name = "counting"
    device = "test"

    def __init__(self) -> None:
        self.asked: list[OpSignature] = []

    def cost(self, s: OpSignature) -> float:
        self.asked.append(s)
        return 1.0 + len(s.key) / 1000


# --- signatures -----------------------------------------------------------------------------


def test_signature_pads_params_and_has_a_stable_key() -> None:
    a = OpSignature("matmul", (0,), "", ([2, 3], [3, 4]), [2, 4])  # type: ignore[arg-type]
    b = sig("matmul", [(2, 3), (3, 4)], (2, 4), 0, -1, -1)
    assert a == b and hash(a) == hash(b) and a.params == (0, -1, -1, -1, -1, -1)
    assert a.key == '["matmul",[0,-1,-1,-1,-1,-1],"",[[2,3],[3,4]],[2,4]]'


# --- FLOPs and bytes --------------------------------------------------------------------------


def test_conv_flops_and_bytes() -> None:
    # grouped: C=4, Cw=2 -> g=2; 2·N·O·H'·W'·(C/g)·kh·kw = 2·1·6·8·8·2·3·3
    fused = kernels(conv((1, 4, 8, 8), (6, 2, 3, 3), act=2))
    assert len(fused) == 1
    assert fused[0].gemm_flops == 2 * 6 * 8 * 8 * 2 * 3 * 3 == 13824
    assert fused[0].flops == 6 * 8 * 8  # the ReLU epilogue, one per output element
    assert fused[0].bytes == 4 * (4 * 64 + 6 * 2 * 9 + 6 * 64)
    plain = kernels(conv((1, 4, 8, 8), (6, 2, 3, 3)))
    assert [k.gemm_flops for k in plain] == [13824, 0]  # + TASO's bias-add kernel
    assert plain[1].bytes == 4 * (2 * 6 * 64 + 6)


def test_matmul_elementwise_pool_concat_formulas() -> None:
    (mm,) = kernels(sig("matmul", [(3, 2, 4), (3, 4, 5)], (3, 2, 5), 0))
    assert (mm.gemm_flops, mm.bytes) == (2 * 3 * 2 * 4 * 5, 4 * (24 + 60 + 30))
    (add,) = kernels(sig("ewadd", [(2, 3), (3,)], (2, 3)))
    assert (add.flops, add.bytes) == (6, 4 * (6 + 3 + 6))
    (pool,) = kernels(sig("poolmax", [(1, 2, 4, 4)], (1, 2, 2, 2), 2, 2, 2, 2, 1, 0))
    assert (pool.flops, pool.bytes) == (8 * 2 * 2, 4 * (32 + 8))
    assert [k.bytes for k in kernels(sig("concat", [(1, 2), (1, 3)], (1, 5), 1, 2))] == [16, 24]
    assert [k.flops for k in kernels(sig("sigmoid", [(10,)], (10,)))] == [40]
    assert [k.flops for k in kernels(sig("relu", [(10,)], (10,)))] == [10]
    # a matmul with a fused activation runs it as a second kernel, as TASO times it
    assert len(kernels(sig("matmul", [(2, 3), (3, 4)], (2, 4), 3))) == 2


def test_gemm_dimensions_round_up_to_the_tile() -> None:
    (k,) = kernels(sig("matmul", [(1, 8), (8, 8)], (1, 8), 0))
    assert (k.gemm_flops, k.gemm_padded) == (2 * 1 * 8 * 8, 2 * 16 * 16 * 8)


def test_roofline_by_hand() -> None:
    d = DEVICES["h100"]
    n = 1024 * 1024
    memory_ms = 1e3 * 8 * n / (d.bandwidth * 0.8)
    assert H100.cost(sig("relu", [(n,)], (n,))) == pytest.approx(d.launch_overhead_ms + memory_ms)
    # compute-bound: a large square matmul on T4 (fp32 only, no TF32)
    m = 2048
    t4 = DEVICES["t4"]
    compute_ms = 1e3 * 2 * m**3 / (t4.tensor_flops * 0.7)
    got = T4.cost(sig("matmul", [(m, m), (m, m)], (m, m), 0))
    assert got == pytest.approx(t4.launch_overhead_ms + compute_ms)


def test_opaque_is_priced_by_output_bytes() -> None:
    s = OpSignature("opaque", (), "Gelu|{}|[[1,1000]]", ((1, 1000),), (1, 1000))
    assert [k.bytes for k in kernels(s)] == [4000]
    assert H100.cost(s) > 0


# --- invariants -----------------------------------------------------------------------------


@pytest.mark.parametrize("op", sorted(ZERO_COST))
def test_zero_cost_ops(op: str) -> None:
    s = sig(op, [(64, 64), (64, 64)], (64, 64))
    assert H100.cost(s) == 0.0 and T4.cost(s) == 0.0


dims = st.integers(1, 300)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 8),
    c=st.integers(1, 256),
    hw=st.integers(1, 64),
    o=st.integers(1, 256),
    k=st.sampled_from([1, 3, 5]),
    act=st.sampled_from([1, 2, 3]),
    dev=st.sampled_from(sorted(DEVICES)),
)
def test_fused_activation_is_never_dearer(
    n: int, c: int, hw: int, o: int, k: int, act: int, dev: str
) -> None:
    m = AnalyticModel(dev)
    x, w = (n, c, hw, hw), (o, c, k, k)
    fused, plain = m.cost(conv(x, w, act)), m.cost(conv(x, w))
    out = (n, o, hw, hw)
    separate = m.cost(sig({1: "sigmoid", 2: "relu", 3: "tanh"}[act], [out], out))
    assert fused <= plain <= plain + separate  # conv+ReLU <= conv (§6.1), and <= conv, relu


@pytest.mark.parametrize(
    "s",
    [
        conv((1, 64, 56, 56), (64, 64, 3, 3), act=2),
        sig("matmul", [(64, 1024), (1024, 1024)], (64, 1024), 0),
        sig("ewadd", [(1, 256, 56, 56)] * 2, (1, 256, 56, 56)),
        sig("concat", [(1, 64, 28, 28)] * 3, (1, 192, 28, 28), 1, 4),
    ],
    ids=lambda s: s.op,
)
def test_h100_is_faster_than_t4(s: OpSignature) -> None:
    assert H100.cost(s) < T4.cost(s)


@settings(max_examples=60, deadline=None)
@given(
    op=st.sampled_from(["relu", "ewadd", "matmul", "conv2d", "poolavg", "concat"]),
    shape=st.lists(dims, min_size=4, max_size=4),
    axis=st.integers(0, 3),
    grow=st.integers(1, 300),
    dev=st.sampled_from(sorted(DEVICES)),
)
def test_monotonic_in_size(op: str, shape: list[int], axis: int, grow: int, dev: str) -> None:
    shape = [min(d, 40) for d in shape]  # keep conv and matmul sizes small
    bigger = list(shape)
    bigger[axis] += grow % 40
    m = AnalyticModel(dev)

    def build(s: list[int]) -> OpSignature:
        n, c, h, w = s
        if op == "matmul":
            return sig("matmul", [(n, c, h), (n, h, w)], (n, c, w), 0)
        if op == "conv2d":
            return conv((1, c, h, w), (n, c, 3, 3))
        if op == "poolavg":
            return sig("poolavg", [s], s, 3, 3, 1, 1, 0, 0)
        if op == "concat":
            return sig("concat", [s, s], (n * 2, c, h, w), 0, 4)
        return sig(op, [s] * (2 if op == "ewadd" else 1), s)

    assert m.cost(build(shape)) <= m.cost(build(bigger))


# --- errors ---------------------------------------------------------------------------------


def test_cost_error_names_op_and_shapes() -> None:
    with pytest.raises(CostError) as err:
        H100.cost(sig("frobnicate", [(2, 3)], (2, 3)))
    assert isinstance(err.value, RelsatError)
    assert err.value.op == "frobnicate" and err.value.inputs == [[2, 3]]
    assert "frobnicate([2,3])" in str(err.value)
    with pytest.raises(CostError, match="matmul"):
        H100.cost(sig("matmul", [(2, 3), (4, 5)], (2, 5), 0))
    with pytest.raises(CostError, match="conv2d"):
        H100.cost(sig("conv2d", [(1, 3, 8, 8)], (1, 3, 8, 8), 1, 1, 0, 0))
    with pytest.raises(ValueError, match="device must be one of"):
        AnalyticModel("z80")


# --- policies -------------------------------------------------------------------------------


def test_pricing_policies() -> None:
    ops = np.array(["concat", "concat", "matmul", "matmul"])
    weights = np.array([True, False, True, False])
    assert Pricing().free(ops, weights).tolist() == [True, False, False, False]
    assert Pricing(concat="free").free(ops, weights).tolist() == [True, True, False, False]
    assert Pricing(precompute_weights=True).free(ops, weights).tolist() == [
        True, False, True, False,
    ]  # fmt: skip
    with pytest.raises(ValueError):
        Pricing(concat="sometimes")  # type: ignore[arg-type]


def weights_graph() -> EGraph:
    """concat of two weights, concat of an input and a weight, matmul of two weights."""
    b = GraphBuilder()
    x = b.input([4, 8], name="x")
    w1, w2 = b.weight([4, 8], name="w1"), b.weight([4, 8], name="w2")
    ww = b.concat(0, [w1, w2])
    xw = b.concat(0, [x, w1])
    m = b.matmul(b.weight([8, 4], name="w3"), b.weight([4, 8], name="w4"))
    return EGraph.from_graph(b.build(ww, xw, m))


def priced(eg: EGraph, **options: object) -> dict[str, list[float]]:
    price_egraph(eg, H100, cache=False, **options)  # type: ignore[arg-type]
    rows = eg.db.execute(
        "SELECT e.op, c.ms FROM enode e JOIN enode_cost c ON c.enode = e.id ORDER BY e.id"
    )
    out: dict[str, list[float]] = {}
    for op, ms in rows:
        out.setdefault(op, []).append(ms)
    return out


def test_concat_policies_and_precomputed_weights() -> None:
    eg = weights_graph()
    copy = priced(eg)
    assert copy["concat"][0] == 0.0 and copy["concat"][1] > 0  # all-weights concat is free
    assert copy["matmul"][0] > 0  # weight-only work is charged by default (TENSAT)
    assert priced(eg, concat="free")["concat"] == [0.0, 0.0]
    pre = priced(eg, precompute_weights=True)
    assert pre["matmul"] == [0.0] and pre["concat"][1] == copy["concat"][1]


# --- the cost table -------------------------------------------------------------------------

SIGS = [
    conv((1, 4, 8, 8), (8, 4, 3, 3), act=2),
    sig("matmul", [(2, 3), (3, 4)], (2, 4), 0),
    OpSignature("opaque", (), "Gelu|{}|[[1,8]]", ((1, 8),), (1, 8)),
]


def test_table_insert_lookup_replace() -> None:
    table = CostTable()
    table.insert("h100", SIGS, [1.0, 2.0, 3.0], "measured:test")
    assert table.lookup("h100", SIGS) == dict(zip(SIGS, [1.0, 2.0, 3.0], strict=True))
    assert table.lookup("t4", SIGS) == {}
    table.insert("h100", SIGS[:1], [5.0], "measured:test")  # replaces, never duplicates
    assert len(table) == 3 and table.get("h100", SIGS[0]) == 5.0


def test_table_parquet_round_trip(tmp_path: Path) -> None:
    table = CostTable()
    table.insert("h100", SIGS, H100.costs(SIGS), "analytic")
    table.insert("t4", SIGS[:2], [7.0, 8.0], "measured:test")
    path = tmp_path / "costs.parquet"
    table.save_parquet(path)
    loaded = CostTable.from_parquet(path)
    assert loaded.to_arrow().equals(table.to_arrow())
    assert loaded.lookup("t4", SIGS) == {SIGS[0]: 7.0, SIGS[1]: 8.0}


def test_table_model_falls_back_and_counts() -> None:
    table = CostTable()
    table.insert("h100", SIGS[:1], [42.0], "measured:test")
    model = TableModel(table, "h100")
    got = model.costs(SIGS + SIGS[1:2])
    assert (
        got[0] == 42.0 and got[1] == got[3] == H100.cost(SIGS[1]) and got[2] == H100.cost(SIGS[2])
    )
    assert model.fallbacks == 2
    assert model.cost(SIGS[0]) == 42.0 and model.fallbacks == 2


def test_table_model_cannot_price_what_its_fallback_cannot() -> None:
    with pytest.raises(CostError):
        TableModel(CostTable(), "h100").cost(sig("frobnicate", [(1,)], (1,)))


# --- pricing an e-graph ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def explored() -> EGraph:
    eg = EGraph.from_graph(models.load("nasrnn"))
    explore(eg, limits=Limits(iterations=1))
    return eg


def test_price_egraph_prices_every_enode_once(explored: EGraph) -> None:
    result = price_egraph(explored, H100, concat="free")
    ids = sorted(r[0] for r in explored.db.execute("SELECT id FROM enode"))
    assert sorted(result["enode"].to_pylist()) == ids
    stored = explored.db.execute("SELECT count(*), count(DISTINCT enode) FROM enode_cost")
    assert stored == [(len(ids), len(ids))]
    # identical signatures get identical costs (concat="free": no where-dependent policy)
    groups = explored.db.execute(
        """
        SELECT count(*), count(DISTINCT c.ms)
        FROM enode e JOIN eclass o ON o.id = e.class JOIN enode_cost c ON c.enode = e.id
        LEFT JOIN eclass a ON a.id = e.c0 LEFT JOIN eclass b ON b.id = e.c1
        WHERE e.arity <= 2
        GROUP BY e.op, e.p0, e.p1, e.p2, e.p3, e.p4, e.p5, e.s, o.shape, a.shape, b.shape
        """
    )
    assert any(n > 1 for n, _ in groups) and all(d == 1 for _, d in groups)
    costs = dict(zip(result["enode"].to_pylist(), result["ms"].to_pylist(), strict=True))
    rows = explored.db.execute(
        "SELECT e.id, e.op FROM enode e WHERE e.op IN ('split', 'split_0', 'weight', 'input')"
    )
    assert rows and all(costs[i] == 0.0 for i, _ in rows)


def test_price_egraph_prices_each_signature_once_through_the_table(explored: EGraph) -> None:
    model = Counting()
    first = price_egraph(explored, model, concat="free")
    asked = len(model.asked)
    assert asked == len(set(model.asked)) > 0  # each distinct signature once
    distinct = explored.db.scalar(
        "SELECT count(*) FROM cost WHERE device = 'test' AND source = 'counting'"
    )
    assert distinct == asked
    again = price_egraph(explored, model, concat="free")
    assert len(model.asked) == asked  # cached: nothing recomputed
    assert again.equals(first)


def test_price_egraph_with_a_table_model_counts_fallbacks(explored: EGraph) -> None:
    model = TableModel(CostTable(), "h100")
    result = price_egraph(explored, model)
    assert model.fallbacks > 0 and len(model.table) == model.fallbacks
    plain = price_egraph(explored, H100, cache=False)
    assert result["ms"].to_pylist() == plain["ms"].to_pylist()
