"""Timing an optimized ONNX model against its original (relsat.onnx.latency).

No assertion depends on this machine's speed beyond a work difference of hundreds of times:
sixteen 256x256 MatMuls against one Relu of the same signature.
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
from relsat.onnx.latency import _median_interval, _verdict
from relsat.onnx.runtime import OrtSettings, RuntimeSettingsError

FAST = {"max_seconds": 0.3, "settings": OrtSettings(threads=1)}


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


def test_a_much_lighter_model_is_faster(heavy: Any, light: Any) -> None:
    c = compare_latency(heavy, light, **FAST)
    assert c.verdict == "faster" and c.speedup > 5
    assert c.ratio_low <= c.ratio <= c.ratio_high < 0.2
    assert c.rounds >= 7 and len(c.ratios) == c.rounds
    assert c.optimized_ms < c.original_ms
    assert c.control_low <= c.control <= c.control_high  # the A/A control: only noise
    assert c.report().startswith("onnxruntime CPU (1 thread): ")
    assert "x faster (ratio " in c.report() and f"{c.rounds} rounds)" in c.report()


def test_a_much_heavier_model_is_slower_and_bytes_work(heavy: Any, light: Any) -> None:
    c = compare_latency(light.SerializeToString(), heavy.SerializeToString(), **FAST)
    assert c.verdict == "slower" and c.speedup < 0.2
    assert 5 < c.ratio_low <= c.ratio <= c.ratio_high
    assert "x slower" in c.report()


def test_paths_are_read_and_non_float_inputs_drawn(tmp_path: Path) -> None:
    """Paths are read, and int64 and bool inputs are drawn (relsat.onnx.random_inputs)."""
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256]),
        helper.make_tensor_value_info("idx", TensorProto.INT64, [3]),
        helper.make_tensor_value_info("flag", TensorProto.BOOL, [1]),
    ]
    nodes = [
        helper.make_node("Gather", ["x", "idx"], ["g"]),
        helper.make_node("Where", ["flag", "x", "x"], ["y"]),
    ]
    model = _model(nodes, inputs=inputs)
    model.graph.output.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, [3, 256]))
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    c = compare_latency(path, str(path), max_seconds=0.05, min_rounds=3, max_rounds=5)
    assert 3 <= c.rounds <= 5 and c.verdict in ("faster", "slower", "same")


def test_bad_models_raise_onnx_errors(tmp_path: Path, light: Any) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    with pytest.raises(OnnxError, match="cannot load the original model") as info:
        compare_latency(bad, light, **FAST)
    assert info.value.path == str(bad)
    other = helper.make_tensor_value_info("z", TensorProto.FLOAT, [64, 256])
    renamed = _model([helper.make_node("Relu", ["z"], ["y"])], inputs=[other])
    with pytest.raises(OnnxError, match="inputs differ"):
        compare_latency(light, renamed, **FAST)


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
        compare_latency(light, broken, **FAST)


def test_budget_is_validated(light: Any) -> None:
    with pytest.raises(RuntimeSettingsError, match="max_seconds"):
        compare_latency(light, light, max_seconds=0)
    with pytest.raises(RuntimeSettingsError, match="max_rounds"):
        compare_latency(light, light, min_rounds=9, max_rounds=8)


def test_the_median_interval_is_distribution_free() -> None:
    ordered = [float(i) for i in range(1, 101)]
    assert _median_interval(ordered, 0.95) == (40.0, 61.0)  # the textbook ranks for n = 100
    assert _median_interval(ordered[:7], 0.95) == (1.0, 7.0)  # n = 7: the full range (98.4 %)
    assert _median_interval(ordered[:3], 0.95) == (1.0, 3.0)  # too few rounds: the full range


def test_verdicts_follow_the_interval() -> None:
    assert _verdict(0.8, 0.98, 0.01) == "faster"
    assert _verdict(0.98, 0.995, 0.01) == "same"  # faster, but by less than the 1 % minimum
    assert _verdict(0.97, 1.02, 0.01) == "same"
    assert _verdict(1.01, 1.2, 0.01) == "slower"
    # beyond what the A/A control shows, too: a burst of load moves the control as well
    assert _verdict(0.8, 0.98, 0.01, control_low=0.96, control_high=0.99) == "same"
    assert _verdict(0.8, 0.95, 0.01, control_low=0.96, control_high=0.99) == "faster"
    assert _verdict(1.01, 1.2, 0.01, control_low=1.0, control_high=1.05) == "same"
    same = LatencyComparison(2.0, 2.0, 1.0, 0.97, 1.02, 9, "same", 2)
    assert "no difference beyond noise" in same.report() and same.speedup == 1.0
