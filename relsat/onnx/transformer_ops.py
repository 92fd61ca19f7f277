"""Transformer operators between ONNX and relsat: the element-wise pieces exporters spell LayerNorm
and GELU with, and the fused kernels onnxruntime runs them as.

Import (:data:`HANDLERS` for the default domain, :data:`CONTRIB_HANDLERS` for ``com.microsoft``):
Sub/Div/Pow/Sqrt/Erf, ReduceMean over the last axis with ``keepdims=1``, Softmax over the last axis,
LayerNormalization over the last axis with a ``[N]`` scale and bias (and only its first output
read), Gelu (opset 20); ``com.microsoft`` Gelu, FastGelu (its optional bias: ``biasgelu_tanh``),
BiasGelu and SkipLayerNormalization. Add and Mul read a one-element float constant as a ``scalar``
(placed second: a rule then needs one operand order only). ``Where`` and ``IsNaN`` stay opaque:
torch's guard after the softmax of a masked attention, ``Where(IsNaN(x), 0, x)``, is ``nanzero(x)``
by a rule (rules/transformer.rules, nanzero-guard); ONNX Attention (opset 23, 4-D Q/K/V, a
float mask or none, no causal flag, softcap, cache or extra outputs) is ``attention`` with the keys
transposed. Anything that almost matches — another axis, ``keepdims=0``, a scale of shape
``[1, N]``, extra outputs read — stays opaque.

Export (:func:`emit`): LayerNormalization at opset >= 17 (spelled out with ReduceMean/Sub/Pow/
Sqrt/Div below), Softmax on the last axis, and the ``com.microsoft`` contrib ops onnxruntime
provides kernels for: Gelu, FastGelu (with or without its bias), BiasGelu, SkipLayerNormalization
(the model then declares that domain, version 1). ``attention`` is ONNX Attention (opset 23), which
onnxruntime's CPU provider runs as one kernel: the exporter writes the model at opset 23 when the
graph holds one and its opaque nodes mean the same there; otherwise it spells attention out
(MatMul/Mul/Add/Softmax/IsNaN/Where/MatMul) at the model's opset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from onnx import NodeProto

from relsat.graph.builder import Tensor
from relsat.graph.graph import Node, Ref
from relsat.onnx import masks
from relsat.onnx.context import ExportContext, Handler, ImportContext, Unmapped

__all__ = [
    "ATTENTION_OPSET",
    "CONTRIB",
    "CONTRIB_HANDLERS",
    "EXPORTED",
    "FUSED",
    "HANDLERS",
    "emit",
]

#: The domain of onnxruntime's contrib operators.
CONTRIB = "com.microsoft"
#: The float32 just below 1: an exported attention mask is scaled by it (see ``_attention_out``).
MASK_NUDGE = np.float32(1) - np.float32(2**-24)
#: The first opset with the standard Attention operator.
ATTENTION_OPSET = 23

# ---------------------------------------------------------------------------------------------
# Import


def _scalar_of(imp: ImportContext, name: str, other: Tensor | None) -> Tensor | None:
    """A one-element float32 constant as a relsat ``scalar`` (rank 0), when reading it as one
    does not change the result's shape (its rank is at most the other operand's)."""
    value = imp.const(name)
    if value is None or value.size != 1 or not imp.is_float(name) or value.dtype != np.float32:
        return None
    if other is None or value.ndim > other.rank:
        return None
    number = float(value.reshape(-1)[0])
    return imp.scalar(number) if np.isfinite(number) else None


def _operands(imp: ImportContext, node: NodeProto) -> tuple[Tensor, Tensor]:
    """Both operands of a binary op, a one-element constant beside a tensor as a ``scalar``."""
    first, second = node.input[0], node.input[1]
    a_const, b_const = imp.const(first), imp.const(second)
    if (a_const is None) == (b_const is None):  # two tensors, or two constants
        return imp.tensor(first), imp.tensor(second)
    if b_const is not None:
        x = imp.tensor(first)
        return x, _scalar_of(imp, second, x) or imp.tensor(second)
    y = imp.tensor(second)
    return _scalar_of(imp, first, y) or imp.tensor(first), y


def _binary(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    x, y = _operands(imp, node)
    op = node.op_type
    if op in ("Add", "Mul") and x.rank == 0 and y.rank > 0:
        x, y = y, x  # commutative: the scalar second, the one order the rules spell
    make = {
        "Add": imp.g.add,
        "Mul": imp.g.mul,
        "Sub": imp.g.sub,
        "Div": imp.g.div,
        "Pow": imp.g.pow,
    }[op]
    return {node.output[0]: make(x, y, name=node.output[0])}


def _unary(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    make = {"Sqrt": imp.g.sqrt, "Erf": imp.g.erf}[node.op_type]
    return {node.output[0]: make(imp.tensor(node.input[0]), name=node.output[0])}


def _is_last(axis: int, rank: int) -> bool:
    return rank >= 1 and -rank <= axis < rank and axis % rank == rank - 1


def _reducemean(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    x = imp.tensor(node.input[0])
    if not a.get("keepdims", 1) or a.get("noop_with_empty_axes", 0):
        raise Unmapped
    if len(node.input) > 1 and node.input[1]:  # opset 18: axes is an input
        axes_value = imp.const(node.input[1])
        if axes_value is None:
            raise Unmapped
        axes = [int(v) for v in axes_value.reshape(-1)]
    else:
        axes = list(a.get("axes", []))
    if not axes and x.rank == 1:
        axes = [0]
    if len(axes) != 1 or not _is_last(axes[0], x.rank):
        raise Unmapped
    return {node.output[0]: imp.g.reducemean(x, name=node.output[0])}


def _softmax(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    x = imp.tensor(node.input[0])
    # Before opset 13 Softmax flattens from `axis` on (default 1): the same op on the last axis.
    axis = a.get("axis", -1 if imp.opset >= 13 else 1)
    if not _is_last(axis, x.rank):
        raise Unmapped
    return {node.output[0]: imp.g.softmax(x, name=node.output[0])}


def _vector(imp: ImportContext, node: NodeProto, i: int, n: int, *, zeros: bool = False) -> Tensor:
    """Input ``i`` of ``node`` as a ``[n]`` tensor (a zero weight when absent and ``zeros``)."""
    name = node.input[i] if len(node.input) > i else ""
    if not name:
        if not zeros:
            raise Unmapped
        key = f"{node.output[0]}_zero_bias"
        return imp.derived_weight(key, "1d", lambda: np.zeros(n, dtype=np.float32))
    t = imp.tensor(name)
    if t.shape != (n,):
        raise Unmapped
    return t


def _extra_outputs_read(imp: ImportContext, node: NodeProto) -> bool:
    return any(o and imp.readers(o) for o in node.output[1:])


def _layernorm(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    x = imp.tensor(node.input[0])
    if not _is_last(a.get("axis", -1), x.rank) or _extra_outputs_read(imp, node):
        raise Unmapped
    if a.get("stash_type", 1) != 1:
        raise Unmapped
    n = x.shape[-1]
    scale, bias = _vector(imp, node, 1, n), _vector(imp, node, 2, n, zeros=True)
    eps = float(a.get("epsilon", 1e-5))
    return {node.output[0]: imp.g.layernorm(x, scale, bias, eps, name=node.output[0])}


def _gelu(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    approximate = a.get("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise Unmapped
    x = imp.tensor(node.input[0])
    return {node.output[0]: imp.g.gelu(x, approximate, name=node.output[0])}


def _fast_gelu(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    """com.microsoft FastGelu: ``gelu_tanh``, with its optional bias ``biasgelu_tanh``."""
    x = imp.tensor(node.input[0])
    if len(node.input) > 1 and node.input[1]:
        bias = _vector(imp, node, 1, x.shape[-1])
        return {node.output[0]: imp.g.biasgelu(x, bias, "tanh", name=node.output[0])}
    return {node.output[0]: imp.g.gelu(x, "tanh", name=node.output[0])}


def _bias_gelu(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    x = imp.tensor(node.input[0])
    bias = _vector(imp, node, 1, x.shape[-1])
    return {node.output[0]: imp.g.biasgelu(x, bias, name=node.output[0])}


def _quick_gelu(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    """com.microsoft QuickGelu: ``x * sigmoid(alpha * x)`` (alpha 1.702 unless given)."""
    x = imp.tensor(node.input[0])
    alpha = float(a.get("alpha", 1.702))
    return {node.output[0]: imp.g.quickgelu(x, alpha, name=node.output[0])}


def _skip_layernorm(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    """SkipLayerNormalization: ``layernorm(x + skip [+ bias])`` as one fused op; when its fourth
    output (the sum, which onnxruntime's optimizer emits for a pre-norm model's next residual) is
    read, as the add and a layernorm (the rules may fuse them again where the sum is not needed
    elsewhere). The mean and inverse-std outputs read: opaque."""
    x, skip = imp.tensor(node.input[0]), imp.tensor(node.input[1])
    outs = [*node.output, "", "", ""][:4]
    if any(o and imp.readers(o) for o in outs[1:3]) or skip.shape != x.shape:
        raise Unmapped
    if x.rank not in (2, 3):  # onnxruntime runs no other rank: the op refuses it
        raise Unmapped
    n = x.shape[-1]
    scale, bias = _vector(imp, node, 2, n), _vector(imp, node, 3, n, zeros=True)
    if len(node.input) > 4 and node.input[4]:
        x = imp.g.add(x, _vector(imp, node, 4, n))
    eps = float(a.get("epsilon", 1e-12))  # onnxruntime's default for this op
    if outs[3] and imp.readers(outs[3]):
        total = imp.g.add(x, skip, name=outs[3])
        return {outs[0]: imp.g.layernorm(total, scale, bias, eps, name=outs[0]), outs[3]: total}
    packed = imp.g.concat(0, [scale, bias])
    return {outs[0]: imp.g.skiplayernorm(x, skip, packed, eps, name=outs[0])}


def _attention(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    """ONNX Attention (opset 23) on 4-D Q/K/V with a float additive mask (or none)."""
    ins = [*node.input, "", "", ""][:6]
    if any(ins[4:]) or _extra_outputs_read(imp, node) or not ins[2]:
        raise Unmapped  # a KV cache, or present_key / qk output read
    if a.get("is_causal", 0) or a.get("softcap", 0.0) or a.get("qk_matmul_output_mode", 0):
        raise Unmapped
    q, key, v = (imp.tensor(n) for n in ins[:3])
    if q.rank != 4 or key.rank != 4 or v.rank != 4 or key.shape[1] != q.shape[1]:
        raise Unmapped  # 3-D packed heads, or grouped-query attention
    s, t = q.shape[2], key.shape[2]
    if ins[3]:
        if not imp.is_float(ins[3]):
            raise Unmapped  # a boolean mask
        bias = imp.tensor(ins[3])
        if bias.rank < 2 or bias.shape[-2:] != (s, t):
            raise Unmapped
    else:
        bias = imp.g.scalar(0.0)
    scale = float(a.get("scale", 1.0 / np.sqrt(q.shape[3])))
    kt = imp.g.transpose(key, (0, 1, 3, 2))
    return {node.output[0]: imp.g.attention(q, kt, v, bias, scale, name=node.output[0])}


#: Default-domain ONNX op_type → handler (Add and Mul replace the plain ones: scalars).
HANDLERS: dict[str, Handler] = {
    "Add": _binary,
    "Mul": _binary,
    "Sub": _binary,
    "Div": _binary,
    "Pow": _binary,
    "Sqrt": _unary,
    "Erf": _unary,
    "ReduceMean": _reducemean,
    "Softmax": _softmax,
    "LayerNormalization": _layernorm,
    "Gelu": _gelu,
    "Attention": _attention,
}

#: ``com.microsoft`` op_type → handler.
CONTRIB_HANDLERS: dict[str, Handler] = {
    "Gelu": _gelu,
    "FastGelu": _fast_gelu,
    "BiasGelu": _bias_gelu,
    "QuickGelu": _quick_gelu,
    "SkipLayerNormalization": _skip_layernorm,
}


# ---------------------------------------------------------------------------------------------
# Export

_SIMPLE = {"ewsub": "Sub", "ewdiv": "Div", "ewpow": "Pow", "sqrt": "Sqrt", "erf": "Erf"}
_CONTRIB_OPS = {
    "gelu": "Gelu",
    "gelu_tanh": "FastGelu",
    "biasgelu": "BiasGelu",
    "biasgelu_tanh": "FastGelu",  # with its optional bias, the second input
}
#: The relsat ops :func:`emit` writes as one fused onnxruntime kernel, with that kernel's ONNX
#: operator (``com.microsoft`` contrib ops; LayerNormalization and Attention of the default
#: domain, spelled out below their opsets): what :func:`emit` reads the operator's name from.
FUSED = {
    **_CONTRIB_OPS,
    "quickgelu": "QuickGelu",
    "skiplayernorm": "SkipLayerNormalization",
    "layernorm": "LayerNormalization",
    "attention": "Attention",
    "gqa": "Attention",
    "mha": "Attention",
}
#: The relsat ops :func:`emit` writes.
EXPORTED = frozenset({*_SIMPLE, *FUSED, "reducemean", "softmax", "nanzero"})


def emit(
    ex: ExportContext, op: str, params: Any, ins: list[str], outs: list[str], node: Node
) -> None:
    """Write relsat op ``op`` (one of :data:`EXPORTED`) as ONNX nodes of exporter ``ex``."""
    rank = len(ex.graph.shape(node.inputs[0]))
    if op in _SIMPLE:
        ex.emit(_SIMPLE[op], ins, outs)
    elif op in _CONTRIB_OPS:
        _contrib(ex, _CONTRIB_OPS[op], ins, outs)
    elif op == "softmax":
        ex.emit("Softmax", ins, outs, axis=rank - 1 if ex.opset < 13 else -1)
    elif op == "reducemean":
        _reduce_mean(ex, ins[0], outs[0], rank)
    elif op == "layernorm":
        eps = float(params["epsilon"])
        if ex.opset >= 17:
            ex.emit(FUSED[op], ins, outs, axis=-1, epsilon=eps)
        else:
            _layernorm_spelled(ex, ins, outs[0], eps, rank)
    elif op == "skiplayernorm":
        attrs = {"epsilon": float(params["epsilon"])}
        _contrib(ex, FUSED[op], [*ins[:2], *_unpacked(ex, node)], outs, **attrs)
    elif op == "quickgelu":
        _contrib(ex, FUSED[op], ins, outs, alpha=float(params["alpha"]))
    elif op == "nanzero":
        _nanzero(ex, ins[0], outs[0])
    elif op in ("attention", "gqa"):
        _attention_out(ex, float(params["scale"]), ins, outs[0], node)
    elif op == "mha":
        _mha_out(ex, params, ins, outs[0], node)
    else:  # pragma: no cover (EXPORTED lists what is handled)
        raise AssertionError(op)


def _contrib(
    ex: ExportContext, op_type: str, ins: Sequence[str], outs: Sequence[str], **a: Any
) -> None:
    ex.declare_domain(CONTRIB, 1)
    ex.emit(op_type, ins, outs, domain=CONTRIB, **a)


def _reduce_mean(ex: ExportContext, x: str, out: str, rank: int) -> None:
    if ex.opset >= 18:
        ex.emit("ReduceMean", [x, ex.const("axes", [rank - 1])], [out], keepdims=1)
    else:
        ex.emit("ReduceMean", [x], [out], axes=[rank - 1], keepdims=1)


def _layernorm_spelled(ex: ExportContext, ins: list[str], out: str, eps: float, rank: int) -> None:
    """LayerNormalization before opset 17, as torch spells it (onnxruntime fuses it back)."""
    x, scale, bias = ins
    mean, centred, square = (ex.fresh(f"{out}_{s}") for s in ("mean", "centred", "square"))
    var, shifted, std = (ex.fresh(f"{out}_{s}") for s in ("var", "shifted", "std"))
    normed, scaled = ex.fresh(f"{out}_normed"), ex.fresh(f"{out}_scaled")
    _reduce_mean(ex, x, mean, rank)
    ex.emit("Sub", [x, mean], [centred])
    ex.emit("Pow", [centred, ex.float_const("two", 2.0)], [square])
    _reduce_mean(ex, square, var, rank)
    ex.emit("Add", [var, ex.float_const("epsilon", eps)], [shifted])
    ex.emit("Sqrt", [shifted], [std])
    ex.emit("Div", [centred, std], [normed])
    ex.emit("Mul", [normed, scale], [scaled])
    ex.emit("Add", [scaled, bias], [out])


def _unpacked(ex: ExportContext, node: Node) -> list[str]:
    """A skiplayernorm's packed ``[2N]`` scale and bias (``[3N]``: and input bias) as ``[N]``
    tensors: initializers when weight-only (always, in practice), else a Split."""
    ref = node.inputs[2]
    n = ex.graph.shape(node.inputs[0])[-1]
    parts = ex.graph.shape(ref)[0] // n
    names = ("scale", "bias", "input_bias")[:parts]
    folded = ex.folded(ref)
    if folded is not None:
        value = np.asarray(folded, dtype=np.float32).reshape(parts, n)
        base = ex.graph.node(ref).name or f"layernorm_{node.id}"
        return [ex.float_array(f"{base}_{what}", value[i]) for i, what in enumerate(names)]
    packed = ex.name_of(ref, node)
    outs = [ex.fresh(f"{packed}_{what}") for what in names]
    if ex.opset >= 13:
        ex.emit("Split", [packed, ex.const("split", [n] * parts)], outs, axis=0)
    else:
        ex.emit("Split", [packed], outs, axis=0, split=[n] * parts)
    return outs


def _nanzero(ex: ExportContext, x: str, out: str) -> None:
    test = ex.fresh(f"{out}_isnan")
    ex.emit("IsNaN", [x], [test])
    ex.emit("Where", [test, ex.float_const("zero", 0.0), x], [out])


def _attention_out(ex: ExportContext, scale: float, ins: list[str], out: str, node: Node) -> None:
    """ONNX Attention at opset 23 (keys transposed back, the mask as :func:`_mask_in` writes
    it); spelled out below opset 23."""
    q, kt, v = ins
    s = ex.graph.shape(node.inputs[0])[2]
    t = ex.graph.shape(node.inputs[1])[3]
    if ex.opset < ATTENTION_OPSET:
        heads = ex.graph.shape(node.inputs[0])[1]
        kt, v = (repeat_heads_out(ex, x, node.inputs[i], heads) for i, x in ((1, kt), (2, v)))
        bias = _mask_in(ex, node, out, s, t, nudge=False)
        guard = bias is not None and not masks.no_infinity(ex.graph, node.inputs[3])
        _attention_spelled(ex, scale, q, kt, v, bias, out, guard=guard)
        return
    key = _untransposed(ex, node, out)
    if key is None:
        key = ex.fresh(f"{out}_key")
        ex.emit("Transpose", [kt], [key], perm=[0, 1, 3, 2])
    bias = _mask_in(ex, node, out, s, t, nudge=True)
    ex.emit(FUSED["attention"], [q, key, v, *([bias] if bias else [])], [out], scale=scale)


def _untransposed(ex: ExportContext, node: Node, out: str) -> str | None:
    """The keys ``[B, H, T, D]`` an attention's ``kt`` was transposed from, read directly: its
    producer a transpose of the last two axes (every exporter writes ``k.transpose(-1, -2)``;
    a transpose of another layout, e.g. ``[B, T, H, D]``, becomes one transpose to the keys),
    or that transpose times a scalar (torch's SDPA export scales q and kt by sqrt(scale) each:
    the keys are scaled instead). The transpose is then left out of the written model unless
    another node reads it. None for keys computed otherwise."""
    ref = node.inputs[1]
    if ex.folded(ref) is not None:
        return None  # constant keys: their initializer is written transposed
    producer = ex.graph.nodes[ref.node]
    factor = None
    if producer.op == "ewmul":
        inner, scalar = producer.inputs
        if ex.graph.nodes[scalar.node].op != "scalar":
            return None
        factor, producer = ex.name_of(scalar, producer), ex.graph.nodes[inner.node]
    if producer.op != "transpose":
        return None
    keys = ex.name_of(producer.inputs[0], node)
    perm = [tuple(producer.params["perm"])[i] for i in (0, 1, 3, 2)]
    if perm != [0, 1, 2, 3]:  # kt a transpose of [B, S, H, D] (dynamo's K): one transpose
        moved = ex.fresh(f"{out}_keys")
        ex.emit("Transpose", [keys], [moved], perm=perm)
        keys = moved
    if factor is None:
        return keys
    scaled = ex.fresh(f"{out}_key")
    ex.emit("Mul", [keys, factor], [scaled])
    return scaled


def _mha_out(ex: ExportContext, params: Any, ins: list[str], out: str, node: Node) -> None:
    """com.microsoft Attention: packed input projections, no mask index or past state, the
    additive mask as ``attention_bias`` (as :func:`_mask_in` writes it). A query row whose keys
    are all masked with -inf comes out NaN from that kernel, where ``mha`` (as torch's guard)
    gives 0: unless the mask provably holds no infinity (:func:`relsat.onnx.masks.no_infinity`:
    Hugging Face's ``Where(mask, 0, finfo.min)`` does), the output is guarded (Where(IsNaN))."""
    s = ex.graph.shape(node.inputs[0])[1]
    bias = _mask_in(ex, node, out, s, s, nudge=True)
    attrs = {"num_heads": int(params["heads"]), "scale": float(params["scale"])}
    finite = masks.no_infinity(ex.graph, node.inputs[3])
    raw = ex.fresh(f"{out}_unguarded") if bias and not finite else out
    _contrib(ex, FUSED["mha"], [*ins[:3], *(["", "", bias] if bias else [])], [raw], **attrs)
    if raw != out:
        _nanzero(ex, raw, out)


def _mask_in(ex: ExportContext, node: Node, out: str, s: int, t: int, *, nudge: bool) -> str | None:
    """The name of an attention's additive mask (its input 3) for a fused kernel: None for a
    constant finite rank-0 one (the softmax is shift-invariant); ``nudge``: scaled by
    :data:`MASK_NUDGE`; a mask broadcast over S or T expanded, as onnxruntime wants its last
    two dims to be [S, T]."""
    ref = node.inputs[3]
    shape = tuple(ex.graph.shape(ref))
    folded = ex.folded(ref) if not shape else None
    if folded is not None and bool(np.isfinite(folded).all()):
        return None
    bias = ex.name_of(ref, node)
    if not nudge:
        return bias
    # onnxruntime's Attention reads a mask value of exactly float32's lowest (the fill Hugging
    # Face uses) as -inf and gives a fully masked row 0, where the softmax it replaces gives the
    # mean of v. Scaled by the float just below 1, that value is no longer the lowest (the row's
    # softmax is computed), -inf stays -inf (0, as the NaN guard gives) and any other mask value
    # moves by at most 6e-8 of itself.
    # Written once per mask and shape: every layer's attention reads the same one.
    key = ("mask_nudged", bias, s, t)
    if key in ex.memo:
        return ex.memo[key]
    nudged = ex.fresh(f"{out}_mask_nudged")
    ex.emit("Mul", [bias, ex.float_const("below_one", float(MASK_NUDGE))], [nudged])
    ex.memo[key] = nudged
    if shape[-2:] != (s, t):
        padded = (1,) * (4 - len(shape)) + shape
        ex.memo[key] = ex.fresh(f"{out}_mask")
        ex.emit("Expand", [nudged, ex.const("mask_shape", [*padded[:2], s, t])], [ex.memo[key]])
    return ex.memo[key]


def repeat_heads_out(
    ex: ExportContext, x: str, ref: Ref, heads: int, out: str | None = None
) -> str:
    """``x`` (4-D, of ``ref``'s shape ``[B, h, ..., ...]``) with each head repeated to make
    ``heads`` (``repeatkv``, a grouped-query attention spelled out) as transformers' repeat_kv
    is exported: Unsqueeze, Expand, Reshape, written to ``out`` (None: a fresh name); without
    ``out``, ``x`` itself when it has ``heads`` already."""
    shape = ex.graph.shape(ref)
    count = heads // shape[1]
    if count == 1 and out is None:
        return x
    unsqueezed, expanded = (ex.fresh(f"{x}_{s}") for s in ("heads", "expanded"))
    out = out or ex.fresh(f"{x}_repeated")
    if ex.opset >= 13:
        ex.emit("Unsqueeze", [x, ex.const("axes", [2])], [unsqueezed])
    else:
        ex.emit("Unsqueeze", [x], [unsqueezed], axes=[2])
    ex.emit("Expand", [unsqueezed, ex.const("repeat", [1, 1, count, 1, 1])], [expanded])
    ex.emit("Reshape", [expanded, ex.const("shape", [0, heads, *shape[2:]])], [out])
    return out


def _attention_spelled(
    ex: ExportContext,
    scale: float,
    q: str,
    kt: str,
    v: str,
    bias: str | None,
    out: str,
    *,
    guard: bool,
) -> None:
    """Attention as MatMul, Mul, Add, Softmax, IsNaN/Where and MatMul (below opset 23): no Mul
    at a scale of 1, no Add without a ``bias``, and the NaN guard only where asked (a mask that
    may hold -inf: a row of finite scores never comes out NaN)."""
    scores = ex.fresh(f"{out}_scores")
    ex.emit("MatMul", [q, kt], [scores])
    if scale != 1.0:
        scaled = ex.fresh(f"{out}_scaled")
        ex.emit("Mul", [scores, ex.float_const("scale", scale)], [scaled])
        scores = scaled
    if bias is not None:
        masked = ex.fresh(f"{out}_masked")
        ex.emit("Add", [scores, bias], [masked])
        scores = masked
    probs = ex.fresh(f"{out}_probs")
    ex.emit("Softmax", [scores], [probs], axis=-1 if ex.opset >= 13 else 3)
    if guard:
        guarded = ex.fresh(f"{out}_guarded")
        _nanzero(ex, probs, guarded)
        probs = guarded
    ex.emit("MatMul", [probs, v], [out])
