"""Shape computations folded at two marker assignments, for a model with symbolic dims.

Exporters compute shapes at run time: ``Shape → Gather → Unsqueeze → Concat → Reshape``. With
the dynamic dims given markers (:mod:`relsat.onnx.symbolic`) such a computation has a value, and
relsat's operators need it as a constant (a Reshape target). :func:`fold` evaluates them with
the ONNX reference evaluator twice, at the markers and at a second set of markers, and folds a
node into a ``Constant`` only when that is sound for every value of the dims:

* its outputs have the same shape at both assignments (a tensor whose size follows a dim — a
  mask ``[batch, sequence]``, position ids — stays an operator, whatever its inputs);
* values that differ are integer shape-like values (:data:`~relsat.onnx.symbolic.SHAPE_LIKE`
  elements at most) each the same product of dims and a constant at both assignments (written
  back computed from ``Shape`` on export: :mod:`relsat.onnx.symbolize`); anything else computed
  from a dim (``sequence + 1``, a float) stays an operator;
* a node writing a graph output stays (a ``Shape`` the model returns is the run's shape), its
  value known to the nodes reading it.

Each round first keeps as sums the dims operators compute from others (:meth:`_State.derive`):
an image side through a strided convolution or pool, ``(H + 1)//2``, read off the node's own
ONNX shape function; a Concat's side, the sum of its inputs'. Then every tensor's dims are
checked at both assignments: a dim that differs must be a product of dims and sums (the last
part of an uneven Split is not: :class:`SymbolicDimError`, naming the dims it is computed
from), and a static dim must not be divisible by a marker (:class:`MarkerClash`: the import
tries other markers, chosen so that the sums found read back).

With no dynamic dim (``dims`` and ``other`` both static) it folds what ONNX's shape inference
and onnxruntime's constant folding leave open at fixed input shapes
(:func:`relsat.onnx.importer.load_model`'s last retry).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import helper, numpy_helper

from relsat.onnx.dimexpr import (
    SUM_CONSTANT,
    Poly,
    Sum,
    add,
    constant,
    linear,
    multiply,
    spell_poly,
    spell_quotient,
)
from relsat.onnx.dimplan import static_numbers
from relsat.onnx.errors import SymbolicDimError
from relsat.onnx.symbolic import SHAPE_LIKE, Dims

__all__ = ["FOLD_LIMIT", "Folded", "MarkerClash", "fold"]

#: Nodes whose inputs hold more elements than this are not evaluated (weights' own arithmetic
#: is the importer's).
FOLD_LIMIT = 1 << 16
#: Rounds of shape inference and folding (each round's constants sharpen the next inference).
ROUNDS = 4
#: Ops never evaluated at import: random, or holding subgraphs.
_NEVER = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"}
    | {"Bernoulli", "Dropout", "If", "Loop", "Scan", "SequenceMap"}
)
_FLOAT_KINDS = "fc"

Shapes = dict[str, tuple[int | None, ...]]


@dataclass(frozen=True)
class Folded:
    """``model`` with its inputs at the first markers and its shape computations folded;
    ``symbolic`` the folded tensors whose values stand for dims; ``dims`` the first
    assignment's dims with the sums found on the way (:meth:`_State.same`)."""

    model: onnx.ModelProto
    symbolic: frozenset[str]
    dims: Dims


class MarkerClash(Exception):
    """A static number of the model is divisible by ``marker``, or a sum found is no atom at
    it: choose others. ``sums``: the sums found in the model so far (the next markers are
    chosen so that they read back)."""

    def __init__(self, marker: int, sums: tuple[Sum, ...] = ()) -> None:
        self.marker, self.sums = marker, sums
        super().__init__(marker)


