"""Models that onnxruntime runs alike (relsat.onnx.alike): an optimized model whose rewrites are
the ones onnxruntime makes itself when it loads the input is not timed against it."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import relsat
from relsat.onnx.alike import form, runs_alike
from relsat.onnx.runtime import OrtSettings
from relsat.pipeline.ort import ALIKE

RNG = np.random.default_rng(7)
SETTINGS = OrtSettings(threads=1)


def _weight(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(np.float32), name)


def _conv_bn_relu(*, second: bool = False) -> onnx.ModelProto:
    """conv -> batchnorm -> relu (-> a second conv): what onnxruntime folds into one Conv."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "t", "m", "v"], ["n"], epsilon=1e-3),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    inits = [_weight("w", 4, 3, 3, 3), _weight("b", 4), _weight("s", 4), _weight("t", 4)]
    inits += [_weight("m", 4), numpy_helper.from_array(np.full(4, 0.8, np.float32), "v")]
    out = "y"
    if second:
        nodes.append(helper.make_node("Conv", ["y", "w2"], ["z"]))
        inits.append(_weight("w2", 4, 4, 1, 1))
        out = "z"
    graph = helper.make_graph(
        nodes,
        "cbr",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_model_and_what_onnxruntime_folds_it_into_run_alike() -> None:
    model = _conv_bn_relu()
    folded = relsat.optimize(
        relsat.onnx.load(model),
        relsat.Options(cost_model="analytic-cpu", precompute_weights=True, timing=None),
    )
    written = relsat.onnx.to_model(folded.graph, like=model)
    assert sorted(n.op_type for n in written.graph.node) == ["Conv", "Relu"]  # BN folded
    assert runs_alike(model, written, SETTINGS)
    assert not runs_alike(model, _conv_bn_relu(second=True), SETTINGS)  # one conv more
    assert not runs_alike(model, b"not a model", SETTINGS)  # onnxruntime refuses: not alike
    assert len(form(onnx.shape_inference.infer_shapes(written))) == 1  # one digest per output


def test_optimize_keeps_the_input_untimed_when_onnxruntime_runs_both_alike() -> None:
    """Timing on (the default), not --keep-slower: no timing, the input kept, and why."""
    result = relsat.optimize(
        _conv_bn_relu(), relsat.Options(cost_model="analytic-cpu", precompute_weights=True)
    )
    assert result.rewrites()  # relsat did fold the batch norm and fuse the ReLU ...
    assert (result.kept, result.why) == ("original", ALIKE)  # ... as onnxruntime does itself
    assert result.latency is None and result.exported is None
    kept = relsat.optimize(
        _conv_bn_relu(),
        relsat.Options(
            cost_model="analytic-cpu", precompute_weights=True, keep_slower=True, timing=None
        ),
    )
    assert kept.kept == "optimized"  # not asked where nothing is timed
