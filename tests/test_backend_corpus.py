"""What bench/backend.py found in the ONNX backend test models (issue 27), each case rebuilt
small with ``onnx.helper``: models with many small dynamic dims keep them symbolic, a shape the
model returns stays computed, and what relsat cannot take is refused in one typed line saying
why (a sequence, a subgraph, a shape computed from an input's values). A few of the backend
test models the onnx wheel ships run too, as given and with their dims made dynamic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from relsat import Options, optimize
from relsat import onnx as ronnx
from relsat.onnx.dimplan import MARKER_FLOOR, SMALLEST_MARKER, choose_markers

ort = pytest.importorskip("onnxruntime")
ANALYTIC = Options(cost_model="analytic", timing=None)
DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "backend", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _dims(value_infos) -> list[list[int | str]]:
    return [
        [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in value_infos
    ]


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


# --- many small dims ---------------------------------------------------------------------------


def test_markers_go_above_the_range_when_it_has_none_left() -> None:
    primes = [
        p for p in range(SMALLEST_MARKER, MARKER_FLOOR + 1) if all(p % q for q in range(2, p))
    ]
    first = choose_markers([3] * 6, set(), [])
    second = choose_markers([3] * 6, set(), [], taken=first)
    assert first == primes[::-1][:6]
    assert second == [*primes[::-1][6:], 67, 71]
    # above the range too, a prime dividing a static number of the model is passed over
    assert choose_markers([3], set(), [67 * 2], taken=[*first, *second[:4]]) == [71]


def test_six_small_dynamic_dims_stay_symbolic() -> None:
    """Six dims priced at 2..7 need twelve markers (two assignments) where the range up to 61
    has ten: relsat used to fix them all ("no prime up to 61 is free")."""
    names = [f"d{i}" for i in range(6)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, names)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, names)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),  # relu(relu(x)) = relu(x)
    ]
    model = _model(nodes, [x], [y])
    options = Options(cost_model="analytic", timing=None, input_shapes={"x": [2, 3, 4, 5, 6, 7]})
    result = optimize(model, options)
    assert result.shapes is not None and result.shapes.symbolic, result.shapes
    assert _dims(result.model.graph.input) == [names]


# --- a shape the model returns -----------------------------------------------------------------


def test_a_returned_shape_stays_computed_with_symbolic_dims() -> None:
    """``Shape(x)`` as a graph output (onnx's test_shape): folded at the markers it became a
    constant output, which relsat cannot write, and the dims were fixed."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", "b"])
    outputs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"]),
        helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    model = _model(nodes, [x], outputs)
    result = optimize(
        model, Options(cost_model="analytic", timing=None, input_shapes={"x": [3, 4]})
    )
    assert result.shapes is not None and result.shapes.symbolic, result.shapes.note
    written = result.model
    assert _dims(written.graph.input) == [["a", "b"]]
    for shape in ((3, 4), (5, 2)):
        feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
        want, got = _run(model, feeds), _run(written, feeds)
        assert got[1].tolist() == list(shape)
        np.testing.assert_allclose(got[0], want[0])


# --- dims the model ties or fixes -------------------------------------------------------------


def _options(**shapes: list[int]) -> Options:
    return Options(cost_model="analytic", timing=None, input_shapes=shapes)


def _feeds(**shapes: tuple[int, ...]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}


