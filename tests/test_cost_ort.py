"""onnxruntime CPU costs: units, fallbacks, the per-machine cache, the pipeline with "ort-cpu".

Small shapes only, and no assertion compares two timings (they depend on the machine's load).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from relsat import GraphBuilder, Limits, Options, optimize
from relsat.cost import AnalyticModel, OpSignature, OrtModel, OrtTiming, price_egraph
from relsat.cost.ort import CostCacheWarning, cache_dir, unit_graph
from relsat.cost.price import enode_signatures
from relsat.engine.egraph import EGraph
from relsat.onnx import to_model
from relsat.onnx.runtime import OrtSettings

FAST = OrtTiming(warmup=1, min_runs=3, max_runs=8, budget_s=0.02)

CONV = OpSignature("conv2d", (1, 1, 0, 2), "", ((1, 4, 8, 8), (8, 4, 3, 3)), (1, 8, 8, 8))
CONV_W = OpSignature(  # the same conv, its weight an initializer
    "conv2d", (1, 1, 0, 2), "", ((1, 4, 8, 8), (8, 4, 3, 3)), (1, 8, 8, 8), (False, True)
)
MATMUL_W = OpSignature("matmul", (0,), "", ((4, 8), (8, 16)), (4, 16), (False, True))
TIMED = [
    CONV_W,
    MATMUL_W,
    OpSignature("ewadd", (), "", ((1, 8, 8, 8), (1, 8, 8, 8)), (1, 8, 8, 8)),
    OpSignature("relu", (), "", ((4, 16),), (4, 16)),
    OpSignature("transpose", (1,), "1_0", ((4, 16),), (16, 4)),
    OpSignature("concat", (1, 2), "", ((4, 8), (4, 8)), (4, 16)),
    OpSignature("split", (1, 8), "", ((4, 16),), (4, 8)),
    OpSignature("poolavg", (2, 2, 2, 2, 1, 0), "", ((1, 8, 8, 8),), (1, 8, 4, 4)),
]
FREE = [
    OpSignature("reshape", (), "16_4", ((4, 16),), (16, 4)),
    OpSignature("split_0", (), "", ((4, 8),), (4, 8)),
    OpSignature("dropout", (), "", ((4, 16),), (4, 16)),
]
BOGUS = OpSignature("bogus", (), "", ((4, 16),), (4, 16))


@pytest.fixture(autouse=True)
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own cache directory: never the user's."""
    monkeypatch.setenv("RELSAT_CACHE_DIR", str(tmp_path / "cache"))
    yield tmp_path / "cache"


def model(**kw: object) -> OrtModel:
    return OrtModel(**{"timing": FAST, "progress": False, **kw})  # type: ignore[arg-type]


# --- units --------------------------------------------------------------------------------


def test_unit_weights_are_initializers_and_fused_units_export_as_written() -> None:
    onnx_model = to_model(unit_graph(CONV_W))
    assert [i.name for i in onnx_model.graph.initializer] == ["w1"]
    assert [i.name for i in onnx_model.graph.input] == ["x0"]
    assert [n.op_type for n in onnx_model.graph.node] == ["Conv", "Relu"]  # onnxruntime fuses
    assert [i.name for i in to_model(unit_graph(CONV)).graph.input] == ["x0", "x1"]


CONV_BIAS = OpSignature(  # CONV_W with a bias: one fused Conv+bias+Relu unit
    "conv2d_bias",
    (1, 1, 0, 2),
    "",
    ((1, 4, 8, 8), (8, 4, 3, 3), (1, 8, 1, 1)),
    (1, 8, 8, 8),
    constants=(False, True, True),
)


def test_fused_bias_units_are_timed_as_one_conv_or_gemm() -> None:
    conv = CONV_BIAS
    gemm = OpSignature(
        "matmul_bias", (0,), "", ((4, 16), (16, 8), (8,)), (4, 8), constants=(False, True, True)
    )
    assert [n.op_type for n in to_model(unit_graph(conv)).graph.node] == ["Conv", "Relu"]
    assert [n.op_type for n in to_model(unit_graph(gemm)).graph.node] == ["Gemm"]
    m = model(cache=False)
    prices = m.costs([conv, gemm])
    assert np.all(prices > 0) and m.fallbacks == 0  # measured, not the fallback roofline


