"""LLM decoder operators between ONNX and relsat: RMSNorm and rotary embedding, the pieces exporters
spell them with, and the fused kernels onnxruntime runs them as.

Import (:data:`HANDLERS` for the default domain, :data:`CONTRIB_HANDLERS` for ``com.microsoft``):
Reciprocal, Neg; Slice with constant bounds and step 1 (one ``slice`` per axis it cuts; a Slice
that keeps everything is the tensor itself); a Cast of a float32 tensor to float32 (what the
legacy exporter writes around an RMSNorm) is the tensor itself; RMSNormalization (opset 23) and
``com.microsoft`` SimplifiedLayerNormalization over the last axis with a ``[N]`` scale (and only
their first output read) are ``rmsnorm`` (onnxruntime's optimizer writes the latter in the
default domain, which the ONNX checker, and so the importer, refuses); RotaryEmbedding (opset
23) on 4-D ``[B, H, S, D]`` input, whole head size rotated, tables given per position or
gathered at constant position ids, is ``rotary``. (That a rotary table's two halves are equal,
transformers' ``cat(freqs, freqs)``, is a fact of values the e-graph keeps: :mod:`relsat.graph.
facts`.) GPT-J's interleaved rotation is read from its pieces: the Reshape
ending torch's ``rotate_every_two`` (strided Slices, Neg, Unsqueeze, Concat) is ``turnpairs``,
the Reshape ending a table's ``repeat_interleave(t, 2, -1)`` (Unsqueeze, Expand or Tile) and a
constant whose entries come in equal pairs are ``repeat2``. Anything else — another axis, a
scale of shape ``[1, N]``, partial rotation, position ids computed at run time — stays opaque.

Export (:func:`emit`): ``rmsnorm`` as RMSNormalization and ``rotary`` as RotaryEmbedding (on
``[B, S, H, D]`` input, GPT-J's layout, a ``[B, S, H*D]`` view with ``num_heads``), both opset
23: the exporter writes the model at opset 23 when the graph holds one of
:data:`OPSET_23_OPS` (as for ``attention``, and only where its opaque nodes mean the same
there). Measured (onnxruntime 1.32 CPU, one thread, 128 tokens, hidden 256-2048):
RMSNormalization runs 2.2-2.7x faster than torch dynamo's Reciprocal spelling, which onnxruntime
does not fuse. Below opset 23 ``rmsnorm`` is spelled ``x / sqrt(mean(x^2) + eps) * scale`` with a
Div, the spelling onnxruntime's optimizer fuses into its SimplifiedLayerNormalization kernel by
itself (that operator is onnxruntime's own, in the default domain, which the ONNX checker
refuses: it is never written); ``rotary`` is spelled out (Slice/Neg/Concat/Mul/Add), as it is
for a table that varies over heads (the fused kernel's caches ``[B, S, D/2]`` have no head dim).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from onnx import NodeProto, TensorProto

from relsat.graph.builder import Tensor
from relsat.graph.graph import Node, Ref
from relsat.onnx.context import (
    ExportContext,
    Handler,
    ImportContext,
    Unmapped,
    attrs_of,
    axes_of,
)
from relsat.onnx.opmap import HANDLERS as OPMAP_HANDLERS
from relsat.onnx.transformer_ops import HANDLERS as TRANSFORMER_HANDLERS
from relsat.onnx.transformer_ops import repeat_heads_out

__all__ = [
    "CONTRIB_HANDLERS",
    "EXPORTED",
    "HANDLERS",
    "OPSET_23_OPS",
    "RMSNORM_OPSET",
    "ROTARY_OPSET",
    "emit",
]

#: The first opset with the standard RMSNormalization operator.
RMSNORM_OPSET = 23
#: The first opset with the standard RotaryEmbedding operator.
ROTARY_OPSET = 23
#: Slice bounds at or past this are "to the end" (exporters write INT64_MAX).
_BIG = 1 << 62

# ---------------------------------------------------------------------------------------------
# Import


def _unary(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    """Reciprocal, Neg, Cos, Sin."""
    g = imp.g
    make = {"Reciprocal": g.reciprocal, "Neg": g.neg, "Cos": g.cos, "Sin": g.sin}[node.op_type]
    return {node.output[0]: make(imp.tensor(node.input[0]), name=node.output[0])}


def _cast(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    """A Cast of a float32 tensor to float32 is the tensor; any other Cast is opaque."""
    if a.get("to") != TensorProto.FLOAT or not imp.is_float(node.input[0]):
        raise Unmapped
    return {node.output[0]: imp.tensor(node.input[0])}


def _ints(imp: ImportContext, node: NodeProto, i: int) -> list[int] | None:
    name = node.input[i] if len(node.input) > i else ""
    if not name:
        return None
    value = imp.const(name)
    if value is None or value.dtype.kind not in "iu":
        raise Unmapped  # bounds computed at run time
    return [int(v) for v in value.reshape(-1)]


def _slice(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    """Slice with constant starts, ends, axes and steps of 1: one ``slice`` per axis it cuts."""
    x = imp.tensor(node.input[0])
    if imp.opset >= 10:
        starts, ends = _ints(imp, node, 1), _ints(imp, node, 2)
        axes, steps = _ints(imp, node, 3), _ints(imp, node, 4)
    else:
        starts, ends, axes, steps = a.get("starts"), a.get("ends"), a.get("axes"), None
    if starts is None or ends is None or len(starts) != len(ends):
        raise Unmapped
    axes = list(axes) if axes is not None else list(range(len(starts)))
    steps = list(steps) if steps is not None else [1] * len(starts)
    if len(axes) != len(starts) or len(steps) != len(starts) or any(s != 1 for s in steps):
        raise Unmapped  # strided or reversed slices
    if any(not -x.rank <= ax < x.rank for ax in axes) or len({ax % x.rank for ax in axes}) != len(
        axes
    ):
        raise Unmapped
    out = x
    for axis, start, end in sorted(zip((ax % x.rank for ax in axes), starts, ends, strict=True)):
        dim = x.shape[axis]
        lo, hi = (min(max(v + dim if v < 0 else v, 0), dim) for v in (start, end))
        if lo >= hi:
            raise Unmapped  # an empty tensor
        if (lo, hi) != (0, dim):
            out = imp.g.slice(out, axis, lo, hi)
    return {node.output[0]: out}


def _scale_of(imp: ImportContext, node: NodeProto, x: Tensor, i: int = 1) -> Tensor:
    scale = imp.tensor(node.input[i])
    if scale.shape != (x.shape[-1],):
        raise Unmapped  # a scale of another shape ([1, N], per position): another computation
    return scale


def _is_last(axis: int, rank: int) -> bool:
    return rank >= 1 and -rank <= axis < rank and axis % rank == rank - 1


def _rmsnorm(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    """RMSNormalization (opset 23) and com.microsoft SimplifiedLayerNormalization: ``rmsnorm``
    over the last axis with a ``[N]`` scale, computed in float32, only the first output read."""
    x = imp.tensor(node.input[0])
    if not _is_last(a.get("axis", -1), x.rank) or a.get("stash_type", 1) != 1:
        raise Unmapped
    if any(o and imp.readers(o) for o in node.output[1:]):
        raise Unmapped  # the inverse standard deviation is read
    eps = float(a.get("epsilon", 1e-5))
    if not eps > 0:
        raise Unmapped
    scale = _scale_of(imp, node, x)
    return {node.output[0]: imp.g.rmsnorm(x, scale, eps, name=node.output[0])}


def _skip_rmsnorm(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    """com.microsoft SkipSimplifiedLayerNormalization (what onnxruntime's optimizers write for a
    decoder's residual add and the RMSNorm after it): ``rmsnorm(x + skip [+ bias])``, the sum
    (fourth output) when read; the mean and inverse-std outputs read: opaque."""
    x, skip = imp.tensor(node.input[0]), imp.tensor(node.input[1])
    outs = [*node.output, "", "", ""][:4]
    if any(o and imp.readers(o) for o in outs[1:3]) or skip.shape != x.shape:
        raise Unmapped
    eps = float(a.get("epsilon", 1e-12))  # onnxruntime's default for this op
    if not eps > 0:
        raise Unmapped
    scale = _scale_of(imp, node, x, 2)
    if len(node.input) > 3 and node.input[3]:
        bias = imp.tensor(node.input[3])
        if bias.shape != (x.shape[-1],):
            raise Unmapped
        x = imp.g.add(x, bias)
    total = imp.g.add(x, skip, name=outs[3] or None)
    out = {outs[0]: imp.g.rmsnorm(total, scale, eps, name=outs[0])}
    if outs[3] and imp.readers(outs[3]):
        out[outs[3]] = total
    return out


def _table(imp: ImportContext, node: NodeProto, i: int, b: int, s: int, half: int) -> Tensor:
    """Rotary table input ``i`` as ``[B or 1, 1, S, D/2]``: a per-position cache ``[B, S, D/2]``
    reshaped, or (position ids given, all constant) the cache rows they pick."""
    name = node.input[i]
    ids = node.input[3] if len(node.input) > 3 else ""
    if ids:
        cache, positions = imp.const(name), imp.const(ids)
        if cache is None or positions is None or cache.ndim != 2 or cache.shape[1] != half:
            raise Unmapped  # a table picked at run time
        if positions.shape != (b, s) or positions.min() < 0 or positions.max() >= len(cache):
            raise Unmapped
        return imp.derived_weight(
            name, f"rows_{ids}", lambda: cache[positions][:, None].astype(np.float32)
        )
    table = imp.tensor(name)
    if table.rank != 3 or table.shape[0] not in (1, b) or table.shape[1:] != (s, half):
        raise Unmapped
    return imp.g.reshape(table, (table.shape[0], 1, s, half))


def _rotary_embedding(
    imp: ImportContext, node: NodeProto, a: Mapping[str, Any]
) -> dict[str, Tensor]:
    """RotaryEmbedding (opset 23) on ``[B, H, S, D]`` rotating the whole head: ``rotary``."""
    x = imp.tensor(node.input[0])
    if x.rank != 4 or x.shape[-1] % 2:
        raise Unmapped  # 3-D packed heads
    b, _, s, d = x.shape
    if a.get("rotary_embedding_dim", 0) not in (0, d) or a.get("interleaved", 0) not in (0, 1):
        raise Unmapped  # partial rotation
    cos, sin = (_table(imp, node, i, b, s, d // 2) for i in (1, 2))
    out = imp.g.rotary(x, cos, sin, bool(a.get("interleaved", 0)), name=node.output[0])
    return {node.output[0]: out}


def _table_value(imp: ImportContext, name: str, other: str) -> np.ndarray | None:
    """The value of constant ``name`` when it may be a rotary table multiplying ``other``:
    float32, rank >= 2, an even last dim that is ``other``'s (not a constant); else None."""
    value = imp.const(name)
    shape = imp.static_shape(other)
    if value is None or value.dtype != np.float32 or value.ndim < 2 or imp.const(other) is not None:
        return None
    d = value.shape[-1]
    if d < 2 or d % 2 or shape is None or not shape or shape[-1] != d:
        return None
    return value


def _pairwise_table(imp: ImportContext, name: str, other: str) -> Tensor | None:
    """Constant ``name`` as ``repeat2(half)`` when it is an interleaved rotary table
    (:func:`_table_value`): each entry of its last axis twice in place (``repeat_interleave(t,
    2, -1)``, folded by the exporter), not one value throughout; else None."""
    value = _table_value(imp, name, other)
    if value is None:
        return None
    half = value[..., 0::2]
    if not np.array_equal(half, value[..., 1::2]) or half.min() == half.max():
        return None
    piece = imp.derived_weight(name, "pairs", lambda: np.ascontiguousarray(half))
    return imp.g.repeat2(piece)


def _mul(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    """Mul, reading a constant interleaved rotary table as ``repeat2(half)``; ``x * 1`` as
    ``x``; any other Mul as the transformer operators read it."""
    first, second = node.input
    for table_name, other in ((second, first), (first, second)):
        table = _pairwise_table(imp, table_name, other)
        if table is not None:
            x = imp.tensor(other)
            pair = (x, table) if table_name == second else (table, x)
            return {node.output[0]: imp.g.mul(*pair, name=node.output[0])}
    out = TRANSFORMER_HANDLERS["Mul"](imp, node, a)  # the scalar operand second
    inside = _scaled_inside(imp, out[node.output[0]])
    return out if inside is None else {node.output[0]: inside}


def _scaled_inside(imp: ImportContext, product: Tensor) -> Tensor | None:
    """``x * 1`` as ``x`` (bit for bit: transformers' ``attention_scaling`` of 1 on a rotary
    table); else None."""
    mul, ins = imp.g.producer(product)
    if mul.op != "ewmul" or len(ins) != 2:
        return None
    x, factor = ins
    scalar = imp.g.producer(factor)[0]
    if scalar.op != "scalar":
        return None
    return x if scalar.params["value"] == 1.0 else None


def _expand(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    """Expand of a computed float tensor to a constant shape: ``expand`` to the shape ONNX
    infers (transformers' repeat_kv — Unsqueeze, Expand, Reshape — becomes ``repeatkv`` by a
    rule of ``rules/decoder.rules``); any other Expand stays opaque (of a constant, it would be
    written as a folded initializer, which a dim known only at run time cannot size)."""
    shape = imp.inferred_shape(node.output[0])
    if imp.const(node.input[1]) is None or shape is None or not imp.is_float(node.input[0]):
        raise Unmapped
    if imp.const(node.input[0]) is not None:
        raise Unmapped
    return {node.output[0]: imp.g.expand(imp.tensor(node.input[0]), shape, name=node.output[0])}


def _last_unit_of(imp: ImportContext, name: str) -> str | None:
    """The input of Unsqueeze ``name`` when it inserts one unit axis at the end, else None."""
    node = imp.producer(name)
    shape = imp.static_shape(name)
    if node is None or node.op_type != "Unsqueeze" or not shape:
        return None
    axes = axes_of(node, imp.const)
    if axes is None or len(axes) != 1 or axes[0] not in (-1, len(shape) - 1):
        return None
    return node.input[0]


def _strided_of(imp: ImportContext, name: str) -> tuple[str, int] | None:
    """``(x, start)`` when ``name`` is ``x[..., start::2]`` (a Slice of the last axis, step 2,
    to the end), else None."""
    node = imp.producer(name)
    if node is None or node.op_type != "Slice" or imp.opset < 10:
        return None
    shape = imp.static_shape(node.input[0])
    bounds = [_ints(imp, node, i) if len(node.input) > i else None for i in (1, 2, 3, 4)]
    if shape is None or not shape or any(b is None or len(b) != 1 for b in bounds):
        return None
    (start,), (end,), (axis,), (step,) = bounds  # type: ignore[misc]
    if axis not in (-1, len(shape) - 1) or step != 2 or start not in (0, 1) or end < shape[-1]:
        return None
    return node.input[0], start


def _turned_pairs(imp: ImportContext, node: NodeProto) -> Tensor | None:
    """GPT-J's ``rotate_every_two(x)``, ``stack((-x[..., 1::2], x[..., 0::2]), -1)`` flattened
    back to ``x``'s shape (Slice step 2 twice, Neg, Unsqueeze twice, Concat, this Reshape), as
    ``turnpairs(x)``; else None."""
    concat = imp.producer(node.input[0])
    if concat is None or concat.op_type != "Concat" or len(concat.input) != 2:
        return None
    shape = imp.static_shape(node.input[0])
    if not shape or shape[-1] != 2 or attrs_of(concat).get("axis") not in (-1, len(shape) - 1):
        return None
    odd, even = (_last_unit_of(imp, n) for n in concat.input)
    neg = imp.producer(odd) if odd else None
    if neg is None or neg.op_type != "Neg" or even is None:
        return None
    first, second = _strided_of(imp, neg.input[0]), _strided_of(imp, even)
    if first is None or second is None or first != (second[0], 1) or second[1] != 0:
        return None
    x = imp.static_shape(first[0])
    if x is None or tuple(imp.inferred_shape(node.output[0]) or ()) != tuple(x) or x[-1] % 2:
        return None
    return imp.g.turnpairs(imp.tensor(first[0]), name=node.output[0])


def _repeated_pairs(imp: ImportContext, node: NodeProto) -> Tensor | None:
    """``repeat_interleave(t, 2, -1)`` as torch writes it, ``t`` given a unit axis at the end,
    doubled there (Expand, or Tile) and flattened back (this Reshape): ``repeat2(t)``; else
    None."""
    doubled = imp.producer(node.input[0])
    if doubled is None or doubled.op_type not in ("Expand", "Tile"):
        return None
    column, wide = imp.static_shape(doubled.input[0]), imp.static_shape(node.input[0])
    out = imp.inferred_shape(node.output[0])
    if column is None or wide is None or out is None or len(column) < 2 or column[-1] != 1:
        return None
    if tuple(wide) != (*column[:-1], 2) or tuple(out) != (*column[:-2], 2 * column[-2]):
        return None  # anything but the last axis doubled: another Expand or Tile
    if not imp.is_float(doubled.input[0]):
        return None
    t = imp.g.reshape(imp.tensor(doubled.input[0]), column[:-1])
    return imp.g.repeat2(t, name=node.output[0])


def _reshape(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    """Reshape ending an interleaved rotary's pieces (:func:`_turned_pairs`,
    :func:`_repeated_pairs`); any other as :mod:`relsat.onnx.opmap` reads it."""
    for read in (_turned_pairs, _repeated_pairs):
        out = read(imp, node)
        if out is not None:
            return {node.output[0]: out}
    return OPMAP_HANDLERS["Reshape"](imp, node, a)


#: Default-domain ONNX op_type → handler (Mul replaces the transformer operators' one).
HANDLERS: dict[str, Handler] = {
    "Reciprocal": _unary,
    "Neg": _unary,
    "Cos": _unary,
    "Sin": _unary,
    "Cast": _cast,
    "Slice": _slice,
    "Mul": _mul,
    "Expand": _expand,
    "Reshape": _reshape,
    "RMSNormalization": _rmsnorm,
    "RotaryEmbedding": _rotary_embedding,
}

#: ``com.microsoft`` op_type → handler.
CONTRIB_HANDLERS: dict[str, Handler] = {
    "SimplifiedLayerNormalization": _rmsnorm,
    "SkipSimplifiedLayerNormalization": _skip_rmsnorm,
}


# ---------------------------------------------------------------------------------------------
# Export

#: The relsat ops :func:`emit` writes.
EXPORTED = frozenset(
    {"reciprocal", "neg", "cos", "sin", "slice", "rmsnorm", "rotary", "repeatkv"}
    | {"turnpairs", "repeat2"}
)
#: The ops whose fused ONNX operator needs opset 23: a graph holding one is written at 23 where it
#: can be (see :mod:`relsat.onnx.exporter`).
OPSET_23_OPS = frozenset({"rmsnorm", "rotary"})


def emit(
    ex: ExportContext, op: str, params: Any, ins: list[str], outs: list[str], node: Node
) -> None:
    """Write relsat op ``op`` (one of :data:`EXPORTED`) as ONNX nodes of exporter ``ex``."""
    if op == "reciprocal":
        ex.emit("Reciprocal", ins, outs)
    elif op == "neg":
        ex.emit("Neg", ins, outs)
    elif op in ("cos", "sin"):
        ex.emit(op.capitalize(), ins, outs)
    elif op == "slice":
        _slice_out(ex, ins[0], outs[0], params["axis"], params["start"], params["end"])
    elif op == "rmsnorm":
        eps = float(params["epsilon"])
        if ex.opset >= RMSNORM_OPSET:
            ex.emit("RMSNormalization", ins, outs, axis=-1, epsilon=eps)
        else:
            _rmsnorm_spelled(ex, ins, outs[0], eps, len(ex.graph.shape(node.inputs[0])))
    elif op == "rotary":
        _rotary_out(ex, ins, outs[0], node, bool(params["interleaved"]))
    elif op == "repeatkv":
        heads = ex.graph.shape(node.inputs[0])[1] * int(params["count"])
        repeat_heads_out(ex, ins[0], node.inputs[0], heads, outs[0])
    elif op == "turnpairs":
        _turnpairs_out(ex, ins[0], outs[0], len(ex.graph.shape(node.inputs[0])))
    elif op == "repeat2":
        _repeat2_out(ex, ins[0], outs[0], len(ex.graph.shape(node.inputs[0])))
    else:  # pragma: no cover (EXPORTED lists what is handled)
        raise AssertionError(op)


def _rmsnorm_spelled(ex: ExportContext, ins: list[str], out: str, eps: float, rank: int) -> None:
    """``x / sqrt(mean(x^2) + eps) * scale``: the spelling onnxruntime fuses by itself."""
    x, scale = ins
    square, mean, shifted = (ex.fresh(f"{out}_{s}") for s in ("square", "mean", "shifted"))
    root, normed = ex.fresh(f"{out}_root"), ex.fresh(f"{out}_normed")
    ex.emit("Pow", [x, ex.float_const("two", 2.0)], [square])
    if ex.opset >= 18:
        ex.emit("ReduceMean", [square, ex.const("axes", [rank - 1])], [mean], keepdims=1)
    else:
        ex.emit("ReduceMean", [square], [mean], axes=[rank - 1], keepdims=1)
    ex.emit("Add", [mean, ex.float_const("epsilon", eps)], [shifted])
    ex.emit("Sqrt", [shifted], [root])
    ex.emit("Div", [x, root], [normed])
    ex.emit("Mul", [normed, scale], [out])


def _slice_out(ex: ExportContext, x: str, out: str, axis: int, start: int, end: int) -> None:
    if ex.opset >= 10:
        bounds = [ex.const(k, [v]) for k, v in (("starts", start), ("ends", end), ("axes", axis))]
        ex.emit("Slice", [x, *bounds], [out])
    else:
        ex.emit("Slice", [x], [out], starts=[start], ends=[end], axes=[axis])


def _view_out(ex: ExportContext, x: str, out: str, lead: int, tail: list[int]) -> None:
    """Reshape ``x`` keeping its first ``lead`` dims (0s in the target: any shape runs)."""
    ex.emit("Reshape", [x, ex.const("view", [0] * lead + tail)], [out])


def _turnpairs_out(ex: ExportContext, x: str, out: str, rank: int) -> None:
    """``turnpairs``: ``x`` viewed as pairs ``[..., D/2, 2]``, each ``(a, b)`` turned to ``(-b,
    a)``, flattened back (plain Slices, no strided one: any opset)."""
    pairs, even, odd = ex.fresh(f"{out}_pairs"), ex.fresh(f"{out}_even"), ex.fresh(f"{out}_odd")
    _view_out(ex, x, pairs, rank - 1, [-1, 2])
    _slice_out(ex, pairs, even, rank, 0, 1)
    _slice_out(ex, pairs, odd, rank, 1, 2)
    negated, turned = ex.fresh(f"{out}_neg"), ex.fresh(f"{out}_turned")
    ex.emit("Neg", [odd], [negated])
    ex.emit("Concat", [negated, even], [turned], axis=rank)
    _view_out(ex, turned, out, rank - 1, [-1])


def _repeat2_out(ex: ExportContext, x: str, out: str, rank: int) -> None:
    """``repeat2``: ``x`` given a unit axis at the end, ``[x, x]`` concatenated there and
    flattened back."""
    column, doubled = ex.fresh(f"{out}_column"), ex.fresh(f"{out}_doubled")
    _view_out(ex, x, column, rank - 1, [-1, 1])
    ex.emit("Concat", [column, column], [doubled], axis=rank)
    _view_out(ex, doubled, out, rank - 1, [-1])


def _rotary_out(ex: ExportContext, ins: list[str], out: str, node: Node, interleaved: bool) -> None:
    """RotaryEmbedding at opset 23 with ``[B, S, D/2]`` caches (computed once when the tables
    are weight-only): on ``x`` ``[B, H, S, D]`` as it is, on ``[B, S, H, D]`` (GPT-J rotates
    before its heads are transposed) viewed as ``[B, S, H*D]`` with ``num_heads``. Spelled out
    below opset 23, for input of rank other than 4, or for tables that vary over both middle
    axes (the fused kernel's caches have no head dim)."""
    shape = ex.graph.shape(node.inputs[0])
    tables = [ex.graph.shape(r) for r in node.inputs[1:]]
    padded = [(1,) * (len(shape) - len(t)) + tuple(t) for t in tables]
    heads = next((a for a in (1, 2) if all(t[a] == 1 for t in padded)), None)
    if ex.opset < ROTARY_OPSET or len(shape) != 4 or heads is None:
        _rotary_spelled(ex, ins, out, shape, tables, interleaved)
        return
    seq = 3 - heads
    b, s, d = shape[0], shape[seq], shape[3]
    caches = []
    for ref, name, t in zip(node.inputs[1:], ins[1:], padded, strict=True):
        key = ("rotary-cache", name, (b, s, d // 2))  # one cache per table: the layers share it
        if key not in ex.memo:
            ex.memo[key] = _rotary_cache(ex, node, ref, name, t, seq, (b, s, d // 2))
        caches.append(ex.memo[key])
    if heads == 1:
        ex.emit("RotaryEmbedding", [ins[0], *caches], [out], interleaved=int(interleaved))
        return
    packed, rotated = ex.fresh(f"{out}_packed"), ex.fresh(f"{out}_rotated")
    _view_out(ex, ins[0], packed, 2, [-1])
    ex.emit(
        "RotaryEmbedding",
        [packed, *caches],
        [rotated],
        interleaved=int(interleaved),
        num_heads=shape[2],
    )
    _view_out(ex, rotated, out, 2, [shape[2], d])


def _rotary_cache(
    ex: ExportContext,
    rotary: Node,
    ref: Ref,
    name: str,
    table: tuple[int, ...],
    seq: int,
    cache: tuple[int, int, int],
) -> str:
    """Rotary table ``name`` (4-D, unit on the head axis, positions on axis ``seq``, ``D/2``
    last; broadcast to ``cache`` ``[B, S, D/2]``) as the fused kernel's cache: an initializer
    when computed from weights; else laid out from its source, past the reshapes that wrote
    the table (one Reshape, and an Expand where it broadcasts) — and where the table is the
    cosine or sine of angles computed at run time (a decode step's position), the angles are
    laid out once and both caches computed from them."""
    folded = ex.folded(ref)
    b, s, half = cache
    if folded is not None:
        value = np.asarray(folded, np.float32).reshape(table)
        full = [b, 1, 1, half]
        full[seq] = s
        return ex.float_array(f"{name}_cache", np.broadcast_to(value, full).reshape(cache))
    source = _through_reshapes(ex, ref)
    node = ex.graph.nodes[source.node]
    if node.op not in ("cos", "sin"):
        name = ex.name_of(source, rotary)
        return _laid_out(ex, name, ex.graph.shape(source), (table[0], table[seq]), cache)
    angles = _through_reshapes(ex, node.inputs[0])
    angles_name = ex.name_of(angles, rotary)
    key = ("rotary-angles", angles_name, cache)
    if key not in ex.memo:
        rows = (table[0], table[seq])
        ex.memo[key] = _laid_out(ex, angles_name, ex.graph.shape(angles), rows, cache)
    out = ex.fresh(f"{name}_cache")
    ex.emit(node.op.capitalize(), [ex.memo[key]], [out])
    return out


def _through_reshapes(ex: ExportContext, ref: Ref) -> Ref:
    """``ref``'s source past the reshapes that wrote it (the same values in the same order)."""
    node = ex.graph.nodes[ref.node]
    while node.op == "reshape" and ex.folded(ref) is None:
        ref = node.inputs[0]
        node = ex.graph.nodes[ref.node]
    return ref


def _laid_out(
    ex: ExportContext,
    name: str,
    shape: tuple[int, ...],
    rows: tuple[int, int],
    cache: tuple[int, int, int],
) -> str:
    """``name`` (of ``shape``: ``rows[0] * rows[1] * D/2`` values) as ``[rows[0], rows[1],
    D/2]`` (a Reshape unless it has that shape), expanded to ``cache`` where it broadcasts."""
    flat = name
    if tuple(shape) != (*rows, cache[2]):
        flat = ex.fresh(f"{name}_cache")
        ex.emit("Reshape", [name, ex.const("cache_shape", [*rows, cache[2]])], [flat])
    if rows != cache[:2]:
        full = ex.fresh(f"{name}_cache")
        ex.emit("Expand", [flat, ex.const("cache_shape", list(cache))], [full])
        flat = full
    return flat


def _rotary_spelled(
    ex: ExportContext,
    ins: list[str],
    out: str,
    shape: tuple[int, ...],
    tables: list[tuple[int, ...]],
    interleaved: bool,
) -> None:
    """``x * cos' + rotated(x) * sin'`` with the tables widened to ``D`` (concatenated twice,
    or each entry repeated for interleaved pairs), as torch writes it."""
    x, cos, sin = ins
    d, last = shape[-1], len(shape) - 1
    half = d // 2
    if interleaved:  # pairs (x[2i], x[2i+1]) -> (-x[2i+1], x[2i]), as [..., D/2, 2]
        pairs = ex.fresh(f"{out}_pairs")
        ex.emit("Reshape", [x, ex.const("pairs", [*shape[:-1], half, 2])], [pairs])
        even, odd = ex.fresh(f"{out}_even"), ex.fresh(f"{out}_odd")
        _slice_out(ex, pairs, even, last + 1, 0, 1)
        _slice_out(ex, pairs, odd, last + 1, 1, 2)
        negated, turned = ex.fresh(f"{out}_neg"), ex.fresh(f"{out}_turned")
        ex.emit("Neg", [odd], [negated])
        ex.emit("Concat", [negated, even], [turned], axis=last + 1)
        rotated = ex.fresh(f"{out}_rotated")
        ex.emit("Reshape", [turned, ex.const("rotated", list(shape))], [rotated])
    else:  # halves (x1, x2) -> (-x2, x1)
        x1, x2 = ex.fresh(f"{out}_x1"), ex.fresh(f"{out}_x2")
        _slice_out(ex, x, x1, last, 0, half)
        _slice_out(ex, x, x2, last, half, d)
        negated, rotated = ex.fresh(f"{out}_neg"), ex.fresh(f"{out}_rotated")
        ex.emit("Neg", [x2], [negated])
        ex.emit("Concat", [negated, x1], [rotated], axis=last)
    wide = []
    for name, t in zip((cos, sin), tables, strict=True):
        full = ex.fresh(f"{name}_wide")
        if interleaved:
            column, doubled = ex.fresh(f"{name}_column"), ex.fresh(f"{name}_doubled")
            ex.emit("Reshape", [name, ex.const("column", [*t, 1])], [column])
            ex.emit("Concat", [column, column], [doubled], axis=len(t))
            ex.emit("Reshape", [doubled, ex.const("wide", [*t[:-1], d])], [full])
        else:
            ex.emit("Concat", [name, name], [full], axis=len(t) - 1)
        wide.append(full)
    straight, turned_part = ex.fresh(f"{out}_cos"), ex.fresh(f"{out}_sin")
    ex.emit("Mul", [x, wide[0]], [straight])
    ex.emit("Mul", [rotated, wide[1]], [turned_part])
    ex.emit("Add", [straight, turned_part], [out])