def test_dims_the_model_ties_across_positions_are_one_dim() -> None:
    """x[a, b, c] + y[d] broadcasts only with d = c (onnx's test_add_bcast with its dims made
    dynamic), y2[e, f] @ z[g, h] only with f = g: relsat fixed every dim before."""
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", "b", "c"]),
        helper.make_tensor_value_info("y", TensorProto.FLOAT, ["d"]),
        helper.make_tensor_value_info("m", TensorProto.FLOAT, ["e", "f"]),
        helper.make_tensor_value_info("z", TensorProto.FLOAT, ["g", "h"]),
    ]
    outputs = [
        helper.make_tensor_value_info("s", TensorProto.FLOAT, ["a", "b", "c"]),
        helper.make_tensor_value_info("p", TensorProto.FLOAT, ["e", "h"]),
    ]
    nodes = [
        helper.make_node("Add", ["x", "y"], ["s"]),
        helper.make_node("MatMul", ["m", "z"], ["p"]),
    ]
    model = _model(nodes, inputs, outputs)
    result = optimize(model, _options(x=[3, 4, 5], y=[5], m=[3, 6], z=[6, 7]))
    assert result.shapes is not None and result.shapes.symbolic, result.shapes.note
    assert result.shapes.dims is not None
    assert set(result.shapes.dims.names) == {"a", "b", "c", "e", "f", "h"}  # d is c, g is f
    written = result.model
    assert _dims(written.graph.input) == [["a", "b", "c"], ["d"], ["e", "f"], ["g", "h"]]
    feeds = _feeds(x=(2, 3, 9), y=(9,), m=(4, 8), z=(8, 2))
    for got, want in zip(_run(written, feeds), _run(model, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_dims_apart_stay_apart() -> None:
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a"]),
        helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b"]),
    ]
    outputs = [
        helper.make_tensor_value_info("rx", TensorProto.FLOAT, ["a"]),
        helper.make_tensor_value_info("ry", TensorProto.FLOAT, ["b"]),
    ]
    nodes = [helper.make_node("Relu", ["x"], ["rx"]), helper.make_node("Relu", ["y"], ["ry"])]
    result = optimize(_model(nodes, inputs, outputs), _options(x=[4], y=[4]))
    assert result.shapes is not None and result.shapes.dims is not None
    assert result.shapes.dims.names == ("a", "b")
    assert "fixed by the model" not in result.shapes.note


def test_a_dim_the_model_fixes_is_static_and_said_the_others_stay_symbolic() -> None:
    """x[n, c] + w where w is a [1, 3] weight: c must be 3 (onnx's GridSample tests, whose grid
    ends in 2, with their dims made dynamic); n stays symbolic."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "c"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c"])
    w = numpy_helper.from_array(np.arange(3, dtype=np.float32).reshape(1, 3), "w")
    nodes = [helper.make_node("Add", ["x", "w"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    model = _model(nodes, [x], [y], [w])
    result = optimize(model, _options(x=[2, 3]))
    assert result.shapes is not None and result.shapes.symbolic
    assert result.shapes.note == (
        "n kept symbolic; priced at n=2; fixed by the model (it runs at no other value), "
        "written static: x dim 1 (c) = 3"
    )


def test_a_written_model_declares_the_fixed_dim() -> None:
    """The conv net of tests/test_dynamic.py (two convs sharing their input: merged) with its
    channels dynamic too: the weights fix them to 3, so the written model says 3, and runs at
    any batch."""
    from test_dynamic import _conv_net

    model = _conv_net(["N", "C", 16, 16])
    result = optimize(model, _options(x=[1, 3, 16, 16]))
    assert result.shapes is not None and result.shapes.symbolic, result.shapes.note
    assert result.shapes.note.endswith("written static: x dim 1 (C) = 3")
    assert result.kept == "optimized" and result.rewrites()
    written = result.model
    assert _dims(written.graph.input) == [["N", 3, 16, 16]]
    feeds = _feeds(x=(2, 3, 16, 16))
    np.testing.assert_allclose(_run(written, feeds)[0], _run(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_a_dim_that_runs_when_another_moves_with_it_is_not_fixed() -> None:
    """x[a, 4] + m[b, 4]: ``a`` moved alone fails, moved with ``b`` it runs (the batch of a
    dynamo export's input_ids and attention_mask, which the tie probe may leave apart)."""
    from relsat.onnx.dimplan import plan
    from relsat.onnx.marked import bound_dims

    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", 4]),
        helper.make_tensor_value_info("m", TensorProto.FLOAT, ["b", 4]),
    ]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", 4])
    model = _model([helper.make_node("Add", ["x", "m"], ["y"])], inputs, [y])
    dims = plan(model, {"x": [2, 4], "m": [2, 4]})
    assert dims is not None and bound_dims(model, dims) == {}
    w = numpy_helper.from_array(np.ones((2, 4), np.float32), "w")
    pinned = _model([helper.make_node("Add", ["x", "w"], ["y"])], inputs[:1], [y], [w])
    dims = plan(pinned, {"x": [2, 4]})
    assert dims is not None and bound_dims(pinned, dims) == {"a": 2}


def test_a_model_that_fixes_every_dim_is_optimized_at_it_and_says_so() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["c"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["c"])
    w = numpy_helper.from_array(np.arange(3, dtype=np.float32), "w")
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [x], [y], [w])
    result = optimize(model, _options(x=[3]))
    assert result.shapes is not None and not result.shapes.symbolic
    assert result.shapes.note == (
        "fixed at c=3: the model runs at no other value of its dynamic dims: x dim 0 (c) = 3"
    )


