"""The exported model's dims made symbolic again: what :func:`relsat.onnx.to_model` does after
writing a graph with markers (:mod:`relsat.onnx.symbolic`) when given its ``dims``.

* Inputs and outputs get the interface's types (``like``: names, element types, the original
  ``dim_param`` names; a dim the model fixes, :attr:`Dims.fixed`, its value); an output dim the
  interface leaves open is written as its dim's name when it is exactly one dim, else left
  open.
* Every small integer constant holding a product of markers (a shape-like value:
  :data:`~relsat.onnx.symbolic.SHAPE_LIKE` elements at most, rank 0 or 1) is written the way
  exporters write it. A Reshape target copies an input dim at the same position with ``0`` and
  infers one remaining dim with ``-1``; anything else — a Slice bound, an Expand shape, a Range
  limit, a Reshape target with two dims to compute — is computed at run time:
  ``Shape(input, start, end)`` per dim (``Shape → Gather`` before opset 15), ``Mul`` for
  products and coefficients, ``Add`` for sums, ``Div`` for a side after a stride (``(H + 1)//2``),
  ``Concat`` into the vector (a ``Reshape`` to a scalar, a ``Cast``
  for int32).
* What cannot be written symbolically — a float tensor whose size is a dim, an attribute
  holding one, a larger constant of dims — raises :class:`SymbolicDimError` naming the input
  and dim; the caller then writes the model at fixed shapes instead.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from relsat.onnx.dimexpr import Poly
from relsat.onnx.errors import SymbolicDimError
from relsat.onnx.names import fresh_name
from relsat.onnx.symbolic import SHAPE_LIKE, Dims

__all__ = ["symbolize"]

_INTS = (TensorProto.INT64, TensorProto.INT32)


def symbolize(
    model: onnx.ModelProto,
    dims: Dims,
    interface: onnx.GraphProto,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> onnx.ModelProto:
    """``model`` (written with markers) with its dims symbolic (see the module docstring);
    ``shapes``: tensors' shapes at the markers where ONNX may not infer them (opaque nodes'
    outputs), where a dim an operator computes from values (:attr:`Dims.opened`) is read."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    _Writer(out, dims, shapes or {}).run(interface)
    return out


