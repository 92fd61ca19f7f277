"""Exporter variants: the legacy (TorchScript, opset 17) and the dynamo (opset 20) spelling of
each transformer piece reach the same fused graph, with analytic prices.

The spellings are those torch 2.13 and transformers 5 write (read off exports of small modules
and of BertModel / GPT2Model with both exporters): GELU spelled out (legacy) or the opset-20
Gelu op (dynamo); LayerNormalization with or without stash_type; a Linear as MatMul + Add with
the bias first (legacy) or second (dynamo); SDPA's keys as Transpose(0, 2, 3, 1) (legacy) or
Reshape/Transpose/Reshape (dynamo); transformers' boolean mask turned additive by
Where(mask, 0, finfo.min) after Expand (legacy) or straight from the And (dynamo); eager
attention (no NaN guard) scaling the scores after their product.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from relsat import Options, Result, optimize
from relsat import onnx as ronnx

pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(0)
B, S, E = 1, 16, 32
FUSED = (
    "attention",
    "mha",
    "gelu",
    "gelu_tanh",
    "biasgelu",
    "biasgelu_tanh",
    "layernorm",
    "skiplayernorm",
    "softmax",
)
FMIN = float(np.finfo(np.float32).min)
FILL = -1e9  # a finite fill eager attention's mask may use (-10000 in older transformers)
n = helper.make_node


def _model(nodes, inputs, inits, opset, out=(B, S, E)) -> onnx.ModelProto:  # type: ignore[no-untyped-def]
    ins = [helper.make_tensor_value_info(k, t, s) for k, t, s in inputs]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out))]
    arrays = [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()]
    graph = helper.make_graph(nodes, "g", ins, outs, arrays)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


X = [("x", TensorProto.FLOAT, [B, S, E])]
f32 = np.float32


def _fused(model: onnx.ModelProto) -> dict[str, int]:
    return _fused_in(optimize(ronnx.load(model), Options(cost_model="analytic", timing=None)))


def _fused_in(result: Result) -> dict[str, int]:
    counts = result.graph.op_counts()
    return {op: counts[op] for op in FUSED if counts.get(op)}


# --- GELU, LayerNorm, bias + GELU, skip + LayerNorm -----------------------------------------


def gelu_erf(dynamo: bool, x: str = "x", out: str = "y") -> list[onnx.NodeProto]:
    if dynamo:  # opset 20: the op
        return [n("Gelu", [x], [out], approximate="none")]
    return [
        n("Div", [x, "sqrt2"], ["g_div"]),
        n("Erf", ["g_div"], ["g_erf"]),
        n("Add", ["g_erf", "one"], ["g_add"]),
        n("Mul", [x, "g_add"], ["g_mul"]),
        n("Mul", ["g_mul", "half"], [out]),
    ]


GELU_CONSTS = {"sqrt2": f32(math.sqrt(2)), "one": f32(1), "half": f32(0.5)}


def gelu_tanh_nodes(dynamo: bool, x: str = "x", out: str = "y") -> list[onnx.NodeProto]:
    if dynamo:
        return [n("Gelu", [x], [out], approximate="tanh")]
    return [  # torch's legacy export of gelu(approximate="tanh"): constants first
        n("Mul", [x, x], ["sq"]),
        n("Mul", [x, "sq"], ["cube"]),
        n("Mul", ["c", "cube"], ["cc"]),
        n("Add", [x, "cc"], ["inner"]),
        n("Mul", ["k", "inner"], ["arg"]),
        n("Tanh", ["arg"], ["t"]),
        n("Add", ["one", "t"], ["t1"]),
        n("Mul", [x, "t1"], ["xt"]),
        n("Mul", ["half", "xt"], [out]),
    ]


TANH_CONSTS = {
    "c": f32(0.044715),
    "k": f32(math.sqrt(2 / math.pi)),
    "one": f32(1),
    "half": f32(0.5),
}


def gelu_tanh(dynamo: bool) -> onnx.ModelProto:
    return _model(gelu_tanh_nodes(dynamo), X, {} if dynamo else TANH_CONSTS, 20 if dynamo else 17)


def layernorm(dynamo: bool, x: str = "x") -> onnx.NodeProto:
    if dynamo:
        return n("LayerNormalization", [x, "g", "b"], ["y"], axis=-1, epsilon=1e-12, stash_type=1)
    return n("LayerNormalization", [x, "g", "b"], ["y"], axis=-1, epsilon=1e-12)


LN = {"g": RNG.uniform(0.5, 1.5, E).astype(f32), "b": RNG.standard_normal(E).astype(f32)}


def biasgelu(dynamo: bool) -> onnx.ModelProto:
    w, bias = RNG.standard_normal((E, 4 * E)).astype(f32), RNG.standard_normal(4 * E).astype(f32)
    linear = [n("MatMul", ["x", "w"], ["mm"])]
    linear.append(n("Add", ["mm", "bias"] if dynamo else ["bias", "mm"], ["lin"]))
    consts = {"w": w, "bias": bias, **({} if dynamo else GELU_CONSTS)}
    return _model(linear + gelu_erf(dynamo, "lin"), X, consts, 20 if dynamo else 17, (B, S, 4 * E))


def biasgelu_tanh(dynamo: bool) -> onnx.ModelProto:
    """GPT-2's MLP: a projection with its bias, then the tanh GELU."""
    w, bias = RNG.standard_normal((E, 4 * E)).astype(f32), RNG.standard_normal(4 * E).astype(f32)
    linear = [n("MatMul", ["x", "w"], ["mm"])]
    linear.append(n("Add", ["mm", "bias"] if dynamo else ["bias", "mm"], ["lin"]))
    consts = {"w": w, "bias": bias, **({} if dynamo else TANH_CONSTS)}
    nodes = linear + gelu_tanh_nodes(dynamo, "lin")
    return _model(nodes, X, consts, 20 if dynamo else 17, (B, S, 4 * E))


