"""What ONNX operators that relsat keeps opaque do to the bounds of values: the facts of values
(:mod:`relsat.graph.facts`) of an opaque node, from its inputs' and its own constants.

An eager attention (``softmax(q @ kt * s + mask) @ v``, no NaN guard) equals ONNX Attention only
where no row of the scores is -inf throughout (NaN unfused, 0 fused): it is, when every value of
the mask is finite, which the rule ``attention-eager-fuse`` requires (``where finite(?m)``). The
masks exporters build pass through ONNX operators relsat does not model (comparisons, ``Where``,
``Cast``): :func:`opaque_facts` bounds their outputs (float64 intervals within float32's range)
from ``Cast`` (its input's bounds, else its input type's range; to bool 0 or 1), comparisons and
logic ops (0 or 1; exactly 1, or 0, where the affine forms of their operands settle them at every
value of the dims: :mod:`relsat.onnx.affine`, a decode step's causal mask), ``Where`` (the union
of its two branches; the one branch where the condition is settled: torch's ViT export masks
nothing with a constant all-true condition), the arithmetic
of Add/Sub/Mul/Neg, ``CumSum`` (a sum of 1 to n of its input's values, n the axis's length: 0
to n for BLOOM's ALiBi positions of a 0/1 mask), and the data-movement ops that keep values
(Reshape, Expand, Unsqueeze, Squeeze, Transpose, Slice, Gather, Concat, Identity, Flatten,
Tile); an integer result whose bounds leave its type's range may have wrapped around: the
type's range. relsat's own operators are bounded by :func:`relsat.graph.facts.transfer`. A
float32 sum or product rounds an exact value just past float32's range to its largest finite
value (:func:`relsat.graph.facts.rounded`): BLOOM's mask of finfo.min plus its ALiBi bias
(positions times slopes, bounded by int64's range however the mask is given) is finite.

So ``Where(mask, 0, -1e9)``, ``(1 - Cast(bool)) * -10000`` and transformers 5's ``Where(mask,
0, finfo.min)`` are finite; ``Where(mask, 0, -inf)`` (torch's SDPA export) and a float graph
input are not; nor is ``(1 - Cast(int64 mask)) * finfo.min``: a mask value of -1 or 3 overflows
to infinity, and nothing in the graph says the integer mask holds 0 and 1 only.

onnxruntime's Attention reads a mask value of exactly float32's lowest (finfo.min) as -inf and
gives a row masked entirely by it 0, where the softmax it replaces gives the mean of v; relsat
writes every fused kernel's mask scaled by the float just below 1
(:func:`relsat.onnx.transformer_ops` ``_mask_in``), so no value reaching the kernel is the
lowest and such a row comes out as the softmax gives it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto

from relsat.graph.facts import Facts, analyse, bounded, of_value, rounded
from relsat.graph.graph import Graph, Node, Ref
from relsat.onnx import affine
from relsat.onnx.context import decode_tensor
from relsat.onnx.dimexpr import constant

if TYPE_CHECKING:
    from relsat.onnx.symbolic import Dims

__all__ = ["no_infinity", "opaque_facts"]

Range = tuple[float, float]

_BOOLEAN_OPS = frozenset(
    {"Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal", "And", "Or", "Not", "Xor"}
    | {"IsNaN", "IsInf"}
)
#: ONNX operators whose output holds values of their first input only.
_SAME_VALUES = frozenset(
    {"Reshape", "Expand", "Unsqueeze", "Squeeze", "Transpose", "Slice", "Gather"}
    | {"GatherElements", "Identity", "Flatten", "Tile"}
)
_INTEGER_RANGES: dict[int, Range] = {
    TensorProto.BOOL: (0.0, 1.0),
    TensorProto.UINT8: (0.0, 255.0),
    TensorProto.INT8: (-128.0, 127.0),
    TensorProto.UINT16: (0.0, 65535.0),
    TensorProto.INT16: (-32768.0, 32767.0),
    TensorProto.UINT32: (0.0, 2.0**32),
    TensorProto.INT32: (-(2.0**31), 2.0**31),
    TensorProto.UINT64: (0.0, 2.0**64),
    TensorProto.INT64: (-(2.0**63), 2.0**63),
}


def no_infinity(graph: Graph, ref: Ref) -> bool:
    """Whether tensor ``ref`` of a relsat graph provably holds no infinity and no NaN."""
    f = analyse(graph, opaque=opaque_facts, only=[ref]).get(ref)
    return f is not None and f.finite


def opaque_facts(
    graph: Graph, node: Node, ins: Sequence[Facts | None], dims: Dims | None = None
) -> Facts | None:
    """The bounds of an opaque ONNX node's (first) output, from its inputs' facts (``ins``, in
    the order of its tensor inputs) and the constants kept in its attributes, and its affine
    form (:mod:`relsat.onnx.affine`; ``dims``: the model's symbolic dims, None where all are
    static); None where unknown. A tensor whose affine form is one integer throughout (a
    settled comparison) is bounded by it exactly."""
    attrs = json.loads(node.params["attrs"])
    meta = attrs.get("_onnx", {})
    if meta.get("domain", "") not in ("", "ai.onnx"):
        return None
    op = node.params["type"]
    operands = _operands(meta, ins)

    def of(i: int) -> Range | None:
        return operands[i][0] if i < len(operands) else None

    out = TensorProto.DataType.Value(meta.get("out_dtypes", ["FLOAT"])[0])
    found: Range | None = None
    extent = dims.poly if dims is not None else constant
    if op == "Constant" and isinstance(attrs.get("value"), dict):  # a boolean or index constant
        array = decode_tensor(attrs["value"])
        ramp = affine.of_constant(array, dims)
        f = of_value(array)
        grid, rows = affine.index_facts(array, dims)  # a gather's index
        return Facts(
            f.lo, f.hi, affine=None if ramp is None else affine.encode(ramp), grid=grid, rows=rows
        )
    if op in _BOOLEAN_OPS:
        found = (0.0, 1.0)
    elif op in _SAME_VALUES:
        found = of(0)
    elif op == "Cast" and operands:
        found = _cast(of(0), operands[0][1], out)
    elif op == "CumSum" and of(0) is not None:
        found = _cumsum(of(0), graph.shape(node.inputs[0]), of(1), attrs)  # type: ignore[arg-type]
    elif op == "Where":
        found = _where(of(0), of(1), of(2))
    elif op == "Concat":
        found = _union(*(r for r, _ in operands)) if operands else None
    elif op == "Neg" and of(0) is not None:
        lo, hi = of(0)  # type: ignore[misc]
        found = (-hi, -lo)
    elif op in ("Add", "Sub", "Mul") and len(operands) == 2:
        a, b = of(0), of(1)
        if a is not None and b is not None:
            if op == "Add":
                found = (a[0] + b[0], a[1] + b[1])
            elif op == "Sub":
                found = (a[0] - b[1], a[1] - b[0])
            else:
                products = [x * y for x in a for y in b]
                found = (min(products), max(products))
    forms = _affine_operands(meta, ins, graph, node, dims) if out in affine.INTEGERS else []
    form = affine.transfer(op, attrs, forms, tuple(node.shape), out, extent)
    value = affine.uniform_value(form)
    if value is not None:
        found = (float(value), float(value))
    if found is not None and out in _INTEGER_RANGES:
        found = _wrapped(found, out)
    first_is_tensor = meta.get("inputs", [None])[:1] == ["t"]
    layout = op in ("Tile", "Expand") and first_is_tensor and _uniform_last(graph, node)
    # one float32 addition or product rounds a result just past float32's range to its largest
    once = op in ("Add", "Sub", "Mul") and out == TensorProto.FLOAT
    f = Facts(*(rounded if once else bounded)(*found)) if found is not None else Facts()
    if not f.finite:  # past float32's range: an intermediate may overflow
        f = Facts()
    encoded = None if form is None else affine.encode(form)
    rows = None if form is None else affine.row_dims(form, dims)
    grid = None
    if op == "Concat" and forms and node.shape:  # a GatherND's index
        grid = _concat_grid(attrs, forms, node.shape)
    f = Facts(f.lo, f.hi, layout, layout, affine=encoded, grid=grid, rows=rows)
    return None if f.empty else f


def _concat_grid(
    attrs: dict, operands: Sequence[affine.Operand], out: tuple[int, ...]
) -> tuple[int, ...] | None:
    """The ``grid`` fact of a Concat along the last axis of pieces whose last dim is 1 (the
    index torch's dynamo exporter writes for a GatherND: one component per piece)."""
    if attrs.get("axis", 0) % len(out) != len(out) - 1:
        return None
    parts: list[affine.Affine | None] = []
    for o in operands:
        v = o.value
        if v is None or v.shape[-1:] != (1,):
            return None
        parts.append(affine.affine(v.shape[:-1], v.offset, v.coefs[:-1]))
    return affine.components_grid(parts) if len(parts) == out[-1] else None


def _affine_operands(
    meta: dict, ins: Sequence[Facts | None], graph: Graph, node: Node, dims: Dims | None
) -> list[affine.Operand]:
    """An opaque ONNX node's operands in ONNX order, each with its affine form where known."""
    tensors = iter(zip(ins, node.inputs, meta.get("in_dtypes", []), strict=False))
    operands = []
    for entry in meta.get("inputs", []):
        if entry == "t":
            f, ref, dtype = next(tensors, (None, None, None))
            code = TensorProto.DataType.Value(dtype) if dtype else TensorProto.FLOAT
            v = affine.decode(f.affine) if f is not None else None
            if v is not None and ref is not None and v.shape != graph.shape(ref):
                v = None  # a form kept for another shape (a folded block's input)
            operands.append(affine.Operand(v, None, code))
        elif isinstance(entry, dict) and entry.get("dtype") not in ("STRING", None):
            code = TensorProto.DataType.Value(entry["dtype"])
            value = decode_tensor(entry)
            operands.append(affine.Operand(affine.of_constant(value, dims), value, code))
        else:
            operands.append(affine.Operand(None))
    return operands


def _cast(x: Range | None, source: int | None, target: int) -> Range | None:
    """``Cast`` of values bounded by ``x`` (None: only the source type's range bounds them):
    to bool, 0 or 1; to an integer type, truncated toward zero (within [floor(lo), ceil(hi)]);
    to a float type, rounded (the bounds kept)."""
    x = x or _INTEGER_RANGES.get(source or 0)
    if target == TensorProto.BOOL:
        return (0.0, 1.0)
    if x is not None and target in _INTEGER_RANGES:
        return float(np.floor(x[0])), float(np.ceil(x[1]))
    return x


def _cumsum(x: Range, shape: tuple[int, ...], axis: Range | None, attrs: dict) -> Range | None:
    """``CumSum`` of values bounded by ``x``: a sum of k of them for k = 1..n along the axis
    (k = 0..n - 1 when exclusive: the first sum is empty, 0), n the axis's length (every dim's
    largest where the axis is computed). A sum of k values lies in [k * lo, k * hi]; over the k,
    [min(lo, n * lo), max(hi, n * hi)], 0 included when exclusive."""
    if not shape or any(d < 1 for d in shape):
        return None
    if axis is not None and axis[0] == axis[1] and -len(shape) <= axis[0] < len(shape):
        n = shape[int(axis[0])]
    else:
        n = max(shape)
    exclusive = bool(attrs.get("exclusive", 0))
    first, last = (0, n - 1) if exclusive else (1, n)
    lo, hi = x
    return min(first * lo, last * lo), max(first * hi, last * hi)


def _wrapped(x: Range, dtype: int) -> Range:
    """Bounds of an integer result: integer arithmetic wraps around, so bounds past the type's
    range are its whole range."""
    low, high = _INTEGER_RANGES[dtype]
    return x if low <= x[0] and x[1] <= high else (low, high)


def _uniform_last(graph: Graph, node: Node) -> bool:
    """A Tile or Expand of a tensor whose last dim is 1 to an even one: one value along the last
    axis, so equal halves and equal pairs (torch's repeat_interleave(t, 2, -1) of a column)."""
    shape, out = graph.shape(node.inputs[0]), node.shape
    return bool(shape) and shape[-1] == 1 and bool(out) and out[-1] % 2 == 0


def _operands(meta: dict, ins: Sequence[Facts | None]) -> list[tuple[Range | None, int | None]]:
    """The node's operands in ONNX order: (bounds, dtype) of a tensor input (its facts) or of a
    constant kept in the attributes; (None, None) for an absent one."""
    tensors = iter(ins)
    dtypes = iter(meta.get("in_dtypes", []))
    out: list[tuple[Range | None, int | None]] = []
    for entry in meta.get("inputs", []):
        if entry == "t":
            f = next(tensors, None)
            dtype = next(dtypes, None)
            code = TensorProto.DataType.Value(dtype) if dtype else TensorProto.FLOAT
            out.append(((f.lo, f.hi) if f is not None and f.finite else None, code))  # type: ignore[arg-type]
        elif isinstance(entry, dict):
            code = TensorProto.DataType.Value(entry["dtype"])
            if code == TensorProto.STRING:
                out.append((None, code))
                continue
            f = of_value(decode_tensor(entry))
            out.append(((f.lo, f.hi) if f.finite else None, code))  # type: ignore[arg-type]
        else:
            out.append((None, None))
    return out


def _where(cond: Range | None, then: Range | None, other: Range | None) -> Range | None:
    """``Where(cond, then, other)``: one branch where the condition is settled (every value
    true, or every value false: a padding mask of a model given no padding), else both."""
    if cond is not None and cond[0] > 0:
        return then
    if cond is not None and cond[1] <= 0:
        return other
    return _union(then, other)


def _union(*parts: Range | None) -> Range | None:
    if any(p is None for p in parts):
        return None
    return min(p[0] for p in parts), max(p[1] for p in parts)  # type: ignore[index]
