"""Index grids that read only the first rows of their data, cut at import.

transformers' padding mask picks ``attention_mask[b, k]`` at every position of a ``[batch, 1,
q, kv]`` grid: torch's dynamo exporter writes a ``GatherND`` at an index built from ``Range``\\ s,
``Unsqueeze``, ``Expand`` and a ``Concat`` along the last axis; the legacy exporter a ``Gather``
(axis 0) from the flattened mask at row ``b * kv + k``. Where such an index reads its data
whole, the gather is the data reshaped, by the rules of ``rules/masks.rules`` over the facts
``grid`` and ``rows`` of the index (:func:`relsat.onnx.affine.grid_dims`, :func:`~relsat.onnx.
affine.row_dims`). What is left here (issue 39) is the grid shorter than its data along an
axis: the view is then a ``Slice`` of the first rows (plus ``Squeeze`` / ``Unsqueeze``), which a
rule cannot write: dynamo gives the mask its own batch dim, whose marker is the smaller one in
bert, GPT-J and Llama's ``.dyn`` exports (the first 61 rows of a mask of 59), so that at the
markers, where a class holds one shape, no slice of the mask has the gather's shape and the
shape check refuses any right-hand side.

:func:`plan` finds the rewrites; the importer applies them (:class:`Plan`) before converting,
and the nodes they leave unread are dropped with the rest of the unreachable graph.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import onnx
from onnx import NodeProto, helper

from relsat.onnx import affine
from relsat.onnx.affine import Affine, Operand
from relsat.onnx.constants import evaluate
from relsat.onnx.dimexpr import Poly, constant
from relsat.onnx.symbolic import Dims

__all__ = ["Plan", "plan"]

#: How far back a value is read (a mask index is a dozen nodes from its Ranges).
DEPTH = 24


class Model(Protocol):
    """What :func:`plan` reads (:class:`relsat.onnx.importer.Importer` provides it)."""

    model: onnx.ModelProto
    symbolic: frozenset[str]
    opset: int

    def const(self, name: str) -> np.ndarray | None: ...

    def dtype(self, name: str) -> int: ...

    def static_shape(self, name: str) -> tuple[int, ...] | None: ...


@dataclass
class Plan:
    """The rewrites :func:`plan` found: nodes replaced (index → the nodes written in its place),
    and the constants and tensor types those nodes add."""

    replaced: dict[int, list[NodeProto]] = field(default_factory=dict)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    types: dict[str, tuple[int, tuple[int, ...]]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.replaced)


def plan(model: Model, dims: Dims | None = None) -> Plan:
    """The index grids of ``model`` (see the module docstring), its dims ``dims`` (None: all
    static)."""
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
            if node.op_type in ("GatherND", "Gather"):
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

    def extent(self, n: int) -> Poly:
        return self.dims.poly(n) if self.dims is not None else constant(n)

    def value(self, name: str, depth: int = DEPTH) -> Affine | None:
        if name not in self.memo:
            self.memo[name] = self._value(name, depth) if name else None
        return self.memo[name]

    def _value(self, name: str, depth: int) -> Affine | None:
        """``name``'s affine form (:func:`relsat.onnx.affine.transfer` of its producer)."""
        array = self.const(name)
        if array is not None:
            return affine.of_constant(array, self.dims)
        node = self.producers.get(name)
        shape = self.shape(name)
        if node is None or depth == 0 or node.domain not in ("", "ai.onnx") or shape is None:
            return None
        if len(node.output) != 1:
            return None
        operands = [
            Operand(self.value(i, depth - 1), self.const(i), self.m.dtype(i))
            if i
            else Operand(None)
            for i in node.input
        ]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        return affine.transfer(
            node.op_type, attrs, operands, shape, self.m.dtype(name), self.extent
        )

    # --- rewrites ---------------------------------------------------------------------------

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
            axes = affine.grid_axes(parts, lead, shape[: len(parts)])
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
            axes = affine.strided_axes(v, lead, shape, self.extent)
        if axes is None:
            return None
        # An axis of the grid shorter than its data dim reads the dim's first rows (the batch of
        # input_ids beside that of the attention mask: two dims to dynamo; the legacy exporter's
        # past + 1 keys of a mask of total_sequence_length); where it is longer, the original
        # fails: a GatherND index out of its dim, or a row index past the flattened data when
        # the other dims are whole (so one such dim at most for a Gather).
        rows = {j: lead[a] for j, a in enumerate(axes) if a is not None and lead[a] != shape[j]}
        if not rows or (node.op_type == "Gather" and len(rows) > 1):
            return None  # read whole: a view by a rule (rules/masks.rules)
        return self._view(node, source, shape, lead, axes, trailing, rows)

    def _components(self, index: str, shape: tuple[int, ...]) -> list[Affine] | None:
        """The components of a GatherND index (its last axis) as values over its other axes."""
        k = shape[-1]
        array = self.const(index)
        if array is not None:
            parts = [affine.of_constant(array[..., j], self.dims) for j in range(k)]
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
            out.append(affine.affine(v.shape[:-1], v.offset, v.coefs[:-1]))
        return out if len(out) == k else None

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