def test_canonical_keeps_only_flags_onnxruntime_cares_about() -> None:
    m = model(cache=False)
    add = OpSignature("ewadd", (), "", ((2, 4), (4,)), (2, 4), (False, True))
    assert m.canonical(add).constants is None  # a bias add is an add
    assert m.canonical(add).key == OpSignature(*_plain(add)).key  # type: ignore[arg-type]
    assert m.canonical(CONV) == CONV  # a weight computed at run time: as it is
    both = OpSignature("matmul", (0,), "", ((4, 8), (8, 16)), (4, 16), (True, True))
    assert m.canonical(both).constants == (False, True, True)  # left operand: never prepacked


def test_one_kernel_one_price() -> None:
    """A Conv with or without bias and fused activation is one onnxruntime kernel, a MatMul with
    a constant weight plus its bias Add one Gemm: each priced as one measured unit."""
    m = model(cache=False)
    fused = m.canonical(CONV_BIAS)
    assert m.canonical(CONV_W) == fused
    assert (fused.op, fused.params[3], fused.inputs[2]) == ("conv2d_bias", 0, (1, 8, 1, 1))
    plain = OpSignature("matmul", (2,), "", ((4, 16), (16, 8)), (4, 8), constants=(False, True))
    gemm = m.canonical(plain)
    assert (gemm.op, gemm.params[0], gemm.inputs[2], gemm.constants) == (
        "matmul_bias",
        0,
        (8,),
        (False, True, True),
    )
    attention = OpSignature("matmul", (0,), "", ((4, 16), (16, 8)), (4, 8), (False, False))
    assert m.canonical(attention).op == "matmul"  # both operands computed: a MatMul
    assert m.costs([CONV_W])[0] == m.costs([fused])[0] and m.measured == 1


def _plain(sig: OpSignature) -> tuple[object, ...]:
    return sig.op, sig.params, sig.s, sig.inputs, sig.output


def test_signatures_carry_constants_only_when_asked() -> None:
    b = GraphBuilder()
    x = b.input([1, 4, 8, 8])
    eg = EGraph.from_graph(b.build(b.conv2d(x, b.weight([8, 4, 3, 3]), activation="RELU")))
    _, plain = enode_signatures(eg)
    _, flagged = enode_signatures(eg, constants=True)
    assert all(s.constants is None for s in plain)
    assert [s.constants for s in flagged if s.op == "conv2d"] == [(False, True)]


# --- prices -------------------------------------------------------------------------------


def test_prices_are_positive_and_finite_and_free_ops_cost_nothing() -> None:
    m = model()
    ms = m.costs(TIMED + FREE)
    assert all(math.isfinite(v) and v > 0 for v in ms[: len(TIMED)])
    assert ms[len(TIMED) :].tolist() == [0.0] * len(FREE)
    assert m.measured == len(TIMED) and m.fallbacks == 0
    assert m.cost(TIMED[0]) == ms[0]  # asked again: the stored price, not a new timing
    assert m.measured == len(TIMED)


def test_units_that_cannot_be_timed_get_the_fallback_price_and_are_counted() -> None:
    relu = OpSignature("relu", (), "", ((64, 64),), (64, 64))
    tiny = model(timing=OrtTiming(memory_cap=1024))
    assert tiny.cost(relu) == AnalyticModel("cpu").cost(relu)
    unexportable = OpSignature("opaque", (), "NoSuchOp|{}|[[4,16]]", ((4, 16),), (4, 16))
    meta = '{"_onnx":{"domain":"x.y","opset":1,"types":{},"inputs":["t"],"outputs":[1]}}'
    rejected = OpSignature("opaque", (), f"Foo|{meta}|[[4,16]]", ((4, 16),), (4, 16))
    m = model()
    ms = m.costs([BOGUS, unexportable, rejected, TIMED[3]])
    assert np.isfinite(ms).all() and (ms > 0).all()
    assert (m.fallbacks, m.measured) == (3, 1)
    assert any("onnxruntime rejects" in r for r in m.fallback_reasons["opaque"])
    assert set(m.fallback_reasons) == {"bogus", "opaque"}
    ((reason, count),) = tiny.fallback_reasons["relu"].items()
    assert "memory cap" in reason and count == 1
    assert "fallback bogus x1" in m.report()


# --- the cache ----------------------------------------------------------------------------


