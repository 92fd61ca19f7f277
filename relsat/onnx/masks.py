"""Attention masks the importer can prove finite: the value range of an ONNX tensor, read back
through the nodes that built it.

An eager attention (``softmax(q @ kt * s + mask) @ v``, no NaN guard) equals ONNX Attention only
where no row of the scores is -inf throughout (NaN unfused, 0 fused): it is, when every value
of the mask is finite. :func:`value_range` bounds a tensor's values (float64 interval, or None
when nothing is known) from constants, ``Cast`` from bool (0 or 1) and from integer types (the
type's range), comparisons and logic ops (0 or 1), ``Where`` (the union of its two branches:
the condition is never needed), the arithmetic of Add/Sub/Mul/Neg, and the data-movement ops
that keep values (Reshape, Expand, Unsqueeze, Squeeze, Transpose, Slice, Gather, Concat,
Identity, Flatten, Tile). :func:`is_finite` holds when the range lies within float32's.

So ``Where(mask, 0, -1e9)``, ``(1 - Cast(bool)) * -10000`` and transformers 5's ``Where(mask,
0, finfo.min)`` pass; ``Where(mask, 0, -inf)`` (torch's SDPA export) and a float graph input do
not; nor does ``(1 - Cast(int64 mask)) * finfo.min``: a mask value of -1 or 3 overflows to
infinity, and nothing in the graph says the integer mask holds 0 and 1 only.

onnxruntime's Attention reads a mask value of exactly float32's lowest (finfo.min) as -inf and
gives a row masked entirely by it 0, where the softmax it replaces gives the mean of v; relsat
writes every fused kernel's mask scaled by the float just below 1
(:func:`relsat.onnx.transformer_ops` ``_mask_in``), so no value reaching the kernel is the
lowest and such a row comes out as the softmax gives it.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Protocol

import numpy as np
from onnx import TensorProto, helper

from relsat.graph.graph import Graph as RelsatGraph
from relsat.graph.graph import Ref

__all__ = ["GraphView", "is_finite", "no_infinity", "value_range"]

Range = tuple[float, float]

#: float32's largest finite value.
FLT_MAX = float(np.finfo(np.float32).max)
#: How deep :func:`value_range` reads back (a mask is a handful of nodes from its source).
DEPTH = 32

_BOOLEAN_OPS = frozenset(
    {"Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal", "And", "Or", "Not", "Xor"}
    | {"IsNaN", "IsInf"}
)
_SAME_VALUES = {  # op → the input whose values the output keeps
    "Reshape": 0,
    "Expand": 0,
    "Unsqueeze": 0,
    "Squeeze": 0,
    "Transpose": 0,
    "Slice": 0,
    "Gather": 0,
    "GatherElements": 0,
    "Identity": 0,
    "Flatten": 0,
    "Tile": 0,
}
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


class Graph(Protocol):
    """What the analysis reads (:class:`relsat.onnx.importer.Importer` provides it)."""

    def const(self, name: str) -> np.ndarray | None: ...

    def producer(self, name: str) -> object | None: ...

    def dtype(self, name: str) -> int: ...


class GraphView:
    """A relsat graph read as the ONNX graph :func:`value_range` walks: a tensor is named
    ``"<node>:<index>"``; an opaque node is its ONNX node (its constant inputs, kept in its
    attributes, named ``"c<node>:<position>"``); reshape, transpose and ``finite`` keep values
    (Identity); weights and scalars are constants; other relsat ops are not read back."""

    def __init__(self, graph: RelsatGraph) -> None:
        self.graph = graph
        self.consts: dict[str, np.ndarray] = {}
        self.dtypes: dict[str, int] = {}

    @staticmethod
    def name(ref: Ref) -> str:
        return f"{ref.node}:{ref.index}"

    def const(self, name: str) -> np.ndarray | None:
        if name.startswith("c"):
            return self.consts.get(name)
        n = self.graph.node(self._ref(name))
        if n.op == "weight":
            return self.graph.values.get(n.name or "")
        if n.op == "scalar":
            return np.asarray(n.params["value"], np.float32)
        return None

    def producer(self, name: str) -> object | None:
        if name.startswith("c"):
            return None
        n = self.graph.node(self._ref(name))
        if n.op in ("reshape", "transpose", "finite"):
            return SimpleNamespace(op_type="Identity", domain="", input=[self.name(n.inputs[0])])
        if n.op != "opaque":
            return None
        meta = json.loads(n.params["attrs"]).get("_onnx", {})
        tensors = iter(n.inputs)
        dtypes = iter(meta.get("in_dtypes", []))
        names = []
        for i, entry in enumerate(meta.get("inputs", [])):
            if entry == "t":
                names.append(self.name(next(tensors)))
                dtype = next(dtypes, None)
                if dtype is not None:
                    self.dtypes[names[-1]] = TensorProto.DataType.Value(dtype)
            elif isinstance(entry, dict):
                names.append(f"c{n.id}:{i}")
                code = TensorProto.DataType.Value(entry["dtype"])
                self.dtypes[names[-1]] = code
                if code != TensorProto.STRING:
                    kind = helper.tensor_dtype_to_np_dtype(code)
                    value = np.array(entry["data"], dtype=kind).reshape(entry["dims"])
                    self.consts[names[-1]] = value
            else:
                names.append("")
        domain = meta.get("domain", "")
        return SimpleNamespace(op_type=n.params["type"], domain=domain, input=names)

    def dtype(self, name: str) -> int:
        if name in self.dtypes:
            return self.dtypes[name]
        return 0 if name.startswith("c") else TensorProto.FLOAT

    def _ref(self, name: str) -> Ref:
        node, index = name.split(":")
        return Ref(int(node), int(index))


def no_infinity(graph: RelsatGraph, ref: Ref) -> bool:
    """Whether tensor ``ref`` of a relsat graph provably holds no infinity and no NaN (its
    :func:`value_range` read back through a :class:`GraphView` lies within float32's)."""
    r = value_range(GraphView(graph), GraphView.name(ref))
    return r is not None and -FLT_MAX <= r[0] and r[1] <= FLT_MAX


def is_finite(g: Graph, name: str) -> bool:
    """Whether every value of tensor ``name`` is provably a finite float32 (no infinity, no
    NaN)."""
    r = value_range(g, name)
    return r is not None and -FLT_MAX <= r[0] and r[1] <= FLT_MAX


def value_range(g: Graph, name: str, depth: int = DEPTH) -> Range | None:
    """``(low, high)`` bounding every value of ``name`` (NaN excluded), or None."""
    value = g.const(name)
    if value is not None:
        v = np.asarray(value, dtype=np.float64)
        if v.size == 0 or np.isnan(v).any():
            return None
        return float(v.min()), float(v.max())
    node = g.producer(name)
    if node is None or depth == 0 or getattr(node, "domain", "") not in ("", "ai.onnx"):
        return None
    op, ins = node.op_type, [i for i in node.input]  # type: ignore[attr-defined]

    def of(i: int) -> Range | None:
        return value_range(g, ins[i], depth - 1) if len(ins) > i and ins[i] else None

    if op in _BOOLEAN_OPS:
        return 0.0, 1.0
    if op in _SAME_VALUES:
        return of(_SAME_VALUES[op])
    if op == "Cast":
        source = g.dtype(ins[0])
        if source in _INTEGER_RANGES:
            return _INTEGER_RANGES[source]
        return of(0)
    if op == "Where":
        return _union(of(1), of(2))
    if op == "Concat":
        parts = [value_range(g, i, depth - 1) for i in ins]
        return _union(*parts) if parts else None
    if op == "Neg":
        r = of(0)
        return None if r is None else (-r[1], -r[0])
    if op in ("Add", "Sub", "Mul") and len(ins) == 2:
        a, b = of(0), of(1)
        if a is None or b is None:
            return None
        if op == "Add":
            return _checked(a[0] + b[0], a[1] + b[1])
        if op == "Sub":
            return _checked(a[0] - b[1], a[1] - b[0])
        products = [x * y for x in a for y in b]
        return _checked(min(products), max(products))
    return None


def _union(*parts: Range | None) -> Range | None:
    if any(p is None for p in parts):
        return None
    return min(p[0] for p in parts), max(p[1] for p in parts)  # type: ignore[index]


def _checked(low: float, high: float) -> Range | None:
    """A computed range, or None where an intermediate may overflow float32 (inf - inf)."""
    if not (-FLT_MAX <= low and high <= FLT_MAX):
        return None
    return low, high
