"""Timing an optimized ONNX model against its original (relsat.onnx.latency).

No assertion depends on this machine's speed: verdicts are asserted only between models whose
work differs by a thousand times (sixteen 256x256 MatMuls against one Relu of the same
signature), and a model timed against itself is checked for the protocol's structure (rounds,
looks, intervals, why it stopped), never for its verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from relsat import LatencyComparison, compare_latency
from relsat.onnx import OnnxError
from relsat.onnx.latency import (
    STOPS,
    VERDICTS,
    WORDS,
    Timing,
    _decision,
    _median_interval,
    explain,
)
from relsat.onnx.runtime import OrtSettings, RuntimeSettingsError

ONE_THREAD = OrtSettings(threads=1)
#: A short budget; a 1000x difference decides at the first look (9 rounds) whatever the machine.
QUICK = Timing(max_seconds=0.3, min_rounds=9, max_rounds=60)


def _model(nodes: list[Any], inits: Sequence[Any] = (), inputs: list[Any] | None = None) -> Any:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 256])
    graph = helper.make_graph(nodes, "g", inputs or [x], [y], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def heavy() -> Any:
    """Sixteen chained 64x256 @ 256x256 MatMuls (about 134 MFLOP)."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array((rng.standard_normal((256, 256)) / 16).astype(np.float32), f"w{i}")
        for i in range(16)
    ]
    names = ["x", *(f"h{i}" for i in range(15)), "y"]
    nodes = [helper.make_node("MatMul", [names[i], f"w{i}"], [names[i + 1]]) for i in range(16)]
    return _model(nodes, weights)


@pytest.fixture(scope="module")
def light() -> Any:
    return _model([helper.make_node("Relu", ["x"], ["y"])])


def _well_formed(c: LatencyComparison, timing: Timing) -> None:
    """What every comparison must satisfy, whatever the machine measured."""
    assert c.verdict in VERDICTS and c.stopped in STOPS
    assert timing.min_rounds <= c.rounds <= timing.max_rounds and len(c.ratios) == c.rounds
    assert list(c.ratios) == sorted(c.ratios) and c.ratio_low in c.ratios
    assert c.ratio_low <= c.ratio <= c.ratio_high and c.ratio_high in c.ratios
    assert c.control_low <= c.control <= c.control_high
    decision = _decision(c.ratio_low, c.ratio_high, c.min_gain, c.control_low, c.control_high)
    assert c.decided == (decision is not None) == (c.stopped == "decided")
    assert c.verdict == (decision or "same")
    assert c.stopped != "round limit" or c.rounds == timing.max_rounds
    assert c.confidence == timing.confidence and c.min_gain == timing.min_gain
    assert c.report().endswith(f", {c.rounds} rounds, {c.stopped})")


def test_a_much_lighter_model_is_faster_and_decides_at_the_first_look(
    heavy: Any, light: Any
) -> None:
    c = compare_latency(heavy, light, settings=ONE_THREAD, timing=QUICK)
    _well_formed(c, QUICK)
    assert c.verdict == "faster" and c.stopped == "decided" and c.rounds == QUICK.min_rounds
    assert c.optimized_ms < c.original_ms and c.threads == 1
    assert c.report().startswith("onnxruntime CPU (1 thread): ")
    assert "x faster (ratio " in c.report()


def test_a_much_heavier_model_is_slower_and_bytes_work(heavy: Any, light: Any) -> None:
    c = compare_latency(
        light.SerializeToString(), heavy.SerializeToString(), settings=ONE_THREAD, timing=QUICK
    )
    _well_formed(c, QUICK)
    assert c.verdict == "slower" and c.stopped == "decided" and c.rounds == QUICK.min_rounds
    assert "x slower" in c.report()


