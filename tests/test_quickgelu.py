"""QuickGelu (issue 39): CLIP's quick_gelu ``x * sigmoid(1.702 x)`` and SiLU ``x * sigmoid(x)``
fused by the rules of ``rules/transformer.rules`` into ``quickgelu``, written as com.microsoft
QuickGelu (attribute alpha) and read back; the near misses stay as they are.

Analytic prices, no timing: nothing here depends on the machine's speed.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from relsat import GraphBuilder, Limits, Options, optimize
from relsat.cost import OpSignature
from relsat.cost.ort import unit_graph
from relsat.graph.builder import Tensor
from relsat.graph.ops import f32, f32_bits
from relsat.onnx import load, run_onnx, to_model
from relsat.rewrite.rulefile import RULES_DIR, load_rules

pytest.importorskip("onnxruntime")

TRANSFORMER = load_rules(RULES_DIR / "transformer.rules")
OPTIONS = Options(
    rules=TRANSFORMER, cost_model="analytic", timing=None, limits=Limits(iterations=6)
)


def _spelled(b: GraphBuilder, x: Tensor, alpha: float | None, order: str, z: Tensor) -> Tensor:
    """``x * sigmoid(alpha * z)`` (``alpha`` None: ``x * sigmoid(z)``), the products in
    ``order``: ``x-first`` as torch writes them, ``swapped`` with both operands turned."""
    arg = z
    if alpha is not None:
        a = b.scalar(alpha)
        arg = b.mul(z, a) if order == "x-first" else b.mul(a, z)
    s = b.sigmoid(arg)
    return b.mul(x, s) if order == "x-first" else b.mul(s, x)


@pytest.mark.parametrize("order", ["x-first", "swapped"])
@pytest.mark.parametrize(("alpha", "spelled"), [(1.702, 1.702), (1.0, None), (0.5, 0.5)])
def test_quick_gelu_and_silu_fuse_in_either_operand_order(
    alpha: float, spelled: float | None, order: str
) -> None:
    b = GraphBuilder()
    x = b.input([2, 8, 32], name="x")
    result = optimize(b.build(_spelled(b, x, spelled, order, x)), OPTIONS)
    assert result.graph.op_counts() == {"quickgelu": 1} and result.verified
    (node,) = [n for n in result.graph.nodes if n.op == "quickgelu"]
    assert node.params["alpha"] == f32(alpha)
    written = to_model(result.graph)
    (kernel,) = written.graph.node
    assert (kernel.domain, kernel.op_type) == ("com.microsoft", "QuickGelu")
    assert helper.get_attribute_value(kernel.attribute[0]) == pytest.approx(alpha)
    xv = np.linspace(-8, 8, 2 * 8 * 32, dtype=np.float32).reshape(2, 8, 32)
    (got,) = run_onnx(written, {"x": xv})
    np.testing.assert_allclose(got, xv / (1 + np.exp(-f32(alpha) * xv)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("miss", ["sigmoid-of-another", "negative-alpha", "scaled-another"])
def test_near_misses_stay_unfused(miss: str) -> None:
    """The sigmoid of another tensor is a gate, not an activation; a negative alpha is refused
    by the rule's condition (the kernel is written for CLIP's and SiLU's positive ones)."""
    b = GraphBuilder()
    x, z = b.input([2, 8, 32], name="x"), b.input([2, 8, 32], name="z")
    alpha, other = {
        "sigmoid-of-another": (None, z),
        "negative-alpha": (-1.702, x),
        "scaled-another": (1.702, z),
    }[miss]
    result = optimize(b.build(_spelled(b, x, alpha, "x-first", other)), OPTIONS)
    assert "quickgelu" not in result.graph.op_counts() and result.verified


def test_a_quick_gelu_node_is_read_and_written_back() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 32])
    node = helper.make_node("QuickGelu", ["x"], ["y"], domain="com.microsoft", alpha=1.5)
    model = helper.make_model(
        helper.make_graph([node], "q", [x], [y]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )
    graph = load(model)
    (q,) = [n for n in graph.nodes if n.op == "quickgelu"]
    assert q.params["alpha"] == 1.5
    written = to_model(graph)
    assert [(n.domain, n.op_type) for n in written.graph.node] == [("com.microsoft", "QuickGelu")]


def test_the_ort_price_unit_is_the_fused_kernel() -> None:
    sig = OpSignature("quickgelu", (f32_bits(1.702),), "", ((4, 64),), (4, 64))
    unit = unit_graph(sig)
    assert [n.op for n in unit.nodes] == ["input", "quickgelu"]
    xv = np.linspace(-6, 6, 256, dtype=np.float32).reshape(4, 64)
    (got,) = run_onnx(to_model(unit), {"x0": xv})
    np.testing.assert_allclose(got, xv / (1 + np.exp(-1.702 * xv)), rtol=1e-5, atol=1e-6)
