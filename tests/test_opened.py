"""Dims an operator computes from values (relsat.onnx.opened): NonZero's count, a Reduce over
axes given as an input. Each is a dim of its own, symbolic in the e-graph and in the written
model, which onnxruntime runs to the original's outputs whatever the values."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from relsat import Options, optimize
from relsat import onnx as ronnx

ANALYTIC = Options(cost_model="analytic", timing=None)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model, feeds):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def _dims(vi):
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


def _nonzero_model(rows: int | str):
    """x → NonZero → [K, 2] floats → two MatMul+Add+Relu sharing their input (relsat packs
    them into one Gemm) → times an Expand to [K, 8] computed from Shape → a Reshape to
    [4, K, 2] → Transpose: K is NonZero's count."""
    rng = np.random.default_rng(0)
    ints = {"zero": [0], "four": [4], "two": [2], "eight": [8]}
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ints.items()]
    for name, shape in (("w1", (2, 8)), ("w2", (2, 8)), ("bias", (8,))):
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name))
    node = helper.make_node
    nodes = [
        node("NonZero", ["x"], ["nz"]),
        node("Transpose", ["nz"], ["t"], perm=[1, 0]),
        node("Cast", ["t"], ["f"], to=TensorProto.FLOAT),
        node("MatMul", ["f", "w1"], ["a1"]),
        node("Add", ["a1", "bias"], ["b1"]),
        node("Relu", ["b1"], ["c1"]),
        node("MatMul", ["f", "w2"], ["a2"]),
        node("Add", ["a2", "bias"], ["b2"]),
        node("Relu", ["b2"], ["c2"]),
        node("Add", ["c1", "c2"], ["c"]),
        node("Shape", ["c"], ["s"]),
        node("Gather", ["s", "zero"], ["k"], axis=0),
        node("Concat", ["k", "eight"], ["wide"], axis=0),
        node("Expand", ["bias", "wide"], ["e"]),
        node("Mul", ["c", "e"], ["m"]),
        node("Shape", ["m"], ["s2"]),
        node("Gather", ["s2", "zero"], ["k2"], axis=0),
        node("Concat", ["four", "k2", "two"], ["target"], axis=0),
        node("Reshape", ["m", "target"], ["r"]),
        node("Transpose", ["r"], ["y"], perm=[1, 0, 2]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None, None])
    return _model(nodes, [x], [y], inits)


def _sparse(rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    keep = rng.random((rows, 4)) > 0.5
    return (keep * rng.standard_normal((rows, 4))).astype(np.float32)


@pytest.mark.parametrize("rows", ["N", 5])
def test_nonzero_count_stays_symbolic_through_rewrites(rows: int | str) -> None:
    """Rewritten after the NonZero (the MatMul pair packed), the count read back off NonZero's
    output for the Expand, the Reshape's -1, and named on the output; equal outputs at every
    count, 0 included."""
    model = _nonzero_model(rows)
    result = optimize(model, ANALYTIC)
    assert result.kept == "optimized" and result.rewrites()
    assert result.shapes is not None and result.shapes.symbolic
    dims = result.shapes.dims
    assert dims is not None and [o.tensor for o in dims.opened] == ["nz"]
    assert "nz_dim1 (of NonZero 'nz')" in result.shapes.note
    written = result.model
    assert [_dims(vi) for vi in written.graph.input] == [[rows, 4]]
    assert [_dims(vi) for vi in written.graph.output] == [["nz_dim1", 4, 2]]
    assert any(n.op_type == "Gemm" for n in written.graph.node)
    row_counts = (3, 7, 1) if rows == "N" else (5,)
    for n in row_counts:
        for seed in range(3):
            x = _sparse(n, seed)
            (want,), (got,) = _run(model, {"x": x}), _run(written, {"x": x})
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    zeros = np.zeros((5, 4), np.float32)
    (want,), (got,) = _run(model, {"x": zeros}), _run(written, {"x": zeros})
    assert got.shape == want.shape == (0, 4, 2)


def test_reduce_over_axes_given_as_an_input_keeps_every_dim_open() -> None:
    """A ReduceSum whose axes come in as an input: each output dim is 1 or the input's, by
    the axes' values; all three are dims of their own, priced at the given axes."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 3, 16])
    axes = helper.make_tensor_value_info("axes", TensorProto.INT64, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None, None])
    nodes = [
        helper.make_node("ReduceSum", ["x", "axes"], ["r"], keepdims=1),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    model = _model(nodes, [x, axes], [y], opset=18)
    settings = Options(cost_model="analytic", timing=None, inputs={"axes": np.array([1])})
    result = optimize(model, settings)
    dims = result.shapes.dims
    (opened,) = dims.opened
    assert opened.layout == ("r_dim0", "r_dim1", "r_dim2")
    assert [dims.dim(n).value for n in opened.layout] == [1, 1, 16]


def test_an_opened_dim_the_model_ties_to_a_number_is_refused_as_before() -> None:
    """The MatMul after the ReduceSum needs its last dim to be 16: at a marker the import
    fails, and the model is refused as a shape computed from values, naming the axes."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 3, 16])
    axes = helper.make_tensor_value_info("axes", TensorProto.INT64, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None, None])
    nodes = [
        helper.make_node("ReduceSum", ["x", "axes"], ["r"], keepdims=1),
        helper.make_node("MatMul", ["r", "w"], ["y"]),
    ]
    model = _model(nodes, [x, axes], [y], [w], opset=18)
    settings = Options(cost_model="analytic", timing=None, inputs={"axes": np.array([1])})
    with pytest.raises(ronnx.DynamicShapeError, match="computed from the values of input 'axes'"):
        optimize(model, settings)
