"""Opaque operators whose outputs ONNX shape inference alone does not give relsat.

Dims an operator computes from values (relsat.onnx.opened): NonZero's count, a Reduce over axes
given as an input. Each is a dim of its own, symbolic in the e-graph and in the written model,
which onnxruntime runs to the original's outputs whatever the values.

Several outputs read (TopK's values and indices, an LSTM's Y and Y_h, a Split by sizes given as
an input): one opaque node per output in relsat's graph (an e-class holds one tensor), written
back as one ONNX node."""

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


# --- several outputs ------------------------------------------------------------------------


def _pair(x: str, out: str, rng: np.random.Generator) -> tuple[list, list]:
    """Two MatMul+Add+Relu on ``x`` summed into ``out`` (relsat packs them into one Gemm)."""
    inits = [
        numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
        for name, shape in (("w1", (16, 16)), ("w2", (16, 16)), ("bias", (16,)))
    ]
    node = helper.make_node
    nodes = [
        node("MatMul", [x, "w1"], ["a1"]),
        node("Add", ["a1", "bias"], ["b1"]),
        node("Relu", ["b1"], ["c1"]),
        node("MatMul", [x, "w2"], ["a2"]),
        node("Add", ["a2", "bias"], ["b2"]),
        node("Relu", ["b2"], ["c2"]),
        node("Add", ["c1", "c2"], [out]),
    ]
    return nodes, inits


def test_topk_values_and_indices_are_one_node_again() -> None:
    rng = np.random.default_rng(0)
    nodes, inits = _pair("x", "c", rng)
    inits.append(numpy_helper.from_array(np.array([5], np.int64), "k"))
    nodes += [
        helper.make_node("TopK", ["c", "k"], ["values", "indices"], axis=-1),
        helper.make_node("Cast", ["indices"], ["position"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["values", "position"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 16])
    outputs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 5]),
        helper.make_tensor_value_info("indices", TensorProto.INT64, ["B", 5]),
    ]
    graph = helper.make_graph(nodes, "g", [x], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    result = optimize(model, ANALYTIC)
    tops = [n for n in result.graph.nodes if n.op == "opaque"]
    assert sorted(n.params["type"] for n in tops) == ["Cast", "TopK", "TopK"]
    assert result.kept == "optimized" and result.rewrites()
    written = result.model
    (topk,) = [n for n in written.graph.node if n.op_type == "TopK"]
    assert topk.output[1] == "indices" and "_unread" not in topk.output[0]
    for batch in (1, 3):
        feeds = {"x": rng.standard_normal((batch, 16)).astype(np.float32)}
        for got, want in zip(_run(written, feeds), _run(model, feeds), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_split_by_sizes_given_as_an_input_keeps_both_pieces_symbolic() -> None:
    """Each piece's dims are dims of their own (relsat.onnx.opened), each piece an opaque node
    of its own, the Split written back once; the outputs keep their declared 16."""
    rng = np.random.default_rng(1)
    nodes, inits = _pair("x", "c", rng)
    nodes += [
        helper.make_node("Split", ["c", "sizes"], ["p", "q"], axis=0),
        helper.make_node("Relu", ["p"], ["y"]),
        helper.make_node("Sigmoid", ["q"], ["z"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 16])
    sizes = helper.make_tensor_value_info("sizes", TensorProto.INT64, [2])
    outputs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 16]),
        helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, 16]),
    ]
    graph = helper.make_graph(nodes, "g", [x, sizes], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    given = {"sizes": np.array([2, 4], np.int64)}
    result = optimize(model, Options(cost_model="analytic", timing=None, inputs=given))
    assert result.kept == "optimized"
    dims = result.shapes.dims
    # ONNX infers nothing of a Split by sizes given as an input: both dims of each piece open
    opened = {o.tensor: o.layout for o in dims.opened}
    assert opened == {"p": ("p_dim0", "p_dim1"), "q": ("q_dim0", "q_dim1")}
    values = [dims.dim(n).value for n in (*opened["p"], *opened["q"])]
    assert values == [2, 16, 4, 16]
    written = result.model
    (split,) = [n for n in written.graph.node if n.op_type == "Split" and "sizes" in n.input]
    assert len(split.output) == 2 and not any("_unread" in o for o in split.output)
    out_dims = [
        [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
        for vi in written.graph.output
    ]
    assert out_dims == [["p_dim0", 16], ["q_dim0", 16]]
    for cut in ([2, 4], [5, 1], [3, 3]):
        feeds = {"x": rng.standard_normal((6, 16)).astype(np.float32), "sizes": np.array(cut)}
        for got, want in zip(_run(written, feeds), _run(model, feeds), strict=True):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_refusal_further_on_is_said_rather_than_the_opened_shape() -> None:
    """After NonZero's count is opened the import goes on to an If (subgraphs are not
    supported): that is what the error says, not NonZero's open shape."""
    one = numpy_helper.from_array(np.ones(2, np.float32), "one")
    branch = helper.make_graph(
        [helper.make_node("Identity", ["one"], ["out"])],
        "branch",
        [],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])],
        [one],
    )
    nodes = [
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("Cast", ["nz"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("If", ["cond"], ["picked"], then_branch=branch, else_branch=branch),
        helper.make_node("ReduceSum", ["f"], ["total"], keepdims=0),
        helper.make_node("Mul", ["picked", "total"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    with pytest.raises(ronnx.OnnxError, match="subgraphs") as info:
        optimize(_model(nodes, [x, cond], [y]), ANALYTIC)
    assert not isinstance(info.value, ronnx.DynamicShapeError)


def test_one_onnxruntime_run_values_every_opened_output(monkeypatch) -> None:
    """Two NonZero counts opened one after the other: the shapes come from one run of the
    model asking for the tensors ONNX leaves open at the pricing shape, not one run each, and
    not for every activation."""
    from relsat.onnx import verification

    runs = []
    real = verification.output_shapes

    def counted(*args, **kwargs):
        runs.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(verification, "output_shapes", counted)
    nodes = [
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("NonZero", ["x2"], ["nz2"]),
        helper.make_node("Concat", ["nz", "nz2"], ["both"], axis=1),
        helper.make_node("Cast", ["both"], ["y"], to=TensorProto.FLOAT),
        helper.make_node("Relu", ["x"], ["rx"]),
    ]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 4]) for n in ("x", "x2")]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, None])
    rx = helper.make_tensor_value_info("rx", TensorProto.FLOAT, [3, 4])
    result = optimize(_model(nodes, inputs, [y, rx]), ANALYTIC)
    assert [o.tensor for o in result.shapes.dims.opened] == ["nz", "nz2"]
    assert len(runs) == 1 and {"nz", "nz2", "both"} <= set(runs[0])
    assert "rx" not in runs[0]  # what ONNX leaves open at the pricing shape, not every tensor


def test_no_names_asked_is_no_shapes() -> None:
    """onnxruntime reads an empty list of output names as every graph output: asked for no
    tensor, output_shapes runs nothing (an output opened at the markers whose shape ONNX
    infers at the pricing shape asks for none in the first run)."""
    from relsat.onnx.verification import output_shapes

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [x], [y])
    assert output_shapes(model, [], {"x": (2, 3)}) == {}
    assert output_shapes(model, ["y"], {"x": (2, 3)}) == {"y": (2, 3)}