def test_cache_is_written_and_a_second_run_measures_nothing(cache_root: Path) -> None:
    first = model()
    ms = first.costs(TIMED)
    assert first.path is not None and first.path.is_file()
    assert first.path.parent.parent == cache_root == cache_dir()
    second = model()
    assert second.cached == len(TIMED)
    assert second.costs(TIMED).tolist() == ms.tolist()
    assert second.measured == 0


def test_another_identity_never_reuses_rows() -> None:
    one = model(settings=OrtSettings(threads=1))
    one.costs(TIMED[:2])
    two = model(settings=OrtSettings(threads=2))
    assert two.path != one.path and two.cached == 0
    assert one.path is not None and two.path is not None
    two.path.parent.mkdir(parents=True, exist_ok=True)
    two.path.write_bytes(one.path.read_bytes())  # rows of another identity under its name
    with pytest.warns(CostCacheWarning, match="another identity"):
        three = model(settings=OrtSettings(threads=2))
    three.costs(TIMED[:2])
    assert (three.cached, three.measured) == (0, 2)


def test_an_interrupted_run_leaves_a_readable_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    price_batch = OrtModel._price_batch
    on_disk: list[int] = []
    one_at_a_time = replace(FAST, batch=1)
    m = model(save_every=0.0, timing=one_at_a_time)

    def flaky(self: OrtModel, batch: list[OpSignature]) -> list[float]:
        assert self.path is not None
        on_disk.append(pq.read_table(self.path).num_rows if self.path.exists() else 0)
        if len(on_disk) > 3:
            raise KeyboardInterrupt
        return price_batch(self, batch)

    monkeypatch.setattr(OrtModel, "_price_batch", flaky)
    with pytest.raises(KeyboardInterrupt):
        m.costs(TIMED)
    assert on_disk == [0, 1, 2, 3]  # written after every batch: a kill loses at most one
    monkeypatch.setattr(OrtModel, "_price_batch", price_batch)
    again = model()
    assert again.cached == 3
    again.costs(TIMED)
    assert again.measured == len(TIMED) - 3


def test_a_corrupt_cache_file_is_ignored_and_replaced() -> None:
    path = model().path
    assert path is not None
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not parquet")
    with pytest.warns(CostCacheWarning, match="unreadable"):
        m = model()
    assert m.cost(TIMED[3]) > 0
    assert pq.read_table(path).num_rows == 1


# --- pricing and the pipeline -------------------------------------------------------------


def test_optimize_with_ort_cpu_end_to_end() -> None:
    b = GraphBuilder()
    x = b.input([2, 8], name="x")
    w = b.weight([16, 8])
    y = b.relu(b.matmul(x, b.transpose(w, [1, 0])))
    result = optimize(b.build(y), Options(cost_model="ort-cpu", limits=Limits(iterations=1)))
    assert result.cost_model == "ort-cpu" and "ort-cpu" in result.report()
    assert result.cost_fallbacks == 0
    assert math.isfinite(result.cost_before) and result.cost_before > 0
    assert result.verified
    # the cost model decides: weight-only work is precomputed by the export, so it is free
    (transpose_ms,) = result.db.execute(
        "SELECT max(c.ms) FROM enode_cost c JOIN enode e ON e.id = c.enode WHERE e.op = 'transpose'"
    )[0]
    assert transpose_ms == 0.0


def test_price_egraph_measures_each_distinct_unit_once() -> None:
    b = GraphBuilder()
    x = b.input([1, 4, 8, 8])
    y = b.relu(b.conv2d(x, b.weight([4, 4, 3, 3])))
    y = b.relu(b.conv2d(y, b.weight([4, 4, 3, 3])))  # the same signature twice
    eg = EGraph.from_graph(b.build(y))
    m = model()
    ms = price_egraph(eg, m, precompute_weights=True)["ms"].to_numpy()
    assert m.measured == 2 and (ms >= 0).all()  # one conv, one relu


def test_a_unit_is_priced_by_its_clearest_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Load only adds time: a burst over two of the three passes does not set the price (the
    median of the pass medians would have taken it); the pass that ran clear of it does."""
    import relsat.cost.ort as ort

    pass_medians = iter([0.9, 0.2, 0.8])  # ms: passes 1 and 3 ran under a burst
    monkeypatch.setattr(ort, "_median_ms", lambda *a, **k: next(pass_medians))
    m = model(cache=False, timing=replace(FAST, passes=3))
    m._overhead_ms = 0.0
    assert m.costs([TIMED[3]])[0] == pytest.approx(0.2)
