"""``x + 0`` is ``x`` (rule add-zeros in ``rules/decoder.rules``): an Add of a constant the facts
of values bound to [0, 0] — a projection's bias a model was initialized with — is dropped where
the broadcast does not widen ``x``; any other Add stays.

Analytic prices, no timing: nothing here depends on the machine's speed.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from relsat import Limits, Options, optimize
from relsat.onnx import load, run_onnx, to_model
from relsat.rewrite.rulefile import RULES_DIR, load_rules

pytest.importorskip("onnxruntime")

OPTIONS = Options(
    rules=load_rules(RULES_DIR / "decoder.rules"),
    cost_model="analytic",
    timing=None,
    limits=Limits(iterations=4),
)


def _model(x_shape: list[int], z: np.ndarray | None, z_first: bool = False):  # type: ignore[no-untyped-def]
    """``relu(x + z)`` (``z`` None: a second graph input, whose values nothing bounds)."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    inits = []
    if z is None:
        inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, x_shape))
    else:
        inits.append(numpy_helper.from_array(z.astype(np.float32), "z"))
    operands = ["z", "x"] if z_first else ["x", "z"]
    nodes = [
        helper.make_node("Add", operands, ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    shape = list(np.broadcast_shapes(tuple(x_shape), () if z is None else z.shape))
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("z_first", [False, True], ids=["x-first", "z-first"])
@pytest.mark.parametrize(
    "zeros",
    [np.zeros(4), np.zeros(()), np.zeros((1,)), np.zeros((2, 3, 4)), -np.zeros(4)],
    ids=["per-column", "scalar", "one", "same-shape", "negative-zeros"],
)
def test_an_add_of_zeros_is_dropped(zeros: np.ndarray, z_first: bool) -> None:
    model = _model([2, 3, 4], zeros, z_first)
    result = optimize(load(model), OPTIONS)
    assert result.graph.op_counts() == {"relu": 1}
    xv = np.linspace(-2, 2, 24, dtype=np.float32).reshape(2, 3, 4)
    (got,) = run_onnx(to_model(result.graph), {"x": xv})
    np.testing.assert_array_equal(got, np.maximum(xv, 0))


@pytest.mark.parametrize(
    ("x_shape", "z"),
    [
        ([2, 3, 4], np.array([0, 0, 1e-3, 0])),  # one value not zero
        ([2, 3, 1], np.zeros(5)),  # the broadcast widens x: [2, 3, 5]
        ([2, 3, 4], np.zeros((3, 4))),  # rank 2, not x's shape: not read (kept)
        ([2, 3, 4], None),  # a graph input: nothing bounds its values
    ],
    ids=["not-zero", "widening", "other-shape", "input"],
)
def test_near_misses_keep_their_add(x_shape: list[int], z: np.ndarray | None) -> None:
    model = _model(x_shape, z)
    result = optimize(load(model), OPTIONS)
    assert result.graph.op_counts().get("ewadd") == 1
    xv = np.linspace(-2, 2, int(np.prod(x_shape)), dtype=np.float32).reshape(x_shape)
    feeds = {"x": xv} if z is not None else {"x": xv, "z": np.ones(x_shape, np.float32)}
    (got,) = run_onnx(to_model(result.graph), feeds)
    (want,) = run_onnx(model, feeds)
    np.testing.assert_array_equal(got, want)