def test_a_model_against_itself_is_timed_by_the_protocol(light: Any) -> None:
    """An A/A comparison: its verdict is noise, its structure is not."""
    timing = Timing(max_seconds=0.1, min_rounds=4, max_rounds=12)
    c = compare_latency(light, light, settings=ONE_THREAD, timing=timing)
    _well_formed(c, timing)
    capped = Timing(max_seconds=5, min_rounds=3, max_rounds=4, min_gain=0.5)
    c = compare_latency(light, light, settings=ONE_THREAD, timing=capped)
    _well_formed(c, capped)
    assert c.rounds in capped.looks() and c.stopped in ("decided", "round limit")


def test_paths_are_read_and_non_float_inputs_drawn(tmp_path: Path) -> None:
    """Paths are read, and int64 ids and bool inputs are drawn (relsat.onnx.random_inputs): ids
    only below the one row of the table they index, else onnxruntime fails the Gather."""
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256]),
        helper.make_tensor_value_info("idx", TensorProto.INT64, [16]),
        helper.make_tensor_value_info("flag", TensorProto.BOOL, [1]),
    ]
    table = numpy_helper.from_array(np.ones((1, 256), dtype=np.float32), "table")
    nodes = [
        helper.make_node("Gather", ["table", "idx"], ["g"]),
        helper.make_node("Where", ["flag", "x", "x"], ["y"]),
    ]
    model = _model(nodes, [table], inputs=inputs)
    model.graph.output.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, [16, 256]))
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    timing = Timing(max_seconds=0.05, min_rounds=3, max_rounds=5)
    c = compare_latency(path, str(path), settings=ONE_THREAD, timing=timing)
    _well_formed(c, timing)


def test_bad_models_raise_onnx_errors(tmp_path: Path, light: Any) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    with pytest.raises(OnnxError, match="cannot load the original model") as info:
        compare_latency(bad, light, timing=QUICK)
    assert info.value.path == str(bad)
    other = helper.make_tensor_value_info("z", TensorProto.FLOAT, [64, 256])
    renamed = _model([helper.make_node("Relu", ["z"], ["y"])], inputs=[other])
    with pytest.raises(OnnxError, match="inputs differ"):
        compare_latency(light, renamed, timing=QUICK)


def test_a_model_failing_at_run_time_is_named(light: Any) -> None:
    shape = numpy_helper.from_array(np.array([7, -1], dtype=np.int64), "shape")
    broken = _model(  # 64*256 values cannot be reshaped into rows of 7: fails only when run
        [
            helper.make_node("Reshape", ["x", "shape"], ["r"]),
            helper.make_node("Reshape", ["r", "back"], ["y"]),
        ],
        [shape, numpy_helper.from_array(np.array([64, 256], dtype=np.int64), "back")],
    )
    with pytest.raises(OnnxError, match="optimized model"):
        compare_latency(light, broken, timing=QUICK)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_seconds", 0),
        ("max_seconds", float("nan")),
        ("min_rounds", 0),
        ("max_rounds", 8),  # below min_rounds (9)
        ("warmup", 0),
        ("min_gain", 1.0),
        ("min_gain", -0.1),
        ("confidence", 1.0),
        ("confidence", 0),
        ("seed", -1),
        ("min_rounds", 2.5),
    ],
)
def test_timing_is_validated_naming_the_field(field: str, value: Any) -> None:
    settings = {"min_rounds": 9, field: value}
    with pytest.raises(RuntimeSettingsError, match=f"^{field} must be ") as info:
        Timing(**settings)
    assert info.value.option == field


def test_looks_grow_geometrically_up_to_the_round_limit() -> None:
    assert Timing().looks() == (15, 23, 35, 53, 80, 120, 180, 270, 400)
    assert Timing(min_rounds=5, max_rounds=5).looks() == (5,)
    assert Timing(confidence=0.95, min_rounds=15, max_rounds=400).alpha == pytest.approx(0.05 / 9)


def test_the_median_interval_is_distribution_free() -> None:
    ordered = [float(i) for i in range(1, 101)]
    assert _median_interval(ordered, 0.95) == (40.0, 61.0)  # the textbook ranks for n = 100
    assert _median_interval(ordered[:7], 0.95) == (1.0, 7.0)  # n = 7: the full range (98.4 %)
    assert _median_interval(ordered[:3], 0.95) == (1.0, 3.0)  # too few rounds: the full range


