"""The tanh GELU with its projection's bias (GPT-2's MLP): the bias of the projection before a
tanh GELU moves into the GELU by the rules of ``rules/transformer.rules`` (bias-gelu-tanh-fuse,
-of-linear), giving ``biasgelu_tanh``, written as com.microsoft FastGelu with its bias input and
read back; a bias that is not one per output column, or a sum that is no projection's, stays
as it is.

Analytic prices, no timing: nothing here depends on the machine's speed (with measured prices
the fused kernel is chosen where onnxruntime runs it faster).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from spellings import biased_activation

from relsat import GraphBuilder, Options, optimize
from relsat.cost import OpSignature
from relsat.cost.ort import unit_graph
from relsat.engine.egraph import EGraph
from relsat.engine.explore import Limits, default_rules, explore
from relsat.errors import GraphError
from relsat.graph.kernels import _gelu_tanh
from relsat.onnx import load, run_onnx, to_model
from relsat.rewrite.rulefile import RULES_DIR, load_rules

pytest.importorskip("onnxruntime")

OPTIONS = Options(cost_model="analytic", timing=None)
TRANSFORMER = load_rules(RULES_DIR / "transformer.rules")
CONTRIB = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    shapes = {
        i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input
    }
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


def _fast_gelus(model: onnx.ModelProto) -> list[int]:
    """The number of inputs of each FastGelu ``model`` holds (2: with its bias)."""
    return [len([i for i in n.input if i]) for n in model.graph.node if n.op_type == "FastGelu"]


@pytest.mark.parametrize(
    ("spelling", "order", "rank"),
    [
        ("tanh-pow", "mm-first", 3),  # transformers' NewGELU, MatMul + Add (bias second)
        ("tanh-pow", "bias-first", 3),
        ("tanh-cube", "bias-first", 3),  # torch's gelu(approximate="tanh")
        ("tanh-fast", "mm-first", 2),  # transformers' FastGELU of a 2-D projection
        ("tanh-cube", "bias-first", 2),
    ],
)
def test_the_bias_moves_into_fast_gelu(spelling: str, order: str, rank: int) -> None:
    model = biased_activation(spelling, order=order, rank=rank)
    result = optimize(model, OPTIONS)
    assert result.graph.op_counts()["biasgelu_tanh"] == 1, result.graph.op_counts()
    assert {"gelu_tanh", "ewadd", "matmul_bias"}.isdisjoint(result.graph.op_counts())
    assert result.verified and result.ort_check == "passed"
    assert result.exported is not None and _fast_gelus(result.exported) == [2]
    feeds = _feeds(model)
    (want,) = run_onnx(model, feeds)
    (got,) = run_onnx(result.exported, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_gpt2_conv1d_holds_both_forms_and_the_prices_choose() -> None:
    """GPT-2's Conv1D (torch's addmm over the 2-D view: Reshape, Gemm with its bias, Reshape)
    before the tanh GELU: bias-gelu-tanh-of-linear puts one MatMul on x and FastGelu with the
    bias in the GELU's e-class. Analytically the two cost the same (the bias is one add per
    element either way), and a tie keeps the input's Gemm; measured prices decide on GPT-2."""
    graph = load(biased_activation("tanh-pow", order="addmm"))
    eg = EGraph.from_graph(graph)
    explore(eg, default_rules(), limits=Limits(iterations=10))
    classes = eg.sql(
        "SELECT f.class = g.class AS same FROM enode f, enode g "
        "WHERE f.op = 'biasgelu_tanh' AND g.op = 'gelu_tanh'"
    )
    assert classes.column("same").to_pylist() == [True]
    children = eg.sql(
        "SELECT c.op FROM enode f JOIN enode c ON c.class = f.c0 WHERE f.op = 'biasgelu_tanh'"
    )
    assert "linear" in children.column("op").to_pylist()
    result = optimize(graph, OPTIONS)
    assert result.graph.op_counts()["gelu_tanh"] == 1 and result.verified


@pytest.mark.parametrize("bias", ["rows", "tensor"])
def test_a_bias_not_per_column_stays_out_of_the_gelu(bias: str) -> None:
    """A bias [S, 1] (one per token) or another tensor [1, S, M] added to the projection: the
    GELU is fused, the sum stays before it (FastGelu's bias is one value per column)."""
    model = biased_activation("tanh-pow", bias=bias)
    result = optimize(model, OPTIONS)
    counts = result.graph.op_counts()
    assert "biasgelu_tanh" not in counts and counts["gelu_tanh"] == 1, counts
    assert result.verified and result.ort_check == "passed"
    assert result.exported is not None and _fast_gelus(result.exported) == [1]