def fold(
    model: onnx.ModelProto,
    dims: Dims,
    other: Dims,
    *,
    skeleton: Callable[[onnx.ModelProto], onnx.ModelProto],
    const: Callable[[str], np.ndarray | None],
) -> Folded:
    """Fold ``model``'s shape computations (see the module docstring). ``dims`` and ``other``
    are the two marker assignments, ``skeleton`` makes a model shape inference can take
    cheaply, ``const`` reads an initializer's value."""
    opset = {(o.domain or ""): o.version for o in model.opset_import}
    opset.setdefault("", opset.get("ai.onnx", 0))
    state = _State(dims, other, const, opset[""], static_numbers(model))
    state.outputs = {o.name for o in model.graph.output}
    nodes_a = list(model.graph.node)  # folded nodes become Constants of their first values,
    nodes_b = list(model.graph.node)  # and here of their second (for the second inference)
    try:
        for _ in range(ROUNDS):
            shapes_a, types = _infer(model, nodes_a, dims, skeleton)
            shapes_b, _ = _infer(model, nodes_b, other, skeleton)
            state.derive(nodes_a, shapes_a, shapes_b, types)
            new_a: list[onnx.NodeProto] = []
            new_b: list[onnx.NodeProto] = []
            changed = False
            for node_a, node_b in zip(nodes_a, nodes_b, strict=True):
                pair = state.fold(node_a, shapes_a, shapes_b)
                changed |= pair is not None
                new_a.extend(pair[0] if pair is not None else [node_a])
                new_b.extend(pair[1] if pair is not None else [node_b])
            nodes_a, nodes_b = new_a, new_b
            if not changed:
                break
        shapes_a, types = _infer(model, nodes_a, dims, skeleton)
        shapes_b, _ = _infer(model, nodes_b, other, skeleton)
        state.derive(nodes_a, shapes_a, shapes_b, types)
        _check_dims(nodes_a, shapes_a, shapes_b, state)
    except MarkerClash as clash:  # the sums found so far go with it: the next markers must
        # read them back too (:func:`relsat.onnx.dimplan.remarked`)
        raise MarkerClash(clash.marker, state.a.sums[len(dims.sums) :]) from None
    model_a = _rebuilt(model, nodes_a, dims)
    return Folded(model_a, frozenset(state.symbolic), state.a)