class _Writer:
    def __init__(
        self, model: onnx.ModelProto, dims: Dims, shapes: Mapping[str, tuple[int, ...]]
    ) -> None:
        self.model, self.graph, self.dims = model, model.graph, dims
        made = {o for node in self.graph.node for o in node.output}
        opened = dims.opened_names()
        self.places: dict[str, tuple[str, int]] = {}  # opened dim → first tensor, axis
        for tensor, shape in shapes.items():
            for axis, v in enumerate(shape if tensor in made else ()):
                name = self._atom(v)
                if name in opened:
                    self.places.setdefault(name, (tensor, axis))
        self.used = {n for node in self.graph.node for n in [*node.input, *node.output]}
        self.used |= {t.name for t in self.graph.initializer} | {i.name for i in self.graph.input}
        self.first: list[onnx.NodeProto] = []  # the computed dims: they read only inputs
        self.inits: list[TensorProto] = []
        self.dim_tensor: dict[str, str] = {}
        self.shape_tensor: dict[str, str] = {}
        self.vectors: dict[tuple[int, ...], str] = {}  # one computation per distinct value
        self.inputs = {vi.name for vi in self.graph.input}
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)

    def _atom(self, v: int) -> str | None:
        """The dim ``v`` is exactly (its marker), else None."""
        f = self.dims.factor(v)
        if f is None or f[0] != 1 or len(f[1]) != 1 or f[1][0][1] != 1:
            return None
        return f[1][0][0]

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.used)

    def const(self, base: str, values: Sequence[int] | np.ndarray, dtype: type = np.int64) -> str:
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def emit(self, op: str, inputs: list[str], base: str, **attrs: Any) -> str:
        out = self.fresh(base)
        self.first.append(
            helper.make_node(op, inputs, [out], name=self.fresh(f"{base}_node"), **attrs)
        )
        return out

    # --- the pass -------------------------------------------------------------------------

    def run(self, interface: onnx.GraphProto) -> None:
        g = self.graph
        self._check_floats_and_attributes()
        shapes = _shapes(self.model)
        inits = {t.name: t for t in g.initializer}
        symbolic = {
            name: arr
            for name, t in inits.items()
            if t.data_type in _INTS
            for arr in [numpy_helper.to_array(t)]
            if arr.size <= SHAPE_LIKE
            and arr.ndim <= 1
            and any(self.dims.is_symbolic(int(v)) for v in arr.reshape(-1))
        }
        computed: dict[str, str] = {}
        for node in g.node:
            for pos, name in enumerate(node.input):
                if name not in symbolic:
                    continue
                arr = symbolic[name]
                if node.op_type == "Reshape" and pos == 1 and node.domain in ("", "ai.onnx"):
                    node.input[pos] = self._target(node, arr, shapes.get(node.input[0]))
                    continue
                if name not in computed:
                    computed[name] = self._computed(arr, inits[name].data_type, name)
                node.input[pos] = computed[name]
        read = {n for node in [*self.first, *g.node] for n in node.input}
        read |= {o.name for o in g.output}
        kept = [t for t in g.initializer if t.name not in symbolic or t.name in read]
        del g.initializer[:]
        g.initializer.extend([*kept, *self.inits])
        nodes = _ordered([*self.first, *g.node], {*self.inputs, *(t.name for t in g.initializer)})
        del g.node[:]
        g.node.extend(nodes)
        del g.value_info[:]
        self._interface(interface)

    def _check_floats_and_attributes(self) -> None:
        for t in self.graph.initializer:
            for d in t.dims:
                self._refuse(int(d), f"initializer {t.name!r} has a dim of")
        for node in self.graph.node:
            for a in node.attribute:
                values = [a.i] if a.type == AttributeProto.INT else list(a.ints)
                for v in values if a.type in (AttributeProto.INT, AttributeProto.INTS) else []:
                    self._refuse(int(v), f"attribute {a.name!r} of {node.op_type} holds")

    def _refuse(self, v: int, what: str) -> None:
        f = self.dims.factor(v)
        if f is None:
            return
        names = tuple(n for n, _ in f[1])
        raise SymbolicDimError(
            f"{what} {self.dims.spell(v)}, which relsat cannot write with "
            f"{', '.join(self.dims.where(n) for n in names)} symbolic",
            dims=names,
        )

    # --- values ---------------------------------------------------------------------------

    def _dim(self, name: str) -> str:
        """A ``[1]`` int64 tensor holding dim (or sum) ``name``: read off an input's shape where
        one has it, else a sum computed from its dims, a dim worked out from a sum."""
        if name not in self.dim_tensor:
            s = self.dims.sum(name)
            axes = s.axes if s is not None else self.dims.dim(name).axes
            place = next(((t, a) for t, a in axes if t in self.inputs), self.places.get(name))
            if place is not None:
                tensor, axis = place
                if self.opset >= 15:  # Shape's start and end: the one dim, one node
                    self.dim_tensor[name] = self.emit(
                        "Shape", [tensor], "dim", start=axis, end=axis + 1
                    )
                else:
                    if tensor not in self.shape_tensor:
                        self.shape_tensor[tensor] = self.emit("Shape", [tensor], f"{tensor}_shape")
                    index = self.const("dim_axis", [axis])
                    self.dim_tensor[name] = self.emit(
                        "Gather", [self.shape_tensor[tensor], index], "dim", axis=0
                    )
            elif s is not None:
                value = self._polynomial(s.terms)
                if s.divisor > 1:  # integer Div truncates: the floor of a dim's non-negative
                    # numerator (an image side through a stride)
                    value = self.emit(
                        "Div", [value, self.const("dim_divisor", [s.divisor])], "dim_quotient"
                    )
                self.dim_tensor[name] = value
            else:
                self.dim_tensor[name] = self._solved(name)
        return self.dim_tensor[name]

    def _polynomial(self, terms: Poly) -> str:
        """A ``[1]`` int64 tensor holding ``terms`` (a polynomial over dims)."""
        value = ""
        for mono, c in terms:
            term = self.const("dim_const", [c]) if not mono else self._product(mono, c)
            value = term if not value else self.emit("Add", [value, term], "dim_sum")
        return value

    def _product(self, names: Sequence[str], coef: int) -> str:
        factors = [self._dim(n) for n in names]
        if coef != 1:
            factors.append(self.const("dim_coef", [coef]))
        value = factors[0]
        for f in factors[1:]:
            value = self.emit("Mul", [value, f], "dim_product")
        return value

    def _solved(self, name: str) -> str:
        """Dim ``name``, which no input has alone, from a sum an input has: ``past`` is
        ``(past + 1) - 1``."""
        for s in self.dims.sums:
            own = [c for mono, c in s.terms if mono == (name,)]
            rest = tuple((m, c) for m, c in s.terms if m != (name,))
            if (
                own in ([1], [-1])
                and not any(name in m for m, _ in rest)
                and any(t in self.inputs for t, _ in s.axes)
            ):
                total = self._dim(s.name)
                left = (
                    self.emit("Sub", [total, self._polynomial(rest)], "dim_sum") if rest else total
                )
                return left if own == [1] else self.emit("Neg", [left], "dim_neg")
        raise SymbolicDimError(
            f"dim {name} occurs on no input alone nor in a sum it can be worked out from",
            dims=(name,),
        )

    def _element(self, v: int) -> str:
        """A ``[1]`` int64 tensor holding ``v`` (a product of dims and a constant)."""
        f = self.dims.factor(v)
        if f is None:
            return self.const("dim_const", [v])
        coef, powers = f
        return self._product([n for n, e in powers for _ in range(e)], coef)

    def _vector(self, values: Sequence[int]) -> str:
        """A 1-D int64 tensor of ``values``: runs of static values as constants, each product of
        dims computed, concatenated (once per distinct ``values``)."""
        key = tuple(values)
        if key not in self.vectors:
            self.vectors[key] = self._vector_of(values)
        return self.vectors[key]

    def _vector_of(self, values: Sequence[int]) -> str:
        pieces: list[str] = []
        run: list[int] = []
        for v in values:
            if self.dims.is_symbolic(v):
                if run:
                    pieces.append(self.const("dims_static", run))
                    run = []
                pieces.append(self._element(v))
            else:
                run.append(v)
        if run:
            pieces.append(self.const("dims_static", run))
        if len(pieces) == 1:
            return pieces[0]
        return self.emit("Concat", pieces, "dims", axis=0)

    def _computed(self, arr: np.ndarray, dtype: int, base: str) -> str:
        value = self._vector([int(v) for v in arr.reshape(-1)])
        if arr.ndim == 0:
            value = self.emit("Reshape", [value, self.const("scalar_shape", [])], f"{base}_scalar")
        if dtype == TensorProto.INT32:
            value = self.emit("Cast", [value], f"{base}_int32", to=TensorProto.INT32)
        return value

    def _target(
        self, node: onnx.NodeProto, arr: np.ndarray, x: tuple[int | None, ...] | None
    ) -> str:
        """A Reshape target: ``0`` where the input's dim at that position is the same, ``-1``
        for one remaining dim, the rest computed."""
        allowzero = any(a.name == "allowzero" and a.i for a in node.attribute)
        target = [int(v) for v in arr.reshape(-1)]
        open_: list[int] = []
        for i, v in enumerate(target):
            if not self.dims.is_symbolic(v):
                continue
            if not allowzero and x is not None and i < len(x) and x[i] == v:
                target[i] = 0
            else:
                open_.append(i)
        if len(open_) == 1 and -1 not in target:
            target[open_[0]] = -1
            open_ = []
        if not open_:
            return self.const(f"{node.input[1]}_dims", target)
        return self._vector(target)

    # --- interface ------------------------------------------------------------------------

    def _interface(self, interface: onnx.GraphProto) -> None:
        g = self.graph
        declared = {vi.name: vi for vi in interface.input}
        pinned = {name: value for name, value, _ in self.dims.fixed}
        for vi in g.input:
            if vi.name in declared:
                vi.CopyFrom(declared[vi.name])
            layout = self.dims.inputs.get(vi.name, ())
            for d, v in zip(vi.type.tensor_type.shape.dim, layout, strict=False):
                if d.dim_param and isinstance(v, int):  # a dim the model fixes: written static
                    d.dim_value = v
        for i, vi in enumerate(g.output):
            want = interface.output[i] if i < len(interface.output) else None
            dims = vi.type.tensor_type.shape.dim
            given = (
                list(want.type.tensor_type.shape.dim)
                if want is not None and want.type.tensor_type.HasField("shape")
                else []
            )
            for axis, d in enumerate(dims):
                value = d.dim_value if d.HasField("dim_value") else None
                if (
                    axis < len(given)
                    and len(given) == len(dims)
                    and (given[axis].dim_param or given[axis].dim_value)
                ):
                    d.CopyFrom(given[axis])
                    if d.dim_param in pinned:
                        d.dim_value = pinned[d.dim_param]
                    continue
                if value is None or not self.dims.is_symbolic(value):
                    continue
                f = self.dims.factor(value)
                d.Clear()
                if f is not None and f[0] == 1 and len(f[1]) == 1 and f[1][0][1] == 1:
                    d.dim_param = f[1][0][0]