def test_decisions_follow_the_interval() -> None:
    assert _decision(0.8, 0.98, 0.01) == "faster"
    assert _decision(0.98, 0.995, 0.01) is None  # faster, not clearly by the 1 % minimum: look on
    assert _decision(0.97, 1.02, 0.01) is None  # too wide to tell
    assert _decision(0.995, 1.008, 0.01) == "same"  # within 1 % of the original
    assert _decision(1.01, 1.2, 0.01) == "slower"
    # beyond what the A/A control shows, too: a burst of load moves the control as well
    assert _decision(0.8, 0.98, 0.01, control_low=0.96, control_high=0.99) is None
    assert _decision(0.8, 0.95, 0.01, control_low=0.96, control_high=0.99) == "faster"
    # not slower beyond the control, but surely not faster: stop, the original is kept
    assert _decision(1.01, 1.2, 0.01, control_low=1.0, control_high=1.05) == "same"
    assert _decision(0.992, 1.3, 0.01) == "same"  # futility: 1 % faster is already ruled out
    same = LatencyComparison(2.0, 2.0, 1.0, 0.97, 1.02, 9, "same", 2)
    assert "too noisy to tell: between 1.03x faster and 1.02x slower" in same.report()
    assert same.speedup == 1.0
    assert not same.decided and same.report().endswith(", 9 rounds, time limit)")


def _spread(low: float, high: float, n: int = 15) -> list[float]:
    """``n`` synthetic per-round times evenly from ``low`` to ``high`` (no real timing)."""
    return [low + (high - low) * i / (n - 1) for i in range(n)]


#: Synthetic rounds (optimized, A/A control; the original 1 ms each round) → the word and the
#: line every report prints. 15 rounds at the default 9 looks: the interval leaves out the
#: smallest and the largest ratio.
SAYS = [
    (_spread(0.49, 0.51), _spread(0.98, 1.02), "faster", "2.00x faster"),
    (_spread(1.98, 2.02), _spread(0.98, 1.02), "slower", "2.00x slower"),
    # faster by its interval (0.71-0.77), but the two copies of the original differed as much:
    # the "1.350x faster, not clearly by the 1% minimum (…A/A 0.795-1.28…)"
    (
        _spread(0.70, 0.78),
        [0.70, 0.75, *_spread(0.9, 1.1, 11), 1.28, 1.3],
        "too noisy to tell",
        "too noisy to tell: the two copies of the original differed by up to 28 %",
    ),
    (
        _spread(0.8, 1.1),
        _spread(0.98, 1.02),
        "too noisy to tell",
        "too noisy to tell: between 1.22x faster and 1.08x slower",
    ),
    (
        _spread(0.996, 1.004),
        _spread(0.98, 1.02),
        "not faster",
        "not faster by the 1% minimum: at most 0.3 % faster",
    ),
    (
        _spread(1.02, 1.10),
        _spread(0.9, 1.12),
        "not faster",
        "not faster: 1.06x slower by the median, within noise",
    ),
]


@pytest.mark.parametrize(("optimized", "control", "word", "text"), SAYS)
def test_the_verdict_says_why_in_plain_words(
    optimized: list[float], control: list[float], word: str, text: str
) -> None:
    c = LatencyComparison.from_rounds([1.0] * len(optimized), optimized, control)
    assert explain(c) == (word, text) and (c.word, c.why) == (word, text) and word in WORDS
    assert c.report().startswith(
        f"onnxruntime CPU (1 thread): 1 -> {c.optimized_ms:.4g} ms, {text} ("
    )
    assert (c.verdict == "faster") == (word == "faster")  # only "faster" keeps the optimized model
    assert c.decided == (c.stopped == "decided")
    decision = _decision(c.ratio_low, c.ratio_high, c.min_gain, c.control_low, c.control_high)
    assert c.verdict == (decision or "same")
