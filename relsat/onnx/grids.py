"""Index grids and settled comparisons in the masks exporters build, read at import.

transformers' attention masks (``sdpa_mask``) are computed per call from ``Range``\\ s. The
padding part picks ``attention_mask[b, k]`` at every position of a ``[batch, 1, q, kv]`` grid
(torch's dynamo exporter: a ``GatherND`` at an index built from two ``Range``\\ s, ``Expand``
and ``Concat``; the legacy exporter: a ``Gather`` from the flattened mask at ``b * kv + k``);
the causal part compares key positions with query positions (``k <= q``). At fixed shapes
onnxruntime folds all of that into constants; at symbolic dims it runs on every call: a dozen
small nodes, a tenth of a decode step's time. Most of it is a view, or a constant:

* a gather at an *index grid* — each component of the index is the position along one axis
  of the output and runs over the whole of one dim of the data, in the data's order — is the
  data with unit axes inserted (``Unsqueeze``; ``Squeeze`` first for a data dim of 1 that no
  component moves along);
* a comparison whose outcome is the same at every position and at every value of the dims (a
  decode step's ``Range(0, past + 1) <= past``) is settled; an ``And`` with an all-true
  operand (an ``Or`` with an all-false one, a ``Where`` with a settled condition) is its other
  operand, where that already has the output's shape.

What is known of an integer tensor is an :class:`Affine`: every element is ``offset + Σ
coefs[a] * i_a`` at index ``(i_0, ...)``, the offset and the coefficients polynomials over the
dims (:meth:`~relsat.onnx.symbolic.Dims.poly`: ``past + 1``, not its marker), so a comparison
is settled only where it holds at every value of the dims (:func:`~relsat.onnx.dimexpr.sign`).
A grid's extents are compared as numbers at the markers (equal there only when equal as
expressions: :mod:`relsat.onnx.symbolic`). Leaves: integer constants (uniform, or a ramp such
as a folded ``Range``) and ``Range``; carried through Identity, Cast between integer types,
Unsqueeze, Squeeze, Reshape (inserting or dropping unit dims), Expand, Add, Sub, Mul (by a
uniform factor), Neg, and the comparisons and logic ops.

:func:`plan` finds the rewrites; the importer applies them (:class:`Plan`) before converting,
and the nodes they leave unread are dropped with the rest of the unreachable graph.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import onnx
from onnx import NodeProto, TensorProto, helper

from relsat.onnx.constants import evaluate
from relsat.onnx.context import axes_of
from relsat.onnx.dimexpr import Poly, add, constant, multiply, sign
from relsat.onnx.symbolic import Dims

__all__ = ["Affine", "Plan", "plan"]

#: How far back a value is read (a mask index is a dozen nodes from its Ranges).
DEPTH = 24
#: Constants larger than this are not read as ramps.
RAMP_LIMIT = 1 << 16

_INTEGERS = frozenset(
    {TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64}
    | {TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64}
    | {TensorProto.BOOL}
)
_COMPARISONS = frozenset({"Less", "LessOrEqual", "Greater", "GreaterOrEqual"})
_ONE = constant(1)


class Model(Protocol):
    """What :func:`plan` reads (:class:`relsat.onnx.importer.Importer` provides it)."""

    model: onnx.ModelProto
    symbolic: frozenset[str]
    opset: int

    def const(self, name: str) -> np.ndarray | None: ...

    def dtype(self, name: str) -> int: ...

    def static_shape(self, name: str) -> tuple[int, ...] | None: ...


@dataclass(frozen=True)
class Affine:
    """An integer tensor of ``shape`` (at the markers) whose element at ``(i_0, ...)`` is
    ``offset + Σ coefs[a] * i_a``; the coefficient of a unit axis is 0."""

    shape: tuple[int, ...]
    offset: Poly
    coefs: tuple[Poly, ...]

    @property
    def uniform(self) -> bool:
        return not any(self.coefs)


def _affine(shape: tuple[int, ...], offset: Poly, coefs: tuple[Poly, ...]) -> Affine:
    return Affine(
        shape, offset, tuple(() if n == 1 else c for n, c in zip(shape, coefs, strict=True))
    )


def _aligned(v: Affine, shape: tuple[int, ...]) -> tuple[Poly, ...] | None:
    """``v``'s coefficients broadcast to ``shape`` (None when it does not broadcast)."""
    pad = len(shape) - len(v.shape)
    if pad < 0:
        return None
    coefs: list[Poly] = [()] * pad
    for n, m, c in zip(v.shape, shape[pad:], v.coefs, strict=True):
        if n not in (1, m):
            return None
        coefs.append(c if n == m else ())
    return tuple(coefs)