def skiplayernorm(dynamo: bool) -> onnx.ModelProto:
    nodes = [n("Add", ["x", "r"], ["sum"]), layernorm(dynamo, "sum")]
    return _model(nodes, [*X, ("r", TensorProto.FLOAT, [B, S, E])], LN, 18 if dynamo else 17)


PAIRS: dict[str, tuple[Callable[[bool], onnx.ModelProto], dict[str, int]]] = {
    "gelu-erf": (
        lambda d: _model(gelu_erf(d), X, {} if d else GELU_CONSTS, 20 if d else 17),
        {"gelu": 1},
    ),
    "gelu-tanh": (gelu_tanh, {"gelu_tanh": 1}),
    "layernorm": (lambda d: _model([layernorm(d)], X, LN, 18 if d else 17), {"layernorm": 1}),
    "bias-gelu": (biasgelu, {"biasgelu": 1}),  # the bias folded into the Gemm, then into Gelu
    "bias-gelu-tanh": (biasgelu_tanh, {"biasgelu_tanh": 1}),  # into FastGelu
    "skip-layernorm": (skiplayernorm, {"skiplayernorm": 1}),
}


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_both_exporters_reach_the_same_fused_graph(pair: str) -> None:
    build, want = PAIRS[pair]
    legacy, dynamo = _fused(build(False)), _fused(build(True))
    assert legacy == dynamo == want


# --- attention ------------------------------------------------------------------------------

D = 16  # head size 16: SDPA's root scale 0.5 on q and kt