class _State:
    """The values known so far at both assignments, and which are dims' products."""

    def __init__(
        self,
        a: Dims,
        b: Dims,
        const: Callable[[str], np.ndarray | None],
        opset: int,
        static: set[int],
    ) -> None:
        self.a, self.b, self.const, self.opset, self.static = a, b, const, opset, static
        self.known_a: dict[str, np.ndarray] = {}
        self.known_b: dict[str, np.ndarray] = {}
        self.derived: set[str] = set()  # computed from a Shape or Size
        self.symbolic: set[str] = set()
        self.tried: set[str] = set()  # evaluated once and not foldable
        self.outputs: set[str] = set()  # the graph's outputs: their nodes stay (values known)
        self.underived: set[tuple[str, int, int, int]] = set()  # (tensor, axis, x, y): no sum

    def value(self, name: str) -> tuple[np.ndarray, np.ndarray] | None:
        if name in self.known_a:
            return self.known_a[name], self.known_b[name]
        value = self.const(name)
        return None if value is None else (value, value)

    def same(self, x: int, y: int) -> bool:
        """Are ``x`` at the first assignment and ``y`` at the second the same product of dims
        and sums? A sum found on the way (:func:`_found_sum`) is kept in both assignments'
        dims; one that is no atom at these markers (:meth:`Dims.sum_clash`) raises
        :class:`MarkerClash`."""
        if _same_product(self.a, self.b, x, y):
            return True
        found = _found_sum(self.a, self.b, x, y)
        if found is None:
            return False
        a = replace(self.a, sums=(*self.a.sums, found))
        b = replace(self.b, sums=(*self.b.sums, found))
        for dims in (a, b):
            bad = dims.sum_clash(self.static)
            if bad is not None:
                raise MarkerClash(bad)
        self.a, self.b = a, b
        return _same_product(a, b, x, y)

    def derive(
        self, nodes: list[onnx.NodeProto], shapes_a: Shapes, shapes_b: Shapes, types: dict[str, int]
    ) -> None:
        """Keep as sums the dims operators make from one input dim by affine arithmetic and a
        floor division — a convolution's or a pooling's output side, ``(H + 1)//2`` after a
        stride of 2; a crop, ``H - 4`` — read off each node's own ONNX shape inference
        (:func:`_through`), and a Concat's side, the sum of its inputs' (:func:`_concatenated`),
        in node order, so a sum may be made of the sums before it. One that is no atom at these
        markers raises :class:`MarkerClash` after the pass (with every sum found: the next
        markers are chosen for them all)."""
        fresh = False
        for node in nodes:
            if node.domain not in ("", "ai.onnx") or not node.input or not node.input[0]:
                continue
            for out in (o for o in node.output if o):
                sa, sb = shapes_a.get(out), shapes_b.get(out)
                if sa is None or sb is None or len(sa) != len(sb):
                    continue
                for axis, (x, y) in enumerate(zip(sa, sb, strict=True)):
                    if x is None or y is None or x == y or _same_product(self.a, self.b, x, y):
                        continue
                    if (out, axis, x, y) in self.underived:  # tried in an earlier round
                        continue
                    found = _concatenated(self, node, out, axis, (shapes_a, shapes_b))
                    if found is None:
                        found = _through(self, node, out, axis, (shapes_a, shapes_b), types)
                    if found is None:
                        self.underived.add((out, axis, x, y))
                    elif self.a.sum(found.name) is None:
                        self.a = replace(self.a, sums=(*self.a.sums, found))
                        self.b = replace(self.b, sums=(*self.b.sums, found))
                        fresh = True
        if fresh:
            for dims in (self.a, self.b):
                bad = dims.sum_clash(self.static)
                if bad is not None:
                    raise MarkerClash(bad)

    def fold(
        self, node: onnx.NodeProto, shapes_a: Shapes, shapes_b: Shapes
    ) -> tuple[list[onnx.NodeProto], list[onnx.NodeProto]] | None:
        """The Constant nodes replacing ``node`` at each assignment, or None to keep it."""
        outs = [o for o in node.output if o]
        if node.domain not in ("", "ai.onnx") or node.op_type in _NEVER or not outs:
            return None
        if node.op_type == "Constant":
            if outs[0] not in self.known_a:
                self._constant(node)
            return None
        if outs[0] in self.known_a or outs[0] in self.tried:
            return None
        values = self._evaluate(node, shapes_a, shapes_b)
        if values is None:
            return None
        derived = node.op_type in ("Shape", "Size") or any(i in self.derived for i in node.input)
        kept = []
        for name, (va, vb) in zip(outs, values, strict=True):
            if not self._foldable(va, vb):
                self.tried.add(outs[0])
                return None
            kept.append((name, va, vb))
        for name, va, vb in kept:
            self.known_a[name], self.known_b[name] = va, vb
            if derived:
                self.derived.add(name)
            if not np.array_equal(va, vb):
                self.symbolic.add(name)
        if any(name in self.outputs for name in outs):
            # A graph output stays computed (its readers fold with its value): a Shape the
            # model returns is the run's shape, not the markers'.
            return [node], [node]
        return (
            [_constant_node(name, va, node) for name, va, _ in kept],
            [_constant_node(name, vb, node) for name, _, vb in kept],
        )

    def _constant(self, node: onnx.NodeProto) -> None:
        """Remember a Constant node's value (the same at both assignments)."""
        from relsat.onnx.constants import evaluate

        folded = evaluate(node, lambda _: None)
        if folded is not None:
            self.known_a[node.output[0]] = self.known_b[node.output[0]] = folded[0]

    def _evaluate(
        self, node: onnx.NodeProto, shapes_a: Shapes, shapes_b: Shapes
    ) -> list[tuple[np.ndarray, np.ndarray]] | None:
        if node.op_type in ("Shape", "Size"):
            sa, sb = shapes_a.get(node.input[0]), shapes_b.get(node.input[0])
            if sa is None or sb is None or None in sa or None in sb:
                return None
            return [(_shape_value(node, sa), _shape_value(node, sb))]  # type: ignore[arg-type]
        for out in node.output:
            sa, sb = shapes_a.get(out), shapes_b.get(out)
            if sa is not None and sb is not None and None not in sa + sb and sa != sb:
                return None  # its size follows a dim: never folded (a Resize of a table to it)
        feeds_a: dict[str, np.ndarray] = {}
        feeds_b: dict[str, np.ndarray] = {}
        for name in node.input:
            v = self.value(name) if name else None
            if name and (v is None or v[0].size > FOLD_LIMIT):
                return None
            if name and v is not None:
                feeds_a[name], feeds_b[name] = v
        if not feeds_a:
            return None
        try:
            got_a = _run(node, feeds_a, self.opset)
            got_b = _run(node, feeds_b, self.opset)
        except Exception:  # an op the reference evaluator lacks, or a value it refuses
            self.tried.add(node.output[0])
            return None
        return list(zip(got_a, got_b, strict=True))

    def _foldable(self, va: np.ndarray, vb: np.ndarray) -> bool:
        if va.shape != vb.shape or va.dtype != vb.dtype:
            return False  # its size follows a dim: an operator
        if va.dtype.kind in _FLOAT_KINDS:  # a float computed from a dim stays an operator
            return bool(np.array_equal(va, vb, equal_nan=True))
        if va.dtype.kind not in "iub":
            return False
        if np.array_equal(va, vb):
            if va.size <= SHAPE_LIKE:  # a static shape-like value must not look symbolic
                for v in va.reshape(-1).tolist():
                    _clash(self.a, int(v))
            return True
        if va.ndim > 1 or va.size > SHAPE_LIKE:
            return False
        return all(
            x == y or self.same(int(x), int(y))
            for x, y in zip(va.reshape(-1).tolist(), vb.reshape(-1).tolist(), strict=True)
        )


