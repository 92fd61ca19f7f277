"""Mask index grids read as views and settled mask comparisons dropped at import
(:mod:`relsat.onnx.grids`, issues 24 and 27): transformers' ``sdpa_mask`` as torch's dynamo
exporter writes it (GatherND) and as the legacy exporter does (Gather from the flattened mask),
with the decode step's causal part (``Range(0, past + 1) <= past``), and near misses left
alone."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from relsat import Options, optimize
from relsat.onnx import load, load_symbolic
from relsat.onnx.dimexpr import constant, parse, sign

ort = pytest.importorskip("onnxruntime")
H = 2
ANALYTIC = Options(cost_model="analytic", timing=None)


def _mask_model(
    padding: str = "gathernd",
    *,
    query: str = "past",
    compare: str = "LessOrEqual",
    order: tuple[str, str] = ("b", "k"),
    stride: str = "kv",
    mask_batch: str = "mask_batch",
) -> onnx.ModelProto:
    """Scores of one new token over ``past + 1`` keys, masked the way transformers builds the
    mask: causal (key position ``compare`` the query position, ``past``; ``query="past - 1"``
    moves it) and padding (``attention_mask[b, k]`` by a GatherND at the index grid ``order``,
    or by a Gather from the flattened mask at ``b * stride + k``)."""
    n = helper.make_node
    nodes = [
        n("Shape", ["attention_mask"], ["mask_shape"]),
        n("Gather", ["mask_shape", "one"], ["kv_1"], axis=0),
        n("Reshape", ["kv_1", "scalar"], ["kv"]),
        n("Shape", ["past_k"], ["past_shape"]),
        n("Gather", ["past_shape", "two"], ["past_1"], axis=0),
        n("Reshape", ["past_1", "scalar"], ["past"]),
        n("Sub", ["past", "one_s"], ["past - 1"]),
        n("Shape", ["scores"], ["scores_shape"]),
        n("Gather", ["scores_shape", "zero"], ["b_1"], axis=0),
        n("Reshape", ["b_1", "scalar"], ["b"]),
        n("Range", ["zero_s", "kv", "one_s"], ["k_range"]),
        n("Unsqueeze", ["k_range", "axes012"], ["k_idx"]),
        n("Unsqueeze", [query, "axes0123"], ["q_idx"]),
        n(compare, ["k_idx", "q_idx"], ["causal"]),
        n("Range", ["zero_s", "b", "one_s"], ["b_range"]),
        n("Unsqueeze", ["b_range", "axes123"], ["b_idx"]),
        n("Concat", ["b_1", "ones", "kv_1"], ["grid_shape"], axis=0),
        n("Cast", ["attention_mask"], ["mask_bool"], to=TensorProto.BOOL),
    ]
    if padding == "gathernd":
        nodes += [
            n("Expand", ["b_idx", "grid_shape"], ["b_grid"]),
            n("Expand", ["k_idx", "grid_shape"], ["k_grid"]),
            n("Unsqueeze", ["b_grid", "last"], ["b_part"]),
            n("Unsqueeze", ["k_grid", "last"], ["k_part"]),
            n("Concat", [f"{order[0]}_part", f"{order[1]}_part"], ["index"], axis=-1),
            n("GatherND", ["mask_bool", "index"], ["pad"]),
        ]
    else:
        nodes += [
            n("Flatten", ["mask_bool"], ["flat"], axis=2),
            n("Mul", ["b_idx", stride], ["rows"]),
            n("Add", ["k_idx", "rows"], ["index"]),
            n("Gather", ["flat", "index"], ["picked"], axis=0),
            n("Reshape", ["picked", "grid_shape"], ["pad"]),
        ]
    nodes += [
        n("And", ["causal", "pad"], ["allowed"]),
        n("Where", ["allowed", "zero_f", "low"], ["bias"]),
        n("Add", ["scores", "bias"], ["masked"]),
        n("Softmax", ["masked"], ["y"], axis=-1),
    ]
    i64 = np.int64
    inits = [
        numpy_helper.from_array(np.array(v, dtype), name)
        for name, v, dtype in (
            ("zero", [0], i64),
            ("one", [1], i64),
            ("two", [2], i64),
            ("ones", [1, 1], i64),
            ("scalar", [], i64),
            ("zero_s", 0, i64),
            ("one_s", 1, i64),
            ("axes012", [0, 1, 2], i64),
            ("axes0123", [0, 1, 2, 3], i64),
            ("axes123", [1, 2, 3], i64),
            ("last", [-1], i64),
            ("zero_f", 0.0, np.float32),
            ("low", -1e9, np.float32),
        )
    ]
    kv = "past + 1"
    f32 = TensorProto.FLOAT
    inputs = [
        helper.make_tensor_value_info("scores", f32, ["batch", H, 1, kv]),
        helper.make_tensor_value_info("past_k", f32, ["batch", H, "past", 4]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [mask_batch, kv]),
    ]
    outputs = [helper.make_tensor_value_info("y", f32, ["batch", H, 1, kv])]
    graph = helper.make_graph(nodes, "mask", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def _feeds(batch: int, past: int, mask_batch: int | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 1000 + past)
    mask = (rng.random((mask_batch or batch, past + 1)) > 0.3).astype(np.int64)
    mask[:, -1] = 1  # the new token sees itself
    return {
        "scores": rng.standard_normal((batch, H, 1, past + 1)).astype(np.float32),
        "past_k": np.zeros((batch, H, past, 4), np.float32),
        "attention_mask": mask,
    }


def _opaque_types(model: onnx.ModelProto) -> list[str]:
    graph, _ = load_symbolic(model)
    return sorted(n.params["type"] for n in graph.nodes if n.op == "opaque")


def _same_at(original: onnx.ModelProto, written: onnx.ModelProto, feeds) -> None:
    sessions = [ort.InferenceSession(m.SerializeToString()) for m in (original, written)]
    want, got = (s.run(None, feeds)[0] for s in sessions)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


SHAPES = ((1, 128, None), (2, 40, None), (3, 1, None), (2, 7, 3))


@pytest.mark.parametrize("padding", ["gathernd", "gather"])
def test_a_decode_steps_mask_is_a_view_of_the_attention_mask(padding) -> None:
    """The padding part becomes the mask with unit axes inserted (sliced to the batch of the
    scores, where the mask's batch is another dim), the causal part is settled and dropped;
    the written model equals the original at every shape, a mask with more rows included."""
    model = _mask_model(padding)
    types = _opaque_types(model)
    for gone in ("GatherND", "Gather", "Range", "LessOrEqual", "And", "Flatten"):
        assert gone not in types, types
    # unit axes inserted: an Unsqueeze, or one Reshape where more reshapes follow it
    assert ("Unsqueeze" in types or "Reshape" in types) and "Slice" in types
    written = optimize(model, ANALYTIC).model
    assert [i.name for i in written.graph.input] == [i.name for i in model.graph.input]
    for batch, past, mask_batch in SHAPES:
        _same_at(model, written, _feeds(batch, past, mask_batch))


def test_one_batch_dim_needs_no_slice() -> None:
    model = _mask_model("gathernd", mask_batch="batch")
    types = _opaque_types(model)
    assert "GatherND" not in types and "Slice" not in types, types
    written = optimize(model, ANALYTIC).model
    for batch, past, _ in SHAPES[:3]:
        _same_at(model, written, _feeds(batch, past))


@pytest.mark.parametrize(
    ("change", "kept"),
    [
        ({"query": "past - 1"}, "LessOrEqual"),  # the last key is in the future: not all true
        ({"compare": "Less"}, "Less"),  # k < past fails for k = past
        ({"order": ("b", "b")}, "GatherND"),  # mask[b, b]: one axis read twice
        ({"padding": "gather", "stride": "past"}, "Gather"),  # rows past apart, not past + 1
    ],
    ids=["causal-shifted", "strict", "transposed", "wrong-stride"],
)
def test_near_misses_are_left_alone(change, kept) -> None:
    model = _mask_model(**change)
    assert kept in _opaque_types(model)
    written = optimize(model, ANALYTIC).model
    for batch, past in ((1, 128), (2, 40), (3, 7)):
        _same_at(model, written, _feeds(batch, past, batch))


def test_a_mask_at_fixed_shapes_loses_its_gather_and_its_settled_and() -> None:
    """At fixed shapes the index and the causal part are constants (all true at one new
    token): the GatherND is a view and the And goes; outputs equal."""
    model = _mask_model("gathernd", mask_batch="batch")
    given = {"scores": [2, H, 1, 9], "past_k": [2, H, 8, 4], "attention_mask": [2, 9]}
    graph = load(model, input_shapes=given)
    types = {n.params["type"] for n in graph.nodes if n.op == "opaque"}
    assert "And" not in types and "GatherND" not in types, types
    written = optimize(model, dataclasses.replace(ANALYTIC, input_shapes=given, static=True))
    _same_at(model, written.model, _feeds(2, 8))


def test_polynomial_signs_hold_at_every_value_of_the_dims() -> None:
    past = ((("past",), 1),)
    assert sign(constant(0)) == 0
    assert sign(parse("past + 1", {"past"})) == 1
    assert sign(parse("-2*past - 1", {"past"})) == -1
    assert sign(parse("past - 1", {"past"})) is None  # 0 at past = 1, -1 at past = 0
    assert sign(past) == 1
