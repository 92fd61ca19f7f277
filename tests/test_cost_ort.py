"""onnxruntime CPU costs: units, fallbacks, the per-machine cache, the pipeline with "ort-cpu",
and prices that hold (repeats, spread, load, re-checks).

Small shapes only, and no assertion compares two timings (they depend on the machine's load).
Tests of the cache take every price as sound (:data:`LENIENT`) and read no load: on a busy
machine their prices would otherwise be doubtful and re-checked, and which ones would depend on
the load. The stability policy itself is tested with a fake timer and a fake load probe.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_cost_stability import Load  # one fake load probe for both files

from relsat import GraphBuilder, Limits, Options, optimize
from relsat.cost import AnalyticModel, OpSignature, OrtModel, OrtTiming, price_egraph
from relsat.cost.ort import CostCacheWarning, cache_dir, remeasured, unit_graph
from relsat.cost.price import enode_signatures
from relsat.cost.stability import Price, Stability
from relsat.cost.table import COST_SCHEMA
from relsat.engine.egraph import EGraph
from relsat.onnx import to_model
from relsat.onnx.runtime import OrtSettings

#: Every price sound, one attempt: the cache's tests do not depend on the machine's load.
LENIENT = Stability(attempts=1, max_spread=math.inf, max_load=1.0)
FAST = OrtTiming(warmup=1, min_runs=3, max_runs=8, budget_s=0.02, passes=3, stability=LENIENT)

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
    defaults = {"timing": FAST, "progress": False, "probe": Load(0.0)}
    return OrtModel(**{**defaults, **kw})  # type: ignore[arg-type]


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


def test_boolean_and_integer_units_are_timed_where_their_values_are_data() -> None:
    """A unit reading booleans (the And of a mask's parts) runs on random true and false, a
    constant one (a boolean Constant class, a gather's constant index) as an initializer of its
    own type, a run-time index (an embedding lookup) on zeros: ONNX shape inference gives its
    output from the input shapes alone; one whose integer input sets its output's shape (a
    Tile's repeats: made-up values would time another tiling) gets the fallback, its reason
    named."""
    meta = '{"_onnx":{"domain":"","in_dtypes":["BOOL","BOOL"],"inputs":["t","t"],"opset":17,'
    meta += '"out_dtypes":["BOOL"],"outputs":[1],"types":{}}}'
    both = OpSignature(
        "opaque", (), f"And|{meta}|[[1,1,16,16]]", ((1, 1, 16, 16),) * 2, (1, 1, 16, 16)
    )
    tile = '{"_onnx":{"domain":"","in_dtypes":["FLOAT","INT64"],"inputs":["t","t"],"opset":17,'
    tile += '"outputs":[1],"types":{}}}'
    tiled = OpSignature("opaque", (), f"Tile|{tile}|[[4,16]]", ((2, 16), (2,)), (4, 16))
    settled = replace(both, constants=(True, False))  # an operand a Constant class holds
    nd = '{"_onnx":{"domain":"","in_dtypes":["BOOL","INT64"],"inputs":["t","t"],"opset":17,'
    nd += '"out_dtypes":["BOOL"],"outputs":[1],"types":{}}}'
    grid = OpSignature(
        "opaque",
        (),
        f"GatherND|{nd}|[[2,1,1,8]]",
        ((2, 8), (2, 1, 1, 8, 2)),
        (2, 1, 1, 8),
        (False, True),
    )
    g = '{"_onnx":{"domain":"","in_dtypes":["FLOAT","INT64"],"inputs":["t","t"],"opset":17,'
    g += '"outputs":[1],"types":{}}}'
    lookup = OpSignature("opaque", (), f"Gather|{g}|[[2,3,4]]", ((10, 4), (2, 3)), (2, 3, 4))
    m = model()
    m.costs([both, tiled, settled, grid, lookup])
    assert (m.measured, m.fallbacks) == (4, 1), m.fallback_reasons
    (reason,) = m.fallback_reasons["opaque"]
    assert "tensor(int64)" in reason


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

    def flaky(self: OrtModel, batch: list[OpSignature], *args: object) -> list[float]:
        assert self.path is not None
        on_disk.append(pq.read_table(self.path).num_rows if self.path.exists() else 0)
        if len(on_disk) > 3:
            raise KeyboardInterrupt
        return price_batch(self, batch, *args)  # type: ignore[arg-type]

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


# --- prices that hold ----------------------------------------------------------------------

STRICT = replace(FAST, passes=3, stability=Stability())  # the default thresholds, 3 repeats
RELU = TIMED[3]


def fake_timer(monkeypatch: pytest.MonkeyPatch, *repeats: float) -> list[float]:
    """Each pass of any unit returns the next of ``repeats`` (ms; the last one repeated); the
    list of what was handed out is returned (its length: the passes timed)."""
    import relsat.cost.ort as ort

    given: list[float] = []

    def median_ms(*args: object, **kw: object) -> float:
        given.append(repeats[min(len(given), len(repeats) - 1)])
        return given[-1]

    monkeypatch.setattr(ort, "_median_ms", median_ms)
    return given


def quiet_model(**kw: object) -> OrtModel:
    m = model(**{"timing": STRICT, **kw})
    m._overhead_ms = 0.0
    return m


def test_a_wide_spread_is_measured_again_and_the_median_stored_with_its_spread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A burst over two of three repeats (the 25 µs rotary): the spread is wide, the unit is
    timed again; the clear attempt's median is the price (the pool of both is still wide),
    stored with its spread."""
    given = fake_timer(monkeypatch, 0.025, 0.005, 0.024, 0.005, 0.006, 0.005)
    m = quiet_model()
    assert m.costs([RELU])[0] == pytest.approx(0.005)
    assert len(given) == 6  # two attempts of three passes
    assert m.path is not None
    (row,) = pq.read_table(m.path).to_pylist()
    assert row["ms"] == pytest.approx(0.005)
    assert row["spread"] == pytest.approx((0.0055 - 0.005) / 0.005)  # IQR over median
    assert row["load"] == 0.0


def test_a_narrow_spread_is_measured_once(monkeypatch: pytest.MonkeyPatch) -> None:
    given = fake_timer(monkeypatch, 0.0100, 0.0102, 0.0101)
    m = quiet_model()
    assert m.costs([RELU])[0] == pytest.approx(0.0101)
    assert len(given) == 3
    assert m.table.prices(m.device, [RELU])[RELU].spread == pytest.approx(0.0001 / 0.0101)


def test_a_busy_machine_has_the_unit_timed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Load inflates every repeat alike (a narrow spread, a wrong price): the load the attempt
    ran under sends it round again, and the quiet attempt's repeats alone give the price."""
    given = fake_timer(monkeypatch, 0.0137, 0.0137, 0.0136, 0.0108, 0.0107, 0.0108)
    m = quiet_model(probe=Load(0.6, 0.05))
    assert m.costs([RELU])[0] == pytest.approx(0.0108)
    assert len(given) == 6
    price = m.table.prices(m.device, [RELU])[RELU]
    assert price.load == 0.05 and price.sound(STRICT.stability)


def test_a_price_still_doubtful_after_the_last_attempt_is_stored_as_such(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    given = fake_timer(monkeypatch, 0.02, 0.02, 0.02, 0.03, 0.03, 0.03, 0.04, 0.04, 0.04)
    m = quiet_model(probe=Load(0.7, 0.5, 0.9))
    assert m.costs([RELU])[0] == pytest.approx(0.03)  # the least loaded attempt's
    assert len(given) == 9  # three attempts
    price = m.table.prices(m.device, [RELU])[RELU]
    assert price.load == 0.5 and not price.sound(STRICT.stability)


def test_a_doubtful_price_is_rechecked_on_next_use_and_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_timer(monkeypatch, 0.025, 0.025, 0.025)
    first = quiet_model(probe=Load(0.8))  # timed under load, three times: doubtful
    first.costs([RELU])
    given = fake_timer(monkeypatch, 0.005, 0.0051, 0.005)
    second = quiet_model()
    assert second.cost(RELU) == pytest.approx(0.005)  # re-checked: it disagrees, replaced
    assert len(given) == 3  # a re-check is one attempt
    assert (second.measured, second.rechecked) == (0, 1)
    assert second.replaced == [(RELU, pytest.approx(0.025), pytest.approx(0.005))]
    assert second.cost(RELU) == pytest.approx(0.005) and len(given) == 3  # once per instance
    assert "1 re-checked (1 replaced)" in second.report()
    third = quiet_model()
    assert third.cost(RELU) == pytest.approx(0.005) and third.rechecked == 0  # sound now


def test_a_sound_recheck_that_agrees_confirms_the_price(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_timer(monkeypatch, 0.010, 0.018, 0.010, 0.018, 0.010, 0.018, 0.010, 0.018, 0.010)
    first = quiet_model()  # spread too wide on every attempt: stored doubtful
    first.costs([RELU])
    stored = first.table.prices(first.device, [RELU])[RELU]
    assert not stored.sound(STRICT.stability)
    fake_timer(monkeypatch, 0.0104, 0.0105, 0.0104)
    second = quiet_model()
    assert second.cost(RELU) == stored.ms and second.replaced == []  # within 10 %: kept
    assert second.table.prices(second.device, [RELU])[RELU].sound(STRICT.stability)


def test_remeasure_rechecks_sound_prices_too(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_timer(monkeypatch, 0.010, 0.010, 0.010)
    quiet_model().costs([RELU])
    given = fake_timer(monkeypatch, 0.020, 0.020, 0.020)
    assert quiet_model().cost(RELU) == pytest.approx(0.010) and given == []  # sound: as stored
    again = quiet_model(remeasure=True)
    assert again.cost(RELU) == pytest.approx(0.020) and again.rechecked == 1


def test_an_old_cache_file_without_spreads_loads_and_is_rechecked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cache written before rows kept their spread and load: read with both unknown (no
    warning, nothing lost), each price re-checked on its first use, the file written back with
    the new columns."""
    m = quiet_model()
    assert m.path is not None
    canonical = m.canonical(RELU)
    row = {
        "device": m.device,
        "key": canonical.key,
        "op": canonical.op,
        **{f"p{i}": canonical.params[i] for i in range(6)},
        "s": canonical.s,
        "inputs": "[[4,16]]",
        "output": "[4,16]",
        "ms": 0.025,
        "source": "measured:onnxruntime-cpu",
    }
    old = pa.schema([f for f in COST_SCHEMA if f.name not in ("spread", "load")])
    m.path.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([row], schema=old), m.path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = quiet_model()
    assert loaded.cached == 1
    assert loaded.table.prices(loaded.device, [RELU])[RELU] == Price(0.025, None, None)
    fake_timer(monkeypatch, 0.005, 0.005, 0.005)
    assert loaded.cost(RELU) == pytest.approx(0.005) and loaded.rechecked == 1
    written = pq.read_table(m.path)
    assert {"spread", "load"} <= set(written.column_names)
    assert written.to_pylist()[0]["spread"] == 0.0


def test_a_recheck_of_every_stored_price(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_timer(monkeypatch, 0.010, 0.010, 0.010)
    quiet_model().costs(TIMED[3:5])
    fake_timer(monkeypatch, 0.030, 0.030, 0.030)
    m = quiet_model()
    assert m.recheck().checked == 0  # every price sound: nothing to do
    done = m.recheck(every=True)
    assert (done.rows, done.checked, len(done.replaced), done.doubtful) == (2, 2, 2, 0)


def test_measure_reports_price_spread_load_and_attempts() -> None:
    """A real onnxruntime timing: only its structure is asserted, never a time."""
    price = model(cache=False, probe=Load(None)).measure(RELU)
    assert isinstance(price, Price) and price.ms > 0 and price.attempts >= 1
    assert price.spread is not None and price.spread >= 0 and price.load is None


def test_a_real_load_probe_reads_a_share() -> None:
    """The default probe on a real measurement: a share in [0, 1] stored beside the price (or
    unknown where the platform has no counters); the value depends on the machine."""
    m = model(cache=False, probe=None, timing=replace(FAST, stability=Stability(attempts=1)))
    m.costs([RELU])
    price = m.table.prices(m.device, [RELU])[RELU]
    assert price.spread is not None and (price.load is None or 0.0 <= price.load <= 1.0)


def test_remeasured_options_price_with_a_remeasuring_model() -> None:
    plain = Options()
    onnx = remeasured(plain, onnx=True)
    assert isinstance(onnx.cost_model, OrtModel) and onnx.cost_model.remeasure
    assert remeasured(plain, onnx=False) is plain  # a Graph is priced by the roofline
    assert remeasured(Options(cost_model="t4"), onnx=True).cost_model == "t4"
    shared = Options(cost_model=model(cache=False))
    assert remeasured(shared, onnx=True).cost_model.remeasure  # type: ignore[union-attr]