def _concatenated(
    state: _State, node: onnx.NodeProto, out: str, axis: int, shapes: tuple[Shapes, Shapes]
) -> Sum | None:
    """Dim ``axis`` of a Concat's output along its axis: the sum of its inputs' dims there, each
    static or the same product of dims and sums at both assignments (ViT's tokens,
    ``(height//16)*(width//16) + 1``; a cache and a new token, ``past + 1``); None for another
    node or axis, or when the sum is a product."""
    if node.op_type != "Concat" or node.domain not in ("", "ai.onnx"):
        return None
    shapes_a, shapes_b = shapes
    rank = len(shapes_a[out])
    concat = next((a.i for a in node.attribute if a.name == "axis"), 0)
    if concat % max(rank, 1) != axis:
        return None
    total: Poly = ()
    for name in node.input:
        ia, ib = shapes_a.get(name), shapes_b.get(name)
        if ia is None or ib is None or len(ia) != rank or len(ib) != rank:
            return None
        xa, xb = ia[axis], ib[axis]
        if xa is None or xb is None:
            return None
        if xa == xb and state.a.factor(xa) is None:
            total = add(total, constant(xa))
        elif _same_product(state.a, state.b, xa, xb):
            total = add(total, state.a.poly(xa))
        else:
            return None
    if len(total) < 2:  # a product, or a number
        return None
    found = Sum(spell_poly(total), total, ())
    at_a = state.a.with_sums(state.a.markers())
    at_b = state.b.with_sums(state.b.markers())
    if found.at(at_a) != shapes_a[out][axis] or found.at(at_b) != shapes_b[out][axis]:
        return None
    return found


