"""BLOOM's attention with ALiBi through ONNX, built with onnx.helper as torch's legacy exporter
writes it: batch and heads flattened into one batch axis ([B*H, S, D]), 3-D products, the ALiBi
bias [B*H, 1, T] (from a cumulative sum of the attention mask) added to the scaled scores, the
scores split into heads [B, H, S, T] for the padding and causal mask. General rules over shape
operators (rules/layout.rules: the heads split moved into the products and the sums before them)
and the facts of values (the bias is finite, and so is the mask plus the bias) make it one
eager attention that rules/transformer.rules fuses: ONNX Attention, run by onnxruntime. Near
misses stay as they are."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from relsat import Options, optimize
from relsat import onnx as ronnx
from relsat.rewrite.rulefile import RULES_DIR, load_rules

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(0)
RULES = [
    *load_rules(RULES_DIR / "transformer.rules"),
    *load_rules(RULES_DIR / "layout.rules"),
    *load_rules(RULES_DIR / "decoder.rules"),
]
LOWEST = float(np.finfo(np.float32).min)
n = helper.make_node


def _init(name: str, value: object, dtype: object = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _bloom_model(
    b: int = 1,
    h: int = 4,
    s: int = 16,
    d: int = 8,
    *,
    fill: float = LOWEST,
    alibi: str = "cumsum",
    rows: int = 1,
    softmax_axis: int = -1,
) -> onnx.ModelProto:
    """BLOOM's self-attention on x [b, s, h*d] with attention_mask [b, s] (int64), as torch's
    legacy exporter writes transformers' BloomAttention: the packed projection viewed
    [b, s, h, 3, d], q, k, v gathered and merged into [b*h, s, d], the scores
    ``q @ kt * inv_norm + alibi * beta`` split into [b, h, s, s], the mask
    ``Where(keep, 0, fill)`` added, the softmax, its product with v split into heads again.

    Near misses: ``fill`` -inf (a mask that can be -inf); ``alibi`` "input" (a float bias
    [b*h, 1, s] given as a graph input: nothing bounds it); ``rows`` 2 (the scores split into
    [b, h, 2s, s/2]: a softmax over half rows); ``softmax_axis`` another axis."""
    e = h * d
    slopes = 2.0 ** (-8.0 * np.arange(1, h + 1) / h)
    inits = [
        _init("w", RNG.standard_normal((e, 3 * e)) / np.sqrt(e)),
        _init("bias", RNG.standard_normal(3 * e) * 0.1),
        _init("packed", [b, s, h, 3, d], np.int64),
        *(_init(f"i{j}", j, np.int64) for j in range(3)),
        _init("merged", [b * h, s, d], np.int64),
        _init("heads", [b, h, s, d], np.int64),
        _init("scores_heads", [b, h, s * rows, s // rows], np.int64),
        _init("scores_merged", [b * h, s, s], np.int64),
        _init("out_shape", [b, s, e], np.int64),
        _init("inv_norm", 1 / np.sqrt(d)),
        _init("beta", 1.0),
        _init("one", 1, np.int64),
        _init("axis", 1, np.int64),
        _init("unsq", [1], np.int64),
        _init("slopes", slopes.reshape(h, 1)),
        _init("alibi_shape", [b * h, 1, s], np.int64),
        _init("causal", np.tril(np.ones((1, 1, s, s))), bool),
        _init("pad_shape", [b, 1, 1, s], np.int64),
        _init("mask_rows", [b, 1, s * rows, s // rows], np.int64),
        _init("zero", 0.0),
        _init("fill", fill),
    ]
    nodes = [
        n("MatMul", ["x", "w"], ["xw"]),
        n("Add", ["bias", "xw"], ["qkv"]),
        n("Reshape", ["qkv", "packed"], ["qkv5"]),
    ]
    for j, name in enumerate("qkv"):
        nodes += [
            n("Gather", ["qkv5", f"i{j}"], [f"{name}g"], axis=3),
            n("Transpose", [f"{name}g"], [f"{name}t"], perm=[0, 2, 1, 3]),
            n("Reshape", [f"{name}t", "merged"], [f"{name}3"]),
        ]
    if alibi == "cumsum":  # transformers' build_alibi_tensor
        nodes += [
            n("Cast", ["attention_mask"], ["am"], to=TensorProto.INT64),
            n("CumSum", ["am", "axis"], ["cs"]),
            n("Sub", ["cs", "one"], ["pos0"]),
            n("Mul", ["pos0", "am"], ["pos"]),
            n("Unsqueeze", ["pos", "unsq"], ["pos3"]),
            n("Cast", ["pos3"], ["posf"], to=TensorProto.FLOAT),
            n("Mul", ["slopes", "posf"], ["alibi_bh"]),
            n("Reshape", ["alibi_bh", "alibi_shape"], ["alibi"]),
        ]
    nodes += [
        n("Transpose", ["k3"], ["k3t"], perm=[0, 2, 1]),
        n("MatMul", ["q3", "k3t"], ["qk"]),
        n("Mul", ["qk", "inv_norm"], ["qk_s"]),
        n("Mul", ["alibi", "beta"], ["alibi_b"]),
        n("Add", ["qk_s", "alibi_b"], ["scores3"]),
        n("Reshape", ["scores3", "scores_heads"], ["scores"]),
        # the padding mask and the causal mask (a constant), as one Where
        n("Cast", ["attention_mask"], ["keep_pad"], to=TensorProto.BOOL),
        n("Reshape", ["keep_pad", "pad_shape"], ["keep_pad4"]),
        n("And", ["causal", "keep_pad4"], ["keep"]),
        n("Where", ["keep", "zero", "fill"], ["mask" if rows == 1 else "mask4"]),
        *([] if rows == 1 else [n("Reshape", ["mask4", "mask_rows"], ["mask"])]),
        n("Add", ["scores", "mask"], ["masked"]),
        n("Softmax", ["masked"], ["probs"], axis=softmax_axis),
        n("Cast", ["probs"], ["probs_c"], to=TensorProto.FLOAT),
        n("Cast", ["probs_c"], ["probs_cc"], to=TensorProto.FLOAT),
        n("Reshape", ["probs_cc", "scores_merged"], ["probs3"]),
        n("MatMul", ["probs3", "v3"], ["ctx3"]),
        n("Reshape", ["ctx3", "heads"], ["ctx"]),
        n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx_t", "out_shape"], ["y"]),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, s, e]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [b, s]),
    ]
    if alibi == "input":
        inputs.append(helper.make_tensor_value_info("alibi", TensorProto.FLOAT, [b * h, 1, s]))
    graph = helper.make_graph(
        nodes, "bloom", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, s, e])]
    )
    graph.initializer.extend(inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Random hidden states; an attention mask with the last batch row left-padded by three
    tokens (its first query rows masked entirely: each gives the mean of v)."""
    shapes = {
        i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input
    }
    mask = np.ones(shapes["attention_mask"], np.int64)
    mask[-1, :3] = 0
    feeds = {
        "x": RNG.standard_normal(shapes["x"]).astype(np.float32),
        "attention_mask": mask,
    }
    if "alibi" in shapes:
        feeds["alibi"] = RNG.standard_normal(shapes["alibi"]).astype(np.float32)
    return feeds


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, feeds)[0])