# --- refusals: one typed line, the real reason -------------------------------------------------


def test_a_sequence_output_is_refused_as_a_sequence() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    n = helper.make_tensor_value_info("n_out", TensorProto.INT64, [])
    nodes = [
        helper.make_node("SplitToSequence", ["x"], ["seq"], keepdims=0),
        helper.make_node("SequenceLength", ["seq"], ["n_out"]),
    ]
    model = _model(nodes, [x], [n], opset=12)
    with pytest.raises(ronnx.OnnxError) as info:
        optimize(model, ANALYTIC)
    assert not isinstance(info.value, ronnx.DynamicShapeError)
    assert "output 'seq' is a sequence_type, not a tensor" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_subgraph_is_refused_for_the_subgraph() -> None:
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])

    def branch(value: float) -> onnx.GraphProto:
        out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [3])
        tensor = numpy_helper.from_array(np.full(3, value, np.float32), "v")
        node = helper.make_node("Constant", [], ["out"], value=tensor)
        return helper.make_graph([node], f"b{value}", [], [out])

    node = helper.make_node("If", ["cond"], ["y"], then_branch=branch(1.0), else_branch=branch(0.0))
    with pytest.raises(ronnx.OnnxError, match="subgraphs") as info:
        optimize(_model([node], [cond], [y]), ANALYTIC)
    assert not isinstance(info.value, ronnx.DynamicShapeError)


def test_a_shape_computed_from_an_inputs_values_stays_symbolic() -> None:
    """Unique's count follows x's values: it becomes a dim of its own (relsat.onnx.opened),
    priced at what onnxruntime computes at the pricing shape, named on the output."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Unique", ["r"], ["y"], sorted=1),
    ]
    result = optimize(_model(nodes, [x], [y]), ANALYTIC)
    assert result.shapes is not None and result.shapes.dims is not None
    (opened,) = result.shapes.dims.opened
    assert (opened.tensor, opened.op, opened.layout) == ("y", "Unique", ("y_dim0",))
    assert "y_dim0 (of Unique 'y') = " in result.shapes.note


def test_a_shape_computed_from_an_inputs_values_empty_at_the_pricing_shape_names_that_input() -> (
    None
):
    """A Compress whose condition (given) keeps nothing is empty at the pricing shape: relsat
    prices no empty tensor, and refuses it in one line naming the input its shape follows."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Compress", ["r", "cond"], ["y"]),
    ]
    settings = Options(cost_model="analytic", timing=None, inputs={"cond": np.zeros(6, bool)})
    with pytest.raises(ronnx.DynamicShapeError) as info:
        optimize(_model(nodes, [x, cond], [y]), settings)
    text = str(info.value)
    assert "output 'y' has no static shape (dim 0: computed from the values of input 'cond')" in (
        text
    )
    assert "\n" not in text


def test_an_empty_output_is_refused_as_empty() -> None:
    """Shape with start past end (onnx's test_shape_start_greater_than_end) is empty: relsat
    read its 0 as an open dim and refused it as a shape computed at run time."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [0])
    model = _model([helper.make_node("Shape", ["x"], ["y"], start=2, end=1)], [x], [y])
    with pytest.raises(ronnx.OnnxError, match=r"output 'y' is an empty tensor \(dim 0 is 0\)"):
        optimize(model, ANALYTIC)


# --- static shapes ONNX leaves open ------------------------------------------------------------


def test_a_negative_flatten_axis_counts_from_the_end() -> None:
    """Flatten(axis=-1) of [3, 4] is [3, 4] (ONNX: axis + rank), not [12, 1]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
    model = _model([helper.make_node("Flatten", ["x"], ["y"], axis=-1)], [x], [y])
    graph = ronnx.load(model)
    assert [graph.shape(r) for r in graph.outputs] == [(3, 4)]