def _ordered(nodes: Sequence[onnx.NodeProto], ready: set[str]) -> list[onnx.NodeProto]:
    """``nodes`` in an order that computes every input before its readers, each as early as
    the list has it (the computed dims first, a dim read off an opaque node's output right
    after that node)."""
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    waits = [
        {producer[x] for x in n.input if x and x not in ready and x in producer} for n in nodes
    ]
    readers: dict[int, list[int]] = {}
    for i, w in enumerate(waits):
        for j in w:
            readers.setdefault(j, []).append(i)
    todo = [i for i, w in enumerate(waits) if not w]
    heapq.heapify(todo)
    out: list[onnx.NodeProto] = []
    while todo:
        i = heapq.heappop(todo)
        out.append(nodes[i])
        for r in readers.get(i, ()):
            waits[r].discard(i)
            if not waits[r]:
                heapq.heappush(todo, r)
    if len(out) != len(nodes):  # a cycle: impossible for a graph written from a DAG
        raise SymbolicDimError("the written model's dims would be read before they are computed")
    return out


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[int | None, ...]]:
    """Every tensor's inferred dims in ``model`` (written with markers: all static)."""
    from relsat.onnx.data import MAX_INLINE_BYTES

    if model.ByteSize() > MAX_INLINE_BYTES:  # shapes only: drop the weights' data
        slim = onnx.ModelProto()
        slim.CopyFrom(model)
        for t in slim.graph.initializer:
            if t.data_type not in _INTS:
                t.ClearField("raw_data")
                t.ClearField("float_data")
        model = slim
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        return {}
    out: dict[str, tuple[int | None, ...]] = {}
    g = inferred.graph
    for vi in [*g.input, *g.value_info, *g.output]:
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            out[vi.name] = tuple(
                d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim
            )
    return out