def _through(
    state: _State,
    node: onnx.NodeProto,
    out: str,
    axis: int,
    shapes: tuple[Shapes, Shapes],
    types: dict[str, int],
) -> Sum | None:
    """Dim ``axis`` of ``node``'s output ``out`` as ``floor((a*X + c) / s)`` of the same dim
    ``X`` of its first input, when that is what the node computes: its ONNX shape inference
    sampled at :data:`SAMPLES` consecutive values of ``X`` (the other inputs as at the first
    assignment) fits one ``(a, c, s)`` (:func:`_fit`), and the fit gives the output's dim at
    both assignments. None otherwise (the dim depends on more than that input dim)."""
    (shapes_a, shapes_b), src = shapes, node.input[0]
    ia, ib = shapes_a.get(src), shapes_b.get(src)
    sa, sb = shapes_a[out], shapes_b[out]
    if ia is None or ib is None or len(ia) != len(sa) or len(ib) != len(sb):
        return None
    xa, xb = ia[axis], ib[axis]
    if xa is None or xb is None or xa == xb or not _same_product(state.a, state.b, xa, xb):
        return None
    position = list(node.output).index(out)
    samples = _sampled(state, node, position, axis, shapes_a, types)
    fit = _fit(samples) if samples else None
    if fit is None:
        return None
    a, c, s = fit
    if (a * xa + c) // s != sa[axis] or (a * xb + c) // s != sb[axis]:
        return None
    numerator = add(multiply(constant(a), state.a.poly(xa)), constant(c))
    numerator, s = _flattened(state.a, numerator, s)
    if all(k % s == 0 for _, k in numerator):  # divides exactly: a polynomial
        numerator, s = tuple((m, k // s) for m, k in numerator), 1
    if s == 1 and len(numerator) == 1:  # a product: nothing to keep
        return None
    return Sum(spell_quotient(numerator, s), numerator, (), s)


def _flattened(dims: Dims, numerator: Poly, s: int) -> tuple[Poly, int]:
    """``floor(numerator / s)`` with a divided sum ``floor(P / d)`` that ``numerator`` is plus a
    constant ``c`` written out: ``floor((P + d*c) / (d*s))``, so a side through several strides
    is one quotient (``(H + 3)//4``, not ``((H + 1)//2 + 1)//2``)."""
    names = [(m, k) for m, k in numerator if m]
    inner = dims.sum(names[0][0][0]) if len(names) == 1 and len(names[0][0]) == 1 else None
    if inner is None or inner.divisor == 1 or names[0][1] != 1:
        return numerator, s
    c = sum(k for m, k in numerator if not m)
    return add(inner.terms, constant(inner.divisor * c)), inner.divisor * s


#: The multipliers and divisors :func:`_fit` tries (a transposed convolution's stride, a
#: convolution's or pooling's).
MULTIPLIERS, DIVISORS = range(1, 5), range(1, 17)
#: Consecutive values of an input dim a node's shape inference is sampled at (:func:`_through`):
#: more than the largest divisor, so that a floor's steps pin its constant.
SAMPLES = 2 * DIVISORS[-1] + 1


def _sampled(
    state: _State,
    node: onnx.NodeProto,
    position: int,
    axis: int,
    shapes: Shapes,
    types: dict[str, int],
) -> list[tuple[int, int]]:
    """``(X, Y)``: output ``position``'s dim ``axis`` by ONNX shape inference of ``node`` alone
    with its first input's dim ``axis`` at ``X`` (the inputs' other dims as ``shapes``, the
    constant inputs' values known); empty when inference fails."""
    try:
        schema = onnx.defs.get_schema(node.op_type, state.opset, "")
    except Exception:
        return []
    base: dict[str, onnx.TypeProto] = {}
    data: dict[str, onnx.TensorProto] = {}
    for name in node.input:
        if not name or name in base:
            continue
        if name not in types:
            return []
        dims = shapes.get(name)
        base[name] = helper.make_tensor_type_proto(types[name], list(dims) if dims else None)
        known = state.value(name)
        if known is not None and known[0].size <= FOLD_LIMIT and np.array_equal(*known):
            data[name] = numpy_helper.from_array(np.asarray(known[0]), name)
    src = node.input[0]
    first = shapes[src][axis]
    assert first is not None
    out = []
    for x in range(first, first + SAMPLES):
        feeds = dict(base)
        sampled = list(shapes[src])
        sampled[axis] = x
        feeds[src] = helper.make_tensor_type_proto(types[src], sampled)
        try:
            got = onnx.shape_inference.infer_node_outputs(
                schema, node, feeds, data, opset_imports=[helper.make_opsetid("", state.opset)]
            )
        except Exception:
            return []
        t = got.get(node.output[position])
        shape = t.tensor_type.shape if t is not None and t.HasField("tensor_type") else None
        if shape is None or axis >= len(shape.dim) or not shape.dim[axis].HasField("dim_value"):
            return []
        out.append((x, int(shape.dim[axis].dim_value)))
    return out


def _fit(samples: list[tuple[int, int]]) -> tuple[int, int, int] | None:
    """The ``(a, c, s)`` with ``Y = floor((a*X + c) / s)`` at every sample, the smallest ``s``
    then ``a`` (coprime) for which exactly one ``c`` fits; None when none does.

    >>> _fit([(x, (x + 2 - 3) // 2 + 1) for x in range(100, 117)])  # k 3, pad 1, stride 2
    (1, 1, 2)
    >>> _fit([(x, 2 * x + 1) for x in range(40, 57)])
    (2, 1, 1)
    """
    for s in DIVISORS:
        for a in MULTIPLIERS:
            if math.gcd(a, s) != 1:
                continue
            low = max(s * y - a * x for x, y in samples)
            high = min(s * y + s - 1 - a * x for x, y in samples)
            if low == high:
                return a, low, s
    return None


def _clash(dims: Dims, v: int) -> None:
    f = dims.factor(v)
    if f is not None:
        raise MarkerClash(dims.marker_of(f[1][0][0]))


def _same_product(a: Dims, b: Dims, x: int, y: int) -> bool:
    fa, fb = a.factor(x), b.factor(y)
    return fa is not None and fa == fb


def _found_sum(a: Dims, b: Dims, x: int, y: int) -> Sum | None:
    """A sum of one dim and a constant (up to :data:`SUM_CONSTANT`) or of two dims that ``x``
    at ``a`` and ``y`` at ``b`` are the same product of (``past + 1``: a cache concatenated
    with one new token), else None."""
    if x <= 0 or y <= 0:
        return None
    names = list(a.names)
    small = [k for k in range(-SUM_CONSTANT, SUM_CONSTANT + 1) if k]
    guesses = [linear((n,), k) for n in names for k in small]
    guesses += [linear((n, m), 0) for i, n in enumerate(names) for m in names[i + 1 :]]
    ma, mb = a.markers(), b.markers()
    for poly in guesses:
        s = Sum(spell_poly(poly), poly, ())
        sa, sb = s.at(ma), s.at(mb)
        if sa < 2 or sb < 2 or x % sa or y % sb:
            continue
        ra, rb = x // sa, y // sb
        fa, fb = a.factor(ra), b.factor(rb)
        if (fa is None and fb is None and ra == rb) or (fa is not None and fa == fb):
            return s
    return None


def _shape_value(node: onnx.NodeProto, shape: tuple[int, ...]) -> np.ndarray:
    full = np.array(shape, dtype=np.int64)
    if node.op_type == "Size":
        return np.array(int(np.prod(full)), dtype=np.int64)
    attrs = {a.name: a.i for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", len(shape))
    return full[start:end]


def _run(node: onnx.NodeProto, feeds: dict[str, np.ndarray], opset: int) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(node, opsets={"": opset})
    outs = evaluator.run(None, feeds)
    return [np.asarray(o) for o, name in zip(outs, node.output, strict=False) if name]


def _constant_node(name: str, value: np.ndarray, node: onnx.NodeProto) -> onnx.NodeProto:
    tensor = numpy_helper.from_array(np.asarray(value), name)
    label = f"{node.name or node.op_type}_folded" + ("" if name == node.output[0] else f"_{name}")
    return helper.make_node("Constant", [], [name], name=label, value=tensor)


def _rebuilt(model: onnx.ModelProto, nodes: list[onnx.NodeProto], dims: Dims) -> onnx.ModelProto:
    """``model`` with ``nodes``, its inputs fixed to ``dims``' markers and no value_info
    (exporters' intermediate shapes were written for their example, not for the markers) but
    the opened tensors' (:attr:`Dims.opened`) at the markers: shape inference carries them on."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    del out.graph.value_info[:]
    inputs = dims.marked()
    for vi in out.graph.input:
        if vi.name in inputs:
            for d, v in zip(vi.type.tensor_type.shape.dim, inputs[vi.name], strict=True):
                d.Clear()
                d.dim_value = int(v)
    outputs = {vi.name: vi for vi in out.graph.output}
    for name, (elem, shape) in dims.marked_opened().items():
        info = helper.make_tensor_value_info(name, elem, list(shape))
        if name in outputs:
            outputs[name].CopyFrom(info)
        else:
            out.graph.value_info.append(info)
    return out


def _infer(
    model: onnx.ModelProto,
    nodes: list[onnx.NodeProto],
    dims: Dims,
    skeleton: Callable[[onnx.ModelProto], onnx.ModelProto],
) -> tuple[Shapes, dict[str, int]]:
    """Every tensor's inferred dims (None where left open) with the inputs at ``dims``'
    markers, and its element type."""
    try:
        inferred = onnx.shape_inference.infer_shapes(
            skeleton(_rebuilt(model, nodes, dims)), data_prop=True
        )
    except Exception:
        return {}, {}
    shapes: Shapes = {}
    types: dict[str, int] = {}
    g = inferred.graph
    for vi in [*g.input, *g.value_info, *g.output, *_initializer_types(g)]:
        tt = vi.type.tensor_type
        if vi.type.WhichOneof("value") != "tensor_type":
            continue
        types[vi.name] = tt.elem_type
        if tt.HasField("shape"):
            shapes[vi.name] = tuple(
                d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                for d in tt.shape.dim
            )
    return shapes, types


def _initializer_types(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    return [
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in graph.initializer
    ]


def _check_dims(
    nodes: list[onnx.NodeProto], shapes_a: Shapes, shapes_b: Shapes, state: _State
) -> None:
    """Every tensor's dims: a product of dims and sums (the same at both assignments:
    :meth:`_State.same`) or static (and then not divisible by a marker); else
    :class:`SymbolicDimError` naming the dims it comes from."""
    producer = {o: n for n in nodes for o in n.output if o}
    for name, sa in shapes_a.items():
        sb = shapes_b.get(name)
        if sb is None or len(sa) != len(sb):
            continue
        for axis, (x, y) in enumerate(zip(sa, sb, strict=True)):
            if x is None or y is None:
                continue
            if x == y:
                _clash(state.a, x)
            elif not state.same(x, y):
                a = state.a
                node = producer.get(name)
                source = _dims_of(node, shapes_a, a) if node is not None else a.names
                made = f" ({node.op_type})" if node is not None else ""
                raise SymbolicDimError(
                    f"tensor {name!r}{made} has dim {axis} = {x} at one marker and {y} at "
                    "another: not a product of the dims it is computed from "
                    f"({', '.join(a.where(d) for d in source)})",
                    dims=tuple(source),
                    tensor=name,
                )


def _dims_of(node: onnx.NodeProto, shapes: Shapes, dims: Dims) -> tuple[str, ...]:
    """The dims whose markers occur in ``node``'s input shapes (all dims when none does)."""
    found: list[str] = []
    for name in node.input:
        for d in shapes.get(name, ()):
            f = dims.factor(d) if d else None
            for dim, _ in f[1] if f else ():
                if dim not in found:
                    found.append(dim)
    return tuple(found) or dims.names