@dataclass
class Plan:
    """The rewrites :func:`plan` found: tensor renames (readers of the key read the value
    instead), nodes replaced (index → the nodes written in its place), and the constants and
    tensor types those nodes add."""

    renames: dict[str, str] = field(default_factory=dict)
    replaced: dict[int, list[NodeProto]] = field(default_factory=dict)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    types: dict[str, tuple[int, tuple[int, ...]]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.renames or self.replaced)


def plan(model: Model, dims: Dims | None = None) -> Plan:
    """The index grids and settled mask operands of ``model`` (see the module docstring), its
    dims ``dims`` (None: all static)."""
    return _Planner(model, dims).run()


class _Planner:
    def __init__(self, model: Model, dims: Dims | None) -> None:
        self.m = model
        self.dims = dims
        self.graph = model.model.graph
        self.producers = {o: n for n in self.graph.node for o in n.output if o}
        self.memo: dict[str, Affine | None] = {}
        self.names = {o for n in self.graph.node for o in n.output} | {
            *(i.name for i in self.graph.input),
            *(t.name for t in self.graph.initializer),
        }
        self.out = Plan()

    def run(self) -> Plan:
        outputs = {o.name for o in self.graph.output}
        for k, node in enumerate(self.graph.node):
            if node.domain not in ("", "ai.onnx") or len(node.output) != 1:
                continue
            if node.output[0] in outputs:
                continue
            if node.op_type in ("And", "Or", "Where"):
                kept = self._settled_operand(node)
                if kept is not None:
                    self.out.renames[node.output[0]] = kept
            elif node.op_type in ("GatherND", "Gather"):
                nodes = self._grid_gather(node)
                if nodes is not None:
                    self.out.replaced[k] = nodes
        return self.out

    # --- reading values ---------------------------------------------------------------------

    def shape(self, name: str) -> tuple[int, ...] | None:
        return self.m.static_shape(name)

    def const(self, name: str) -> np.ndarray | None:
        value = self.m.const(name)
        if value is not None or not name:
            return value
        node = self.producers.get(name)
        if node is None or node.op_type != "Constant":
            return None
        folded = evaluate(node, self.m.const)
        return None if folded is None else folded[0]

    def number(self, v: int, name: str) -> Poly:
        """A value read from tensor ``name`` (a dim's marker product when it is symbolic)."""
        if self.dims is not None and name in self.m.symbolic:
            return self.dims.poly(int(v))
        return constant(int(v))

    def extent(self, n: int) -> Poly:
        return self.dims.poly(n) if self.dims is not None else constant(n)

    def value(self, name: str, depth: int = DEPTH) -> Affine | None:
        if name not in self.memo:
            self.memo[name] = self._value(name, depth) if name else None
        return self.memo[name]

    def _value(self, name: str, depth: int) -> Affine | None:
        array = self.const(name)
        if array is not None:
            return self._constant(array, name)
        node = self.producers.get(name)
        if node is None or depth == 0 or node.domain not in ("", "ai.onnx"):
            return None
        if len(node.output) != 1 or self.m.dtype(name) not in _INTEGERS:
            return None
        read = {
            "Identity": self._same,
            "Cast": self._cast,
            "Range": self._range,
            "Unsqueeze": self._unsqueeze,
            "Squeeze": self._squeeze,
            "Reshape": self._reshape,
            "Expand": self._expand,
            "Add": self._arith,
            "Sub": self._arith,
            "Mul": self._arith,
            "Neg": self._arith,
            "And": self._logic,
            "Or": self._logic,
            "Not": self._logic,
            **dict.fromkeys(_COMPARISONS, self._compare),
        }.get(node.op_type)
        if read is None:
            return None
        ins = [self.value(i, depth - 1) if i else None for i in node.input]
        return read(node, ins)

    def _constant(self, array: np.ndarray, name: str) -> Affine | None:
        if array.dtype.kind not in "iub" or array.size == 0 or array.size > RAMP_LIMIT:
            return None
        a = array.astype(np.int64)
        shape = tuple(int(n) for n in a.shape)
        first = a.reshape(-1)[0]
        if (a == first).all():
            return _affine(shape, self.number(first, name), (constant(0),) * a.ndim)
        if name in self.m.symbolic:
            return None  # a ramp of dims: not an exporter's index
        steps = [
            int(a[tuple(1 if i == axis else 0 for i in range(a.ndim))] - first) if n > 1 else 0
            for axis, n in enumerate(shape)
        ]
        ramp = first + sum(
            s * np.arange(n).reshape([-1 if i == axis else 1 for i in range(a.ndim)])
            for axis, (s, n) in enumerate(zip(steps, shape, strict=True))
        )
        if not np.array_equal(a, np.broadcast_to(ramp, shape)):
            return None
        return _affine(shape, constant(int(first)), tuple(constant(s) for s in steps))

    def _same(self, node: NodeProto, ins: list[Affine | None]) -> Affine | None:
        return ins[0]

    def _cast(self, node: NodeProto, ins: list[Affine | None]) -> Affine | None:
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        v = ins[0]
        if v is None or to not in _INTEGERS or self.m.dtype(node.input[0]) not in _INTEGERS:
            return None
        if to != TensorProto.BOOL:
            return v
        settled = _truth(v)
        return None if settled is None else _affine(v.shape, constant(int(settled)), v.coefs)

    def _range(self, node: NodeProto, ins: list[Affine | None]) -> Affine | None:
        start, limit, delta = (self.const(i) for i in node.input[:3])
        if start is None or limit is None or delta is None or int(delta.reshape(-1)[0]) == 0:
            return None
        s, lim, d = (int(v.reshape(-1)[0]) for v in (start, limit, delta))
        n = max(math.ceil((lim - s) / d), 0)
        if ins[0] is None or ins[2] is None:
            return None
        return _affine((n,), ins[0].offset, (ins[2].offset,))

    def _unsqueeze(self, node: NodeProto, ins: list[Affine | None]) -> Affine | None:
        v, axes = ins[0], axes_of(node, self.const)
        if v is None or not axes:
            return None
        rank = len(v.shape) + len(axes)
        at = {a % rank for a in axes}
        shape, coefs = list(v.shape), list(v.coefs)
        for a in sorted(at):
            shape.insert(a, 1)
            coefs.insert(a, ())
        return _affine(tuple(shape), v.offset, tuple(coefs))

    def _squeeze(self, node: NodeProto, ins: list[Affine | None]) -> Affine | None:
        v, axes = ins[0], axes_of(node, self.const)
        if v is None or axes is None:
            return None
        rank = len(v.shape)
        drop = {a % rank for a in axes} if axes else {a for a, n in enumerate(v.shape) if n == 1}
        if any(v.shape[a] != 1 for a in drop):
            return None
        keep = [a for a in range(rank) if a not in drop]
        return _affine(tuple(v.shape[a] for a in keep), v.offset, tuple(v.coefs[a] for a in keep))

    def _reshape(self, node: NodeProto, ins: list[Affine | None]) -> Affine | None:
        v, shape = ins[0], self.shape(node.output[0])
        if v is None or shape is None:
            return None
        if v.uniform:
            return _affine(shape, v.offset, ((),) * len(shape))
        moved = [(n, c) for n, c in zip(v.shape, v.coefs, strict=True) if n != 1]
        if [n for n, _ in moved] != [n for n in shape if n != 1]:
            return None
        coefs = iter(c for _, c in moved)
        return _affine(shape, v.offset, tuple(next(coefs) if n != 1 else () for n in shape))

    def _expand(self, node: NodeProto, ins: list[Affine | None]) -> Affine | None:
        v, shape = ins[0], self.shape(node.output[0])
        if v is None or shape is None:
            return None
        coefs = _aligned(v, shape)
        return None if coefs is None else _affine(shape, v.offset, coefs)

    def _arith(self, node: NodeProto, ins: list[Affine | None]) -> Affine | None:
        if node.op_type == "Neg":
            return None if ins[0] is None else _negated(ins[0])
        if len(ins) != 2 or ins[0] is None or ins[1] is None:
            return None
        a, b = ins[0], ins[1]
        if node.op_type == "Sub":
            b = _negated(b)
        if node.op_type == "Mul":
            if not (a.uniform or b.uniform):
                return None
            if a.uniform:
                a, b = b, a  # b is the factor
            k = b.offset
            a = _affine(a.shape, multiply(a.offset, k), tuple(multiply(c, k) for c in a.coefs))
            b = _affine(b.shape, (), ((),) * len(b.shape))
        return _plus(a, b)

    def _logic(self, node: NodeProto, ins: list[Affine | None]) -> Affine | None:
        if any(v is None for v in ins) or not ins:
            return None
        truths = [_truth(v) for v in ins]  # type: ignore[arg-type]
        if any(t is None for t in truths):
            return None
        op = node.op_type
        result = (not truths[0]) if op == "Not" else all(truths) if op == "And" else any(truths)
        try:
            shape = np.broadcast_shapes(*(v.shape for v in ins if v is not None))
        except ValueError:
            return None
        return _affine(tuple(int(n) for n in shape), constant(int(result)), ((),) * len(shape))

    def _compare(self, node: NodeProto, ins: list[Affine | None]) -> Affine | None:
        if len(ins) != 2 or ins[0] is None or ins[1] is None:
            return None
        a, b = ins[0], ins[1]
        if node.op_type in ("Greater", "GreaterOrEqual"):
            a, b = b, a
        strict = node.op_type in ("Less", "Greater")
        d = _plus(a, _negated(b))
        bounds = None if d is None else self._bounds(d)
        if d is None or bounds is None:
            return None
        low, high = bounds
        # a < b  <=>  d <= -1;  a <= b  <=>  d <= 0 (integers)
        limit = -1 if strict else 0
        if sign(add(high, constant(-limit))) in (0, -1):
            truth = 1
        elif sign(add(low, constant(-limit - 1))) in (0, 1):
            truth = 0
        else:
            return None
        return _affine(d.shape, constant(truth), ((),) * len(d.shape))

    def _bounds(self, v: Affine) -> tuple[Poly, Poly] | None:
        """The least and the greatest element of ``v`` as polynomials (None when a coefficient's
        sign changes with the dims)."""
        low = high = v.offset
        for n, c in zip(v.shape, v.coefs, strict=True):
            if not c:
                continue
            s = sign(c)
            if s is None:
                return None
            span = multiply(c, add(self.extent(n), constant(-1)))
            if s > 0:
                high = add(high, span)
            else:
                low = add(low, span)
        return low, high

    # --- rewrites ---------------------------------------------------------------------------

    def _settled_operand(self, node: NodeProto) -> str | None:
        """The operand an And / Or / Where with a settled operand equals, if any."""
        out = self.shape(node.output[0])
        if out is None:
            return None
        if node.op_type == "Where":
            condition = self.value(node.input[0])
            truth = None if condition is None else _truth(condition)
            if truth is None:
                return None
            kept = node.input[1] if truth else node.input[2]
            return kept if self.shape(kept) == out else None
        neutral = node.op_type == "And"  # And keeps the other where one is all true; Or, false
        for i, other in ((0, 1), (1, 0)):
            v = self.value(node.input[i])
            if v is not None and _truth(v) is neutral and self.shape(node.input[other]) == out:
                return node.input[other]
        return None

    def _grid_gather(self, node: NodeProto) -> list[NodeProto] | None:
        """The nodes a GatherND, or a Gather from a flattened tensor, at an index grid is."""
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        data, index = node.input[0], node.input[1]
        index_shape = self.shape(index)
        if index_shape is None or len(index_shape) == 0:
            return None
        if node.op_type == "GatherND":
            if attrs.get("batch_dims", 0) != 0:
                return None
            source, shape = data, self.shape(data)
            parts = self._components(index, index_shape)
            if shape is None or parts is None or len(parts) > len(shape):
                return None
            lead, trailing = index_shape[:-1], False
            axes = self._unit_grid(parts, lead, shape[: len(parts)])
        else:
            flat = self.shape(data)
            producer = self.producers.get(data)
            if flat is None or producer is None or attrs.get("axis", 0) % len(flat) != 0:
                return None
            if producer.op_type not in ("Flatten", "Reshape"):
                return None  # a Constant (a rotary table's rows), or data computed otherwise
            source = producer.input[0]
            shape = self.shape(source)
            if shape is None or not self._flattens(producer, shape, flat):
                return None
            v = self.value(index)
            if v is None:
                return None
            lead, trailing = index_shape, len(flat) == 2
            axes = self._strided_grid(v, lead, shape)
        if axes is None:
            return None
        # An axis of the grid shorter than its data dim reads the dim's first rows (the batch of
        # input_ids beside that of the attention mask: two dims to dynamo; the legacy exporter's
        # past + 1 keys of a mask of total_sequence_length); where it is longer, the original
        # fails: a GatherND index out of its dim, or a row index past the flattened data when
        # the other dims are whole (so one such dim at most for a Gather).
        rows = {j: lead[a] for j, a in enumerate(axes) if a is not None and lead[a] != shape[j]}
        if node.op_type == "Gather" and len(rows) > 1:
            return None
        return self._view(node, source, shape, lead, axes, trailing, rows)

    def _components(self, index: str, shape: tuple[int, ...]) -> list[Affine] | None:
        """The components of a GatherND index (its last axis) as values over its other axes."""
        k = shape[-1]
        array = self.const(index)
        if array is not None:
            parts = [self._constant(array[..., j], "") for j in range(k)]
            return None if any(p is None for p in parts) else parts  # type: ignore[return-value]
        node = self.producers.get(index)
        if node is None or node.op_type != "Concat":
            return None
        axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 0)
        if axis % len(shape) != len(shape) - 1:
            return None
        out = []
        for part in node.input:
            v = self.value(part)
            if v is None or v.shape[-1:] != (1,):
                return None
            out.append(_affine(v.shape[:-1], v.offset, v.coefs[:-1]))
        return out if len(out) == k else None

    def _unit_grid(
        self, parts: list[Affine], lead: tuple[int, ...], dims: tuple[int, ...]
    ) -> list[int | None] | None:
        """Per data dim, the output axis its component runs along (None: a dim of 1 no component
        moves along), when each component is the position along one axis (over the dim's first
        rows when the axis is shorter: the view then slices the data)."""
        axes: list[int | None] = []
        for part, n in zip(parts, dims, strict=True):
            if part.shape != lead or part.offset:
                return None
            moving = [a for a, c in enumerate(part.coefs) if c]
            if not moving and n == 1:
                axes.append(None)
            elif len(moving) == 1 and part.coefs[moving[0]] == _ONE:
                axes.append(moving[0])
            else:
                return None
        return axes if _in_order(axes, lead) else None

    def _strided_grid(
        self, v: Affine, lead: tuple[int, ...], dims: tuple[int, ...]
    ) -> list[int | None] | None:
        """As :meth:`_unit_grid`, for a row index into the flattened data: the coefficient of
        each moving output axis is the row-major stride of the data dim it runs over."""
        if v.shape != lead or v.offset:
            return None
        strides = [_product(self.extent(m) for m in dims[j + 1 :]) for j in range(len(dims))]
        axes: list[int | None] = [None] * len(dims)
        for a, c in enumerate(v.coefs):
            if not c:
                continue
            j = next((j for j in range(len(dims)) if dims[j] != 1 and strides[j] == c), None)
            if j is None or axes[j] is not None:
                return None
            axes[j] = a
        if any(a is None and n != 1 for a, n in zip(axes, dims, strict=True)):
            return None
        return axes if _in_order(axes, lead) else None

    def _flattens(self, node: NodeProto, shape: tuple[int, ...], flat: tuple[int, ...]) -> bool:
        """Whether ``node`` flattens a tensor of ``shape`` whole: into ``[size]`` (Reshape) or
        ``[size, 1]`` (Flatten at its last axis)."""
        size = math.prod(shape)
        if node.op_type == "Flatten":
            axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
            return axis % (len(shape) + 1) == len(shape) and flat == (size, 1)
        return node.op_type == "Reshape" and flat == (size,)

    def _view(
        self,
        node: NodeProto,
        source: str,
        shape: tuple[int, ...],
        lead: tuple[int, ...],
        axes: list[int | None],
        trailing: bool,
        rows: dict[int, int],
    ) -> list[NodeProto]:
        """``source`` (of ``shape``) cut to ``rows`` (dim → its first rows), with the dims no
        component runs along squeezed out and the output axes none runs along inserted: the
        gather ``node``'s output."""
        out = node.output[0]
        nodes: list[NodeProto] = []
        if rows:
            cut = self._fresh(f"{out}_rows")
            bounds = [
                self._constant_input(f"{out}_{what}", values)
                for what, values in (
                    ("starts", [0] * len(rows)),
                    ("ends", list(rows.values())),
                    ("slice_axes", list(rows)),
                )
            ]
            nodes.append(helper.make_node("Slice", [source, *bounds], [cut]))
            shape = tuple(rows.get(j, n) for j, n in enumerate(shape))
            self.out.types[cut] = (self.m.dtype(source), shape)
            source = cut
        squeeze = [j for j, a in enumerate(axes) if a is None]
        if squeeze:
            squeezed = self._fresh(f"{out}_grid")
            kept = tuple(n for j, n in enumerate(shape) if j not in squeeze)
            nodes.append(self._axes_node("Squeeze", source, squeeze, squeezed))
            self.out.types[squeezed] = (self.m.dtype(source), kept)
            source = squeezed
        moved = {a for a in axes if a is not None}
        insert = [a for a in range(len(lead)) if a not in moved]
        if trailing:
            insert.append(len(lead))
        if insert:
            nodes.append(self._axes_node("Unsqueeze", source, insert, out))
        else:
            nodes.append(helper.make_node("Identity", [source], [out]))
        return nodes

    def _axes_node(self, op: str, source: str, axes: list[int], out: str) -> NodeProto:
        if self.m.opset < 13:
            return helper.make_node(op, [source], [out], axes=axes)
        return helper.make_node(op, [source, self._constant_input(f"{out}_axes", axes)], [out])

    def _constant_input(self, base: str, values: list[int]) -> str:
        name = self._fresh(base)
        self.out.constants[name] = np.array(values, dtype=np.int64)
        return name

    def _fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name