def attention(
    dynamo: bool,
    *,
    mask: str | None,
    guard: bool = True,
    eager: bool = False,
    fill: float = FILL,
    d: int = D,
) -> onnx.ModelProto:
    """One attention block: projections, head split, keys transposed, scores (SDPA: q and kt
    scaled by d^-1/4; eager: the product scaled by d^-1/2), the mask (None; "bool": an input
    ``keep`` [B, S] turned into transformers' additive mask; "float": a float input), softmax,
    torch's NaN guard (SDPA with a mask), the product with v, heads merged."""
    h, e = 2, 2 * d  # two heads
    nodes = []
    for x in "qkv":
        nodes += [
            n("MatMul", ["x", f"w{x}"], [f"{x}_mm"]),
            n("Add", [f"{x}_mm", f"b{x}"] if dynamo else [f"b{x}", f"{x}_mm"], [f"{x}_p"]),
            n("Reshape", [f"{x}_p", "heads"], [f"{x}_h"]),
        ]
        if x != "k" or dynamo or eager:
            nodes.append(n("Transpose", [f"{x}_h"], [f"{x}_t"], perm=[0, 2, 1, 3]))
    if eager:  # transformers' eager_attention_forward: key.transpose(2, 3)
        nodes.append(n("Transpose", ["k_h"], ["kt"], perm=[0, 2, 3, 1]))
    elif dynamo:  # SDPA's k.transpose(-2, -1) through 3-D
        nodes += [
            n("Reshape", ["k_t", "flat3"], ["k3"]),
            n("Transpose", ["k3"], ["k3t"], perm=[0, 2, 1]),
            n("Reshape", ["k3t", "kt_shape"], ["kt"]),
        ]
    else:
        nodes.append(n("Transpose", ["k_h"], ["kt"], perm=[0, 2, 3, 1]))
    if eager:
        nodes += [n("MatMul", ["q_t", "kt"], ["qk"]), n("Mul", ["qk", "scale"], ["scores"])]
    else:
        nodes += [
            n("Mul", ["q_t", "root"], ["q_s"]),
            n("Mul", ["kt", "root"], ["kt_s"]),
            n("MatMul", ["q_s", "kt_s"], ["scores"]),
        ]
    inputs = [("x", TensorProto.FLOAT, [B, S, e])]
    logits = "scores"
    if mask == "bool":
        inputs.append(("keep", TensorProto.INT64, [B, S]))
        nodes += [
            n("Cast", ["keep"], ["keep_b"], to=TensorProto.BOOL),
            n("Reshape", ["keep_b", "mask4"], ["keep4"]),
            n("And", ["causal_ok", "keep4"], ["allowed"]),
        ]
        if not dynamo:
            nodes.append(n("Expand", ["allowed", "mask_shape"], ["allowed_x"]))
        nodes.append(n("Where", ["allowed" if dynamo else "allowed_x", "zero", "fill"], ["bias"]))
    elif mask == "float":
        inputs.append(("bias", TensorProto.FLOAT, [1, 1, S, S]))
    if mask:
        nodes.append(n("Add", ["scores", "bias"], ["masked"]))
        logits = "masked"
    nodes.append(n("Softmax", [logits], ["probs"], axis=-1))
    probs = "probs"
    if guard and mask and not eager:
        nodes += [n("IsNaN", ["probs"], ["nan"]), n("Where", ["nan", "zero", "probs"], ["safe"])]
        probs = "safe"
    nodes += [
        n("MatMul", [probs, "v_t"], ["ctx"]),
        n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx_t", "merged"], ["y"]),
    ]
    consts: dict[str, np.ndarray] = {}
    for x in "qkv":
        consts[f"w{x}"] = RNG.standard_normal((e, e)).astype(f32) / math.sqrt(e)
        consts[f"b{x}"] = RNG.standard_normal(e).astype(f32)
    consts |= {
        "heads": np.array([B, S, h, d], np.int64),
        "merged": np.array([B, S, e], np.int64),
        "flat3": np.array([-1, S, d], np.int64),
        "kt_shape": np.array([B, h, d, S], np.int64),
        "root": np.array([f32(d**-0.25)]),
        "scale": f32(d**-0.5),
        "zero": f32(0),
        "fill": f32(fill),
        "mask4": np.array([B, 1, 1, S], np.int64),
        "mask_shape": np.array([B, 1, S, S], np.int64),
        "causal_ok": np.ones((1, 1, S, 1), bool),
    }
    return _model(nodes, inputs, consts, 20 if dynamo else 17, (B, S, e))


