"""Dims that are sums of dims (issue 27): a KV-cache decoder's ``past + 1``, spelled by the
dynamo exporter, tied by a legacy export's mask, or only computed inside the model."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from relsat import Options, optimize
from relsat.onnx.dimexpr import Sum, linear, parse, spell_poly
from relsat.onnx.dimplan import plan
from relsat.onnx.errors import OnnxError
from relsat.onnx.inputs import draw

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(0)
ANALYTIC = Options(cost_model="analytic", timing=None)
H, D = 2, 8
HIDDEN = H * D


def _decode_step(mask: str | None, present: str | None) -> onnx.ModelProto:
    """One decode step of attention with a KV cache: one new token ``x [batch, 1, HIDDEN]``
    after ``past`` cached keys and values (``[batch, H, past, D]``), which it extends with its
    own (Concat: ``past + 1`` positions, returned as the present); ``mask``: the additive
    mask's last dim (``[batch, 1, 1, mask]``, as the cache and the token together), or no mask;
    ``present``: how the present's dim is declared (None: left open)."""
    n = helper.make_node
    nodes = []
    for v in "qkv":
        nodes += [
            n("MatMul", ["x", f"w{v}"], [f"{v}_proj"]),
            n("Reshape", [f"{v}_proj", "heads"], [f"{v}_split"]),
            n("Transpose", [f"{v}_split"], [f"{v}_new"], perm=[0, 2, 1, 3]),
        ]
    nodes += [
        n("Concat", ["past_k", "k_new"], ["present_k"], axis=2),
        n("Concat", ["past_v", "v_new"], ["present_v"], axis=2),
        n("Transpose", ["present_k"], ["k_t"], perm=[0, 1, 3, 2]),
        n("Mul", ["q_new", "scale"], ["q_s"]),
        n("MatMul", ["q_s", "k_t"], ["scores"]),
    ]
    nodes += [n("Add", ["scores", "mask"], ["masked"])] if mask else []
    nodes += [
        n("Softmax", ["masked" if mask else "scores"], ["probs"], axis=-1),
        n("MatMul", ["probs", "present_v"], ["ctx"]),
        n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx_t", "merged"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array((RNG.standard_normal((HIDDEN, HIDDEN)) * 0.2).astype("f4"), w)
        for w in ("wq", "wk", "wv")
    ]
    inits += [
        numpy_helper.from_array(np.array([0, 1, H, D], np.int64), "heads"),
        numpy_helper.from_array(np.array([0, 1, HIDDEN], np.int64), "merged"),
        numpy_helper.from_array(np.array(1 / math.sqrt(D), np.float32), "scale"),
    ]
    f32 = TensorProto.FLOAT
    cache = ["batch", H, "past", D]
    inputs = [helper.make_tensor_value_info("x", f32, ["batch", 1, HIDDEN])]
    inputs += [helper.make_tensor_value_info(p, f32, cache) for p in ("past_k", "past_v")]
    if mask:
        inputs.append(helper.make_tensor_value_info("mask", f32, ["batch", 1, 1, mask]))
    out_cache = ["batch", H, present, D]  # None: the dim left open
    outputs = [helper.make_tensor_value_info("y", f32, ["batch", 1, HIDDEN])]
    outputs += [
        helper.make_tensor_value_info(p, f32, out_cache) for p in ("present_k", "present_v")
    ]
    graph = helper.make_graph(nodes, "decode", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def _shapes(batch: int, past: int, masked: bool) -> dict[str, tuple[int, ...]]:
    cache = (batch, H, past, D)
    out = {"x": (batch, 1, HIDDEN), "past_k": cache, "past_v": cache}
    return out | ({"mask": (batch, 1, 1, past + 1)} if masked else {})


def _same_at(original: onnx.ModelProto, written: onnx.ModelProto, shapes) -> None:
    feeds = draw({k: ("tensor(float)", v) for k, v in shapes.items()}, {}, seed=1)
    sessions = [ort.InferenceSession(m.SerializeToString()) for m in (original, written)]
    want, got = (s.run(None, feeds) for s in sessions)
    for a, b in zip(want, got, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4)


def _dims(value_infos) -> list[list[int | str]]:
    return [
        [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in value_infos
    ]


@pytest.mark.parametrize(
    ("mask", "present", "note"),
    [
        (
            "past + 1",
            "past + 1",
            "batch, past kept symbolic; priced at batch=1, past=128; past + 1 with them",
        ),
        ("total", None, "batch, past kept symbolic; priced at batch=1, past=128; total with them"),
        (None, None, "batch, past kept symbolic; priced at batch=1, past=128; past + 1 with them"),
    ],
    ids=["dynamo-spelled", "legacy-tied", "computed"],
)
def test_a_kv_cache_decode_step_keeps_its_cache_length_symbolic(mask, present, note) -> None:
    """The cache and the mask stay dynamic whether the exporter spells ``past + 1``, names the
    mask's dim on its own (the model ties it: ``total`` is ``past + 1``), or the sum occurs only
    inside the model (the Concat); the written model runs at other batches and cache lengths."""
    model = _decode_step(mask, present)
    given = {"mask": [1, 1, 1, 129]} if mask == "total" else None
    result = optimize(model, dataclasses.replace(ANALYTIC, input_shapes=given))
    assert result.shapes is not None and result.shapes.symbolic, result.shapes
    assert result.shapes.note == note
    written = result.model
    assert _dims(written.graph.input) == _dims(model.graph.input)
    if present:
        assert _dims(written.graph.output)[1] == ["batch", H, present, D]
    for batch, past in ((1, 128), (2, 128), (1, 65), (3, 1), (2, 300)):
        _same_at(model, written, _shapes(batch, past, mask is not None))


def test_a_value_given_for_a_sum_gives_its_dim_and_a_clash_is_named() -> None:
    model = _decode_step("past + 1", "past + 1")
    dims = plan(model, {"mask": [1, 1, 1, 33]})
    assert dims is not None and dims.pricing() == {"batch": 1, "past": 32}
    assert dims.shapes()["mask"] == (1, 1, 1, 33) and dims.shapes()["past_k"] == (1, H, 32, D)
    assert dims.shapes({"past": 7})["mask"] == (1, 1, 1, 8)
    with pytest.raises(OnnxError, match=r"dim 3 \(past \+ 1\) = 33; with past = 40 it is 41"):
        plan(model, {"mask": [1, 1, 1, 33], "past_k": [1, H, 40, D]})


def test_sums_read_back_from_their_values_at_the_markers() -> None:
    """At the markers a sum is an atom of the products relsat reads back: ``2*batch*(past +
    1)`` is read as such, priced at the pricing values, spelled, and no static number of the
    model is divisible by it."""
    dims = plan(_decode_step("past + 1", "past + 1"))
    assert dims is not None
    markers = dims.markers()
    (s,) = dims.sums
    total = s.at(markers)
    assert total == markers["past"] + 1
    assert all(total % m for m in markers.values())
    v = 2 * markers["batch"] * total
    assert dims.factor(v) == (2, (("past + 1", 1), ("batch", 1)))
    assert dims.value(v) == 2 * 1 * 129 and dims.value(v, {"past": 9, "batch": 3}) == 60
    assert dims.spell(v) == "2*(past + 1)*batch" and dims.spell(total) == "past + 1"
    assert dims.where("past") == "past_k dim 2 (past)" and dims.where(s.name).startswith("mask")


def test_dim_expressions_parse_as_exporters_spell_them() -> None:
    assert parse("past + 1", {"past"}) == linear(("past",), 1)
    assert parse("s0 + s1", set()) == linear(("s0", "s1"), 0)
    assert spell_poly(parse("2*s0 - 1", set())) == "2*s0 - 1"
    assert parse("s0*s1", set()) == ((("s0", "s1"), 1),)
    for name in ("batch", "sequence-length", "past+1", "1", "a.b", "x / 2", "f(x)"):
        assert parse(name, set()) is None, name
    assert parse("past+1", {"past"}) == linear(("past",), 1)  # its names are dims: an expression
    s = Sum("past + sequence", linear(("past", "sequence"), 0), ())
    assert s.solve(129, {"sequence": 1}) == ("past", 128)
    assert s.solve(129, {}) is None and s.solve(0, {"sequence": 1}) is None