def test_a_shape_computation_onnxruntime_cannot_fold_is_folded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Range(0, Shape(x)[1]) as the positions of an expanded Attention function: ONNX's shape
    inference leaves its length open, and onnxruntime cannot fold a bfloat16 model (its
    test_attention_*_bf16_expanded); the reference evaluator folds it."""
    from relsat.onnx import importer

    def cannot(*args: object) -> str:
        raise RuntimeError("NOT_IMPLEMENTED : Could not find an implementation for Mul(14)")

    monkeypatch.setattr(importer, "_fold_constants", cannot)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
        helper.make_node("Range", ["zero", "n", "one"], ["positions"]),
        helper.make_node("Cast", ["positions"], ["p"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "p"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
    ]
    graph = ronnx.load(_model(nodes, [x], [y], inits))
    assert [graph.shape(r) for r in graph.outputs] == [(2, 5)]


def test_an_empty_shape_vector_folds_away() -> None:
    """Slice(Shape(x), 0, 0) is an empty vector that a Concat makes a Reshape target (onnx's
    test_layer_normalization_2d_axis0_expanded): refused as empty only if folding leaves it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Size", ["s"], ["rank"]),
        helper.make_node("Reshape", ["rank", "one"], ["rank1"]),
        helper.make_node("Slice", ["s", "zero", "zero"], ["prefix"]),
        helper.make_node("Slice", ["s", "zero", "rank1"], ["suffix"]),
        helper.make_node("Concat", ["prefix", "suffix"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
    ]
    graph = ronnx.load(_model(nodes, [x], [y], inits))
    assert [graph.shape(r) for r in graph.outputs] == [(3, 4)]


# --- the wheel's own backend test models -------------------------------------------------------


def _backend_model(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    folder = DATA / "simple" / name
    if not (folder / "model.onnx").exists():
        pytest.skip(f"the onnx wheel has no {name}")
    model = onnx.load(str(folder / "model.onnx"))
    tensor = onnx.TensorProto()
    tensor.ParseFromString((folder / "test_data_set_0" / "input_0.pb").read_bytes())
    return model, {model.graph.input[0].name: numpy_helper.to_array(tensor)}


@pytest.mark.parametrize("name", ["test_single_relu_model", "test_sign_model"])
def test_backend_models_as_given_and_with_dynamic_dims(name: str) -> None:
    model, feeds = _backend_model(name)
    want = _run(model, feeds)
    assert optimize(model, ANALYTIC).kept in ("original", "optimized")
    dynamic = onnx.ModelProto()
    dynamic.CopyFrom(model)
    for axis, d in enumerate(dynamic.graph.input[0].type.tensor_type.shape.dim):
        d.Clear()
        d.dim_param = f"d{axis}"
    for d in dynamic.graph.output[0].type.tensor_type.shape.dim:
        d.Clear()
    shape = list(next(iter(feeds.values())).shape)
    options = Options(
        cost_model="analytic", timing=None, input_shapes={model.graph.input[0].name: shape}
    )
    result = optimize(dynamic, options)
    assert result.shapes is not None and result.shapes.symbolic, result.shapes.note
    written = result.model
    assert _dims(written.graph.input) == _dims(dynamic.graph.input)
    np.testing.assert_allclose(_run(written, feeds)[0], want[0], rtol=1e-5)


def test_a_backend_sequence_model_is_refused_in_one_line() -> None:
    folder = DATA / "simple" / "test_sequence_model8"
    if not (folder / "model.onnx").exists():
        pytest.skip("the onnx wheel has no test_sequence_model8")
    # at the default pricing shape (n = 1) its SplitToSequence fails in onnxruntime: refused
    # up front; at a shape it runs at, the sequence is what relsat cannot take
    with pytest.raises(ronnx.PricingShapeError, match=r"X dim 0 \(n\) = 1") as info:
        optimize(str(folder / "model.onnx"), ANALYTIC)
    assert "\n" not in str(info.value)
    shape = Options(cost_model="analytic", timing=None, input_shapes={"X": [7]})
    with pytest.raises(ronnx.OnnxError, match="sequence_type, not a tensor") as info:
        optimize(str(folder / "model.onnx"), shape)
    assert "\n" not in str(info.value)
