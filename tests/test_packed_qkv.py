"""GPT-2's attention: one packed projection (``c_attn``: x @ W [E, 3E] + b), split in three,
the heads of each, and SDPA; rules/transformer.rules' ``attention-packed-split`` (one Split in
three) and ``attention-packed-slices`` (three Slices), each with an ``-unbiased`` twin for a
projection written without its bias, rewrite it to one com.microsoft Attention over the packed
weight and bias (relsat's ``mha``).

The graphs are written with onnx.helper in the spellings torch 2.13 writes for
transformers' GPT2Model: the legacy exporter (opset 17) flattens x for a Gemm with its bias,
splits with a ``split`` input and transposes the keys (0, 2, 3, 1); the dynamo exporter (opset
20) drops a bias it knows is zero, splits with ``num_outputs`` and transposes the keys through a
3-D reshape. torch 2.13 writes Split with both; the Slices are written here as another exporter
may. Analytic prices; each graph written is run in onnxruntime against the original.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from relsat import Options, optimize
from relsat import onnx as ronnx

pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(0)
FMIN = float(np.finfo(np.float32).min)
B, S = 1, 12
n = helper.make_node
f32 = np.float32


def gpt2_attention(
    heads: int,
    width: int,
    *,
    dynamo: bool,
    sizes: tuple[int, int, int] | None = None,
    axis: int = 2,
    order: tuple[int, int, int] = (0, 1, 2),
    causal: bool = True,
    slices: bool = False,
) -> onnx.ModelProto:
    """One GPT-2 attention block of ``heads`` heads over ``x [B, S, width]``. Near misses:
    ``sizes`` the split's pieces (default thirds of the last axis), ``axis`` the axis split (1:
    the tokens, in three runs of S/3), ``order`` which piece is q, k, v; ``causal`` False: the
    padding mask alone; ``slices``: three Slices instead of one Split."""
    sizes = sizes or ((width,) * 3 if axis == 2 else (S // 3,) * 3)
    packed = sum(sizes) if axis == 2 else 3 * width
    t = S if axis == 2 else S // 3  # tokens each piece holds
    dims = [  # each piece's head split ([B, t, H, d]; a wider piece: wider heads)
        [B, t, heads, (sizes[i] if axis == 2 else 3 * width) // heads] for i in range(3)
    ]
    consts: dict[str, np.ndarray] = {
        "w": (RNG.standard_normal((width, packed)) / np.sqrt(width)).astype(f32),
        "b": RNG.standard_normal(packed).astype(f32),
        "flat": np.array([B * S, width], np.int64),
        "unflat": np.array([B, S, packed], np.int64),
        "sizes": np.array(sizes, np.int64),
        "root": np.array([f32(dims[0][3] ** -0.25)]),
        "zero": f32(0),
        "fmin": f32(FMIN),
        "keep4": np.array([B, 1, 1, t], np.int64),
        "causal": np.tril(np.ones((t, t), bool))[None, None]
        if causal
        else np.ones((1, 1, t, t), bool),
        "merged": np.array([B, t, dims[order[2]][3] * heads], np.int64),
    }
    nodes = [n("Reshape", ["x", "flat"], ["x2"])]
    if dynamo:  # the exporter knows the (random init's) bias is zero and leaves it out
        consts["b"] = np.zeros(packed, f32)
        nodes.append(n("Gemm", ["x2", "w"], ["qkv2"]))
    else:
        nodes.append(n("Gemm", ["x2", "w", "b"], ["qkv2"]))
    nodes.append(n("Reshape", ["qkv2", "unflat"], ["qkv"]))
    pieces = ["p0", "p1", "p2"]
    if slices:  # three Slices of the axis, [0, a), [a, a + b), [a + b, a + b + c)
        bounds = np.cumsum([0, *sizes])
        for i, piece in enumerate(pieces):
            for key, value in (("start", bounds[i]), ("end", bounds[i + 1]), ("axis", axis)):
                consts[f"{key}{i}"] = np.array([value], np.int64)
            nodes.append(n("Slice", ["qkv", f"start{i}", f"end{i}", f"axis{i}"], [piece]))
    elif dynamo and len(set(sizes)) == 1:
        nodes.append(n("Split", ["qkv"], pieces, axis=axis, num_outputs=3))
    else:
        nodes.append(n("Split", ["qkv", "sizes"], pieces, axis=axis))
    q, k, v = (pieces[i] for i in order)
    for name, piece, i in (("q", q, order[0]), ("k", k, order[1]), ("v", v, order[2])):
        consts[f"{name}_heads"] = np.array(dims[i], np.int64)
        nodes.append(n("Reshape", [piece, f"{name}_heads"], [f"{name}_h"]))
    nodes += [
        n("Transpose", ["q_h"], ["q_t"], perm=[0, 2, 1, 3]),
        n("Transpose", ["v_h"], ["v_t"], perm=[0, 2, 1, 3]),
    ]
    dk = dims[order[1]][3]
    if dynamo:  # SDPA's k.transpose(-2, -1) through 3-D
        consts["flat3"] = np.array([-1, t, dk], np.int64)
        consts["kt_shape"] = np.array([B, heads, dk, t], np.int64)
        nodes += [
            n("Transpose", ["k_h"], ["k_t"], perm=[0, 2, 1, 3]),
            n("Reshape", ["k_t", "flat3"], ["k3"]),
            n("Transpose", ["k3"], ["k3t"], perm=[0, 2, 1]),
            n("Reshape", ["k3t", "kt_shape"], ["kt"]),
        ]
    else:
        nodes.append(n("Transpose", ["k_h"], ["kt"], perm=[0, 2, 3, 1]))
    nodes += [  # transformers' mask: the padding mask and the causal one, additive
        n("Cast", ["keep"], ["keep_b"], to=TensorProto.BOOL),
        n("Reshape", ["keep_b", "keep4"], ["keep_4"]),
        n("And", ["causal", "keep_4"], ["allowed"]),
        n("Where", ["allowed", "zero", "fmin"], ["mask"]),
        n("Mul", ["q_t", "root"], ["q_s"]),
        n("Mul", ["kt", "root"], ["kt_s"]),
        n("MatMul", ["q_s", "kt_s"], ["scores"]),
        n("Add", ["scores", "mask"], ["masked"]),
        n("Softmax", ["masked"], ["probs"], axis=-1),
        n("IsNaN", ["probs"], ["nan"]),
        n("Where", ["nan", "zero", "probs"], ["safe"]),
        n("MatMul", ["safe", "v_t"], ["ctx"]),
        n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx_t", "merged"], ["y"]),
    ]
    ins = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, width]),
        helper.make_tensor_value_info("keep", TensorProto.INT64, [B, t]),
    ]
    out_width = int(consts["merged"][2])
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, t, out_width])]
    arrays = [numpy_helper.from_array(np.asarray(a), k) for k, a in consts.items()]
    graph = helper.make_graph(nodes, "gpt2_attention", ins, outs, arrays)
    opset = helper.make_opsetid("", 20 if dynamo else 17)
    return helper.make_model(graph, opset_imports=[opset], ir_version=9)


def _optimized(model: onnx.ModelProto) -> tuple[dict[str, int], onnx.ModelProto, dict[str, int]]:
    """The extracted graph's op counts, the model written, and the packing rules' applications
    (rule -> times applied)."""
    result = optimize(ronnx.load(model), Options(cost_model="analytic", timing=None))
    applied = result.db.execute(
        "SELECT rule, sum(applied) FROM rule_stats WHERE rule LIKE 'attention-packed%' "
        "GROUP BY rule"
    )
    counts = dict(result.graph.op_counts())
    return counts, ronnx.to_model(result.graph, like=model), {r: int(a) for r, a in applied}


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, feeds)[0])


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    x, keep = model.graph.input
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    mask = np.ones([d.dim_value for d in keep.type.tensor_type.shape.dim], np.int64)
    mask[:, :2] = 0  # the first keys padded: the first query rows masked entirely (causal)
    return {"x": RNG.standard_normal(shape).astype(f32), "keep": mask}


def _same_outputs(model: onnx.ModelProto, out: onnx.ModelProto) -> None:
    feeds = _feeds(model)
    np.testing.assert_allclose(_run(out, feeds), _run(model, feeds), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("heads", "width"), [(2, 32), (4, 64), (3, 48), (8, 64)])
@pytest.mark.parametrize("cut", ["split", "slices"])
@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_packed_qkv_attention_becomes_one_attention(
    heads: int, width: int, cut: str, dynamo: bool
) -> None:
    model = gpt2_attention(heads, width, dynamo=dynamo, slices=cut == "slices")
    counts, out, applied = _optimized(model)
    rule = f"attention-packed-{cut}" + ("-unbiased" if dynamo else "")
    assert applied == {rule: 1}, applied
    _same_outputs(model, out)
    if dynamo:  # the fused kernel and its pieces price the same by the roofline (the zero
        return  # bias is an initializer): extraction keeps the input's (measured prices decide)
    assert counts.get("mha") == 1, counts
    assert not {"split", "attention", "softmax"} & set(counts), counts
    written = [(x.op_type, x.domain) for x in out.graph.node]
    assert ("Attention", "com.microsoft") in written
    assert not {("Split", ""), ("Slice", "")} & set(written)
    (att,) = (x for x in out.graph.node if x.op_type == "Attention")
    assert {a.name: a.i for a in att.attribute}["num_heads"] == heads
    w = {i.name: list(i.dims) for i in out.graph.initializer}[att.input[1]]
    assert w == [width, 3 * width]  # the packed weight as it is


def test_a_padding_mask_without_the_causal_one_fuses_too() -> None:
    # the rule passes the additive mask on as the kernel's attention bias: causal or not
    model = gpt2_attention(4, 32, dynamo=False, causal=False)
    counts, out, _ = _optimized(model)
    assert counts.get("mha") == 1, counts
    _same_outputs(model, out)


@pytest.mark.parametrize(
    ("why", "kwargs"),
    [
        ("unequal pieces (v's heads wider)", {"sizes": (32, 32, 48)}),
        ("the tokens split, not the features", {"axis": 1}),
        ("q and k taken in the other order", {"order": (1, 0, 2)}),
        ("v first", {"order": (2, 1, 0)}),
        ("three Slices, unequal", {"sizes": (32, 32, 48), "slices": True}),
        ("three Slices, k and v swapped", {"order": (0, 2, 1), "slices": True}),
        ("three Slices of the tokens", {"axis": 1, "slices": True}),
    ],
)
@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_near_misses_stay_unpacked(why: str, kwargs: dict, dynamo: bool) -> None:
    model = gpt2_attention(4, 32, dynamo=dynamo, **kwargs)
    counts, out, applied = _optimized(model)
    assert not applied and "mha" not in counts, why
    _same_outputs(model, out)