def _product(polys: Iterable[Poly]) -> Poly:
    out = _ONE
    for p in polys:
        out = multiply(out, p)
    return out


def _negated(v: Affine) -> Affine:
    minus = constant(-1)
    return Affine(v.shape, multiply(minus, v.offset), tuple(multiply(minus, c) for c in v.coefs))


def _plus(a: Affine, b: Affine) -> Affine | None:
    """``a + b`` broadcast (None when they do not broadcast)."""
    try:
        shape = tuple(int(n) for n in np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        return None
    ca, cb = _aligned(a, shape), _aligned(b, shape)
    if ca is None or cb is None:
        return None
    return _affine(
        shape, add(a.offset, b.offset), tuple(add(x, y) for x, y in zip(ca, cb, strict=True))
    )


def _truth(v: Affine) -> bool | None:
    """The truth of every element of ``v`` when it is the same constant throughout."""
    if not v.uniform:
        return None
    if not v.offset:
        return False
    if len(v.offset) == 1 and v.offset[0][0] == ():
        return True
    return None


def _in_order(axes: list[int | None], lead: tuple[int, ...]) -> bool:
    """Whether the moving axes increase with the data dims and cover every non-unit output
    axis."""
    moved = [a for a in axes if a is not None]
    covered = set(moved)
    return moved == sorted(covered) and all(n == 1 or a in covered for a, n in enumerate(lead))
