"""LLM decoder operators between ONNX and relsat: RMSNorm and rotary embedding, the pieces exporters
spell them with, and the fused kernels onnxruntime runs them as.

Import (:data:`HANDLERS` for the default domain, :data:`CONTRIB_HANDLERS` for ``com.microsoft``):
Reciprocal, Neg; Slice with constant bounds and positive steps (one ``slice`` per axis it cuts;
a Slice that keeps everything is the tensor itself); a Cast of a float32 tensor to float32 (what the
legacy exporter writes around an RMSNorm) is the tensor itself; RMSNormalization (opset 23) and
``com.microsoft`` SimplifiedLayerNormalization over the last axis with a ``[N]`` scale (and only
their first output read) are ``rmsnorm`` (onnxruntime's optimizer writes the latter in the
default domain, which the ONNX checker, and so the importer, refuses); RotaryEmbedding (opset
23) on 4-D ``[B, H, S, D]`` input, whole head size rotated, tables given per position or
gathered at constant position ids, is ``rotary``. The spelled-out rotations (transformers'
rotate_half, GPT-J's rotate_every_two) are read one operator at a time and fused by rules of
``rules/decoder.rules``; that a rotary table's halves or pairs are equal (``cat(freqs, freqs)``,
``repeat_interleave(t, 2, -1)``) is a fact of values the e-graph keeps (:mod:`relsat.graph.
facts`). Anything else — another axis, a scale of shape ``[1, N]``, partial rotation, position
ids computed at run time — stays opaque.

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
)
from relsat.onnx.errors import OnnxError
from relsat.onnx.transformer_ops import repeat_heads_out

__all__ = [
    "CONTRIB_HANDLERS",
    "EXPORTED",
    "FUSED",
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
    """Slice with constant starts, ends, axes and positive steps: one ``slice`` per axis it
    cuts."""
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
    if len(axes) != len(starts) or len(steps) != len(starts) or any(s < 1 for s in steps):
        raise Unmapped  # reversed slices
    if any(not -x.rank <= ax < x.rank for ax in axes) or len({ax % x.rank for ax in axes}) != len(
        axes
    ):
        raise Unmapped
    out = x
    cuts = sorted(zip((ax % x.rank for ax in axes), starts, ends, steps, strict=True))
    for axis, start, end, step in cuts:
        dim = x.shape[axis]
        lo, hi = (min(max(v + dim if v < 0 else v, 0), dim) for v in (start, end))
        if lo >= hi:
            raise Unmapped  # an empty tensor
        if (lo, hi, step) != (0, dim, 1):
            out = imp.g.slice(out, axis, lo, hi, step)
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


#: Default-domain ONNX op_type → handler (Mul replaces the transformer operators' one).
HANDLERS: dict[str, Handler] = {
    "Reciprocal": _unary,
    "Neg": _unary,
    "Cos": _unary,
    "Sin": _unary,
    "Cast": _cast,
    "Slice": _slice,
    "Expand": _expand,
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

#: The relsat ops :func:`emit` writes as one fused onnxruntime kernel, with that kernel's ONNX
#: operator (opset 23; spelled out below it, and a rotary where the kernel's layout does not fit).
FUSED = {"rmsnorm": "RMSNormalization", "rotary": "RotaryEmbedding"}
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
        p = params
        _slice_out(ex, ins[0], outs[0], p["axis"], p["start"], p["end"], p.get("step", 1))
    elif op == "rmsnorm":
        eps = float(params["epsilon"])
        if ex.opset >= RMSNORM_OPSET:
            ex.emit(FUSED[op], ins, outs, axis=-1, epsilon=eps)
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


def _slice_out(
    ex: ExportContext, x: str, out: str, axis: int, start: int, end: int, step: int = 1
) -> None:
    if ex.opset >= 10:
        named = [("starts", start), ("ends", end), ("axes", axis)]
        named += [("steps", step)] if step != 1 else []
        ex.emit("Slice", [x, *(ex.const(k, [v]) for k, v in named)], [out])
    elif step == 1:
        ex.emit("Slice", [x], [out], starts=[start], ends=[end], axes=[axis])
    else:
        raise OnnxError(f"a strided slice needs opset 10 or later, not {ex.opset}")


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
        ex.emit(FUSED["rotary"], [ins[0], *caches], [out], interleaved=int(interleaved))
        return
    packed, rotated = ex.fresh(f"{out}_packed"), ex.fresh(f"{out}_rotated")
    _view_out(ex, ins[0], packed, 2, [-1])
    ex.emit(
        FUSED["rotary"],
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
    column = _evens_of_pairs(ex, node)  # repeat_interleave(t, 2, -1)[..., ::2]: t itself
    if column is not None:
        source, node = column, ex.graph.nodes[column.node]
    halved = _first_half(ex, node)  # the table as the first half of one of equal halves
    if halved:
        node = ex.graph.nodes[_through_reshapes(ex, node.inputs[0]).node]
    angles = _through_reshapes(ex, node.inputs[0]) if node.op in ("cos", "sin") else None
    if angles is not None and halved:  # cos(concat(h, h)): the cosine of h
        wide = ex.graph.nodes[angles.node]
        same = wide.op == "concat" and len(wide.inputs) == 2 and wide.inputs[0] == wide.inputs[1]
        last = same and wide.params["axis"] == len(wide.shape) - 1
        angles = _through_reshapes(ex, wide.inputs[0]) if last else None
    if angles is None:
        name = ex.name_of(source, rotary)
        return _laid_out(ex, name, ex.graph.shape(source), (table[0], table[seq]), cache)
    angles_name = ex.name_of(angles, rotary)
    key = ("rotary-angles", angles_name, cache)
    if key not in ex.memo:
        rows = (table[0], table[seq])
        ex.memo[key] = _laid_out(ex, angles_name, ex.graph.shape(angles), rows, cache)
    made = ("rotary-table", node.op, angles_name, cache)  # one per angles: the layers share it
    if made not in ex.memo:
        ex.memo[made] = ex.fresh(f"{name}_cache")
        ex.emit(node.op.capitalize(), [ex.memo[key]], [ex.memo[made]])
    return str(ex.memo[made])


def _evens_of_pairs(ex: ExportContext, node: Node) -> Ref | None:
    """The column ``t`` when ``node`` takes every other entry (from the first) of the last axis
    of ``t`` doubled in place (``t`` with a unit axis at the end, expanded or tiled to 2 there,
    flattened back: how torch writes ``repeat_interleave(t, 2, -1)``); else None."""
    p = node.params
    if node.op != "slice" or p.get("step", 1) != 2 or p["start"] != 0:
        return None
    wide = _through_reshapes(ex, node.inputs[0])
    doubled = ex.graph.nodes[wide.node]
    tiled = doubled.op == "opaque" and doubled.params["type"] == "Tile"
    if (doubled.op != "expand" and not tiled) or doubled.shape[-1:] != (2,):
        return None
    merged = ex.graph.shape(node.inputs[0])[-1] == 2 * doubled.shape[-2]  # [..., D/2, 2] as D
    if ex.graph.shape(doubled.inputs[0])[-1:] != (1,) or len(doubled.shape) < 2 or not merged:
        return None
    return _through_reshapes(ex, doubled.inputs[0])


def _first_half(ex: ExportContext, node: Node) -> bool:
    """Whether ``node`` is the first half of its input's last axis (a rotary table cut from one
    of equal halves, as the rules write it)."""
    if node.op != "slice" or node.params.get("step", 1) != 1 or node.params["start"] != 0:
        return False
    shape = ex.graph.shape(node.inputs[0])
    return node.params["axis"] == len(shape) - 1 and 2 * node.params["end"] == shape[-1]


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