def test_a_gelu_of_no_projection_stays_a_gelu() -> None:
    """The tanh GELU of a graph input: there is no bias to move."""
    b = GraphBuilder()
    x = b.input([2, 8, 32], name="x")
    result = optimize(b.build(b.gelu(b.relu(x), "tanh")), OPTIONS)
    assert result.graph.op_counts() == {"relu": 1, "gelu_tanh": 1}


def test_a_fused_kernel_read_is_unfused_in_the_egraph_too() -> None:
    """A FastGelu with its bias read from a model may also run as the projection's Gemm and a
    FastGelu (bias-gelu-tanh-unfuse): both forms in one e-class, the prices choose."""
    b = GraphBuilder()
    x, w, bias = b.input([8, 32], name="x"), b.weight([32, 64]), b.weight([64])
    eg = EGraph.from_graph(b.build(b.biasgelu(b.matmul(x, w), bias, "tanh")))
    explore(eg, [TRANSFORMER["bias-gelu-tanh-unfuse"]], limits=Limits(iterations=2))
    classes = eg.sql(
        "SELECT f.class = g.class AS same FROM enode f, enode g "
        "WHERE f.op = 'biasgelu_tanh' AND g.op = 'gelu_tanh'"
    )
    assert classes.column("same").to_pylist() == [True]
    assert not any(eg.audit().values())


def _fast_gelu_model(bias_shape: list[int] | None) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 32])
    inputs, inits = ["x"], []
    if bias_shape is not None:
        inputs.append("b")
        rng = np.random.default_rng(1)
        inits.append(
            onnx.numpy_helper.from_array(rng.standard_normal(bias_shape).astype(np.float32), "b")
        )
    node = helper.make_node("FastGelu", inputs, ["y"], domain="com.microsoft")
    return helper.make_model(
        helper.make_graph([node], "g", [x], [y], inits), opset_imports=CONTRIB, ir_version=9
    )


def test_a_fast_gelu_with_its_bias_is_read_and_written_back() -> None:
    model = _fast_gelu_model([32])
    graph = load(model)
    assert graph.op_counts()["biasgelu_tanh"] == 1
    written = to_model(graph)
    assert [(n.domain, n.op_type) for n in written.graph.node] == [("com.microsoft", "FastGelu")]
    assert _fast_gelus(written) == [2]
    feeds = _feeds(model)
    (want,) = run_onnx(model, feeds)
    (got,) = run_onnx(written, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    bias = onnx.numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_allclose(got, _gelu_tanh(feeds["x"] + bias), rtol=1e-4, atol=1e-5)


def test_a_fast_gelu_whose_bias_is_not_a_vector_stays_opaque() -> None:
    graph = load(_fast_gelu_model([1, 32]))
    assert "biasgelu_tanh" not in graph.op_counts()
    assert "gelu_tanh" not in graph.op_counts()


def test_the_bias_must_be_one_per_column() -> None:
    b = GraphBuilder()
    x = b.input([3, 8], name="x")
    with pytest.raises(GraphError, match="biasgelu_tanh bias must have shape"):
        b.biasgelu(x, b.weight([3, 8]), "tanh")
    with pytest.raises(GraphError, match="approximate"):
        b.biasgelu(x, b.weight([8]), "sigmoid")


def test_the_ort_price_unit_is_the_fused_kernel() -> None:
    """Priced as one FastGelu with its bias a constant (the projection's bias, an initializer)."""
    sig = OpSignature("biasgelu_tanh", (), "", ((4, 64), (64,)), (4, 64), (False, True))
    unit = unit_graph(sig)
    assert [n.op for n in unit.nodes] == ["input", "weight", "biasgelu_tanh"]
    model = to_model(unit)
    assert _fast_gelus(model) == [2]
    xv = np.linspace(-6, 6, 256, dtype=np.float32).reshape(4, 64)
    (got,) = run_onnx(model, {"x0": xv})
    bias = onnx.numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_allclose(got, _gelu_tanh(xv + bias), rtol=1e-4, atol=1e-5)