def _optimized(model: onnx.ModelProto) -> Any:
    return optimize(ronnx.load(model), Options(rules=RULES))  # analytic prices: no timing


@pytest.mark.parametrize(
    ("b", "h", "s", "d"),
    [(1, 4, 16, 8), (2, 2, 12, 16), (2, 8, 8, 4)],
    ids=["1x4-heads", "2x2-heads", "2x8-heads"],
)
def test_bloom_attention_fuses_into_one_kernel_and_matches(b: int, h: int, s: int, d: int) -> None:
    model = _bloom_model(b, h, s, d)
    result = _optimized(model)
    counts = result.graph.op_counts()
    assert counts["attention"] == 1 and "softmax" not in counts
    out = ronnx.to_model(result.graph, like=model)
    ops = [node.op_type for node in out.graph.node]
    # the projection is the one MatMul left; the kernel takes inv_norm as its scale
    assert ops.count("Attention") == 1 and ops.count("MatMul") == 1
    assert "Softmax" not in ops
    (kernel,) = [node for node in out.graph.node if node.op_type == "Attention"]
    (scale,) = [a.f for a in kernel.attribute if a.name == "scale"]
    assert scale == pytest.approx(1 / np.sqrt(d))
    feeds = _feeds(model)
    np.testing.assert_allclose(_ort(out, feeds), _ort(model, feeds), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("why", "kwargs"),
    [
        ("a mask that can be -inf", {"fill": -np.inf}),
        ("an ALiBi bias nothing bounds", {"alibi": "input"}),
        ("the scores split into half rows, not heads", {"rows": 2}),
        ("a softmax over another axis", {"softmax_axis": 2}),
    ],
)
def test_near_misses_stay_unfused(why: str, kwargs: dict[str, Any]) -> None:
    model = _bloom_model(2, 2, 8, 8, **kwargs)
    result = optimize(ronnx.load(model), Options(rules=RULES, verify=False))
    assert "attention" not in result.graph.op_counts(), why
    out = ronnx.to_model(result.graph, like=model)
    feeds = _feeds(model)
    np.testing.assert_allclose(_ort(out, feeds), _ort(model, feeds), rtol=1e-4, atol=1e-5)