@cache
def _attention_optimized(
    dynamo: bool, mask: str | None, eager: bool, d: int
) -> tuple[onnx.ModelProto, Result]:
    """An attention block and relsat's result on it (analytic prices), once per block: the
    tests below only read them."""
    model = attention(dynamo, mask=mask, eager=eager, d=d)
    return model, optimize(ronnx.load(model), Options(cost_model="analytic", timing=None))


@pytest.mark.parametrize(
    "kind",
    ["sdpa-unmasked", "sdpa-masked", "eager-masked"],
)
def test_attention_both_exporters_fuse(kind: str) -> None:
    masked, eager = kind.endswith("-masked"), kind.startswith("eager")
    d = 64 if eager else D  # eager's scale literal: head size 64 (BERT, GPT-2)
    legacy, dynamo = (
        _fused_in(_attention_optimized(dyn, "bool" if masked else None, eager, d)[1])
        for dyn in (False, True)
    )
    # the analytic prices favour packing it with its q, k, v projections (attention-packed)
    assert legacy == dynamo == {"mha": 1}


def test_attention_runs_in_onnxruntime_with_a_padded_mask() -> None:
    model, result = _attention_optimized(True, "bool", True, 64)  # eager-masked's dynamo result
    out = ronnx.to_model(result.graph, like=model)
    assert "Attention" in {x.op_type for x in out.graph.node}
    keep = np.ones((B, S), np.int64)
    keep[:, -5:] = 0
    feeds = {"x": RNG.standard_normal((B, S, 128)).astype(f32), "keep": keep}
    want, got = (_ort(m, feeds) for m in (model, out))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    keep[:] = 0  # every key padded: Where(.., -1e9) keeps the row finite, both agree
    want, got = (_ort(m, feeds) for m in (model, out))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_eager_attention_with_transformers_lowest_float_fill_fuses(dynamo: bool) -> None:
    """transformers 5 fills an eager attention's mask with float32's lowest, which onnxruntime's
    Attention reads as -inf (a row masked entirely would come out 0, not the softmax's mean of
    v): finite, so fused, and written with the mask nudged off the lowest value; both agree
    with every key padded."""
    model = attention(dynamo, mask="bool", eager=True, d=64, fill=FMIN)
    result = optimize(ronnx.load(model), Options(cost_model="analytic", timing=None))
    counts = result.graph.op_counts()
    assert counts.get("attention", 0) + counts.get("mha", 0) == 1
    out = ronnx.to_model(result.graph, like=model)
    assert "Attention" in {x.op_type for x in out.graph.node}
    keep = np.ones((B, S), np.int64)
    keep[:, -5:] = 0
    feeds = {"x": RNG.standard_normal((B, S, 128)).astype(f32), "keep": keep}
    for _ in range(2):
        want, got = (_ort(m, feeds) for m in (model, out))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        keep[:] = 0  # then every key padded: each row the mean of v, as the softmax gives


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, feeds)[0])


def test_eager_attention_near_misses_stay_unfused() -> None:
    cases = {
        "a float mask input: values unknown": attention(True, mask="float", eager=True, d=64),
        "a -inf fill": attention(True, mask="bool", eager=True, d=64, fill=-np.inf),
        "SDPA's masked softmax without its guard": attention(False, mask="float", guard=False),
    }
    for why, model in cases.items():
        result = optimize(ronnx.load(model), Options(cost_model="analytic", timing=None))
        assert not {"attention", "mha"} & set(result.graph.op_counts()), why
        assert "same" not in ronnx.load(model).op_counts(), why
