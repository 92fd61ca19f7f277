"""The affine form of integer tensors: an analysis of the index and mask arithmetic exporters write.

transformers' attention masks are computed per call from ``Range``\\ s: key positions compared
with query positions (``k <= q``), a padding mask read at ``b * kv + k``. What is known of such
an integer (or boolean) tensor is an :class:`Affine`: every element is ``offset + Σ coefs[a] *
i_a`` at index ``(i_0, ...)``, the offset and the coefficients polynomials over the model's
dims (:meth:`~relsat.onnx.symbolic.Dims.poly`: ``past + 1``, not its marker). A comparison of
two such tensors is *settled* where it holds, or fails, at every position and at every value of
the dims (:func:`~relsat.onnx.dimexpr.sign`): a decode step's ``Range(0, past + 1) <= past`` is
true throughout, whatever ``past`` is.

:func:`transfer` is the transfer function of the ONNX operators relsat keeps opaque: leaves are
integer constants (uniform, or a ramp of static numbers such as a folded ``Range``) and
``Range``; the form is carried through Identity, Cast between integer types, Unsqueeze, Squeeze,
Reshape and Flatten (inserting or dropping unit dims), Expand, Add, Sub, Mul (by a uniform
factor), Neg, and the comparisons and logic ops (settled or unknown). The facts of values keep it
per tensor (:attr:`relsat.graph.facts.Facts.affine`, as :func:`encode` writes it) and bound a
settled tensor's values exactly (:func:`relsat.onnx.masks.opaque_facts`), which rules read:
``(onnx.And ?a ?b) => ?b where lo(?a) == 1`` (``rules/masks.rules``). :func:`grid_dims` and
:func:`row_dims` read a gather's index as an *index grid* (each component the position along one
output axis; a row index row-major over the data's dims), the facts ``grid`` and ``rows`` by
which the rules of ``rules/masks.rules`` write such a gather as a view of its data.

>>> from relsat.onnx.dimexpr import parse
>>> keys = Affine((5,), constant(0), (constant(1),))  # Range(0, past + 1) at past = 4
>>> past = Affine((), ((("past",), 1),), ())  # a dim: parse reads a plain name as none
>>> settled(compare("LessOrEqual", keys, past, lambda n: parse("past + 1", {"past"}) or ()))
True
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import TensorProto

from relsat.onnx.dimexpr import Poly, add, constant, multiply, sign
from relsat.onnx.dimexpr import value as poly_value

if TYPE_CHECKING:
    from relsat.onnx.symbolic import Dims

__all__ = [
    "COMPARISONS",
    "INTEGERS",
    "Affine",
    "Operand",
    "affine",
    "aligned",
    "compare",
    "components_grid",
    "decode",
    "encode",
    "grid_dims",
    "in_order",
    "index_facts",
    "of_constant",
    "product",
    "row_dims",
    "settled",
    "transfer",
    "uniform_value",
]

#: Constants larger than this (elements) are not read as ramps.
RAMP_LIMIT = 1 << 16
#: The element types whose tensors have an affine form (integers, and booleans as 0 and 1).
INTEGERS = frozenset(
    {TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64}
    | {TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64}
    | {TensorProto.BOOL}
)
COMPARISONS = frozenset({"Less", "LessOrEqual", "Greater", "GreaterOrEqual"})
_RESHAPES = frozenset({"Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten"})
_ONE = constant(1)


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


@dataclass(frozen=True)
class Operand:
    """One ONNX input of a node: its affine form where known, its value where it is a constant
    (and its element type)."""

    value: Affine | None
    array: np.ndarray | None = None
    dtype: int = 0


def affine(shape: tuple[int, ...], offset: Poly, coefs: tuple[Poly, ...]) -> Affine:
    """An :class:`Affine`, the coefficients of its unit axes dropped."""
    return Affine(
        shape, offset, tuple(() if n == 1 else c for n, c in zip(shape, coefs, strict=True))
    )


def uniform_value(v: Affine | None) -> int | None:
    """The one integer every element of ``v`` is, at every value of the dims; None where there
    is none."""
    if v is None or not v.uniform:
        return None
    if not v.offset:
        return 0
    (mono, c), *rest = v.offset
    return c if mono == () and not rest else None


def settled(v: Affine | None) -> bool | None:
    """The truth of every element of ``v`` when it is the same constant throughout."""
    value = uniform_value(v)
    return None if value is None else value != 0


# --- text: how the facts of values keep it ----------------------------------------------------


def encode(v: Affine) -> str:
    """``v`` as JSON text (``{"shape", "offset", "coefs"}``, a polynomial as ``[[names, c],
    ...]``)."""
    poly = lambda p: [[list(m), c] for m, c in p]  # noqa: E731
    return json.dumps(
        {"shape": list(v.shape), "offset": poly(v.offset), "coefs": [poly(c) for c in v.coefs]},
        separators=(",", ":"),
    )


def decode(text: str | None) -> Affine | None:
    """The :class:`Affine` :func:`encode` wrote (None for None)."""
    if text is None:
        return None
    d = json.loads(text)
    poly = lambda p: tuple((tuple(m), int(c)) for m, c in p)  # noqa: E731
    return Affine(tuple(d["shape"]), poly(d["offset"]), tuple(poly(c) for c in d["coefs"]))


# --- leaves -----------------------------------------------------------------------------------


def of_constant(array: np.ndarray, dims: Dims | None) -> Affine | None:
    """The affine form of an integer constant: uniform (its value a polynomial over the dims:
    a marker's product reads as the dims it stands for), or a ramp along each axis of static
    numbers only (a ramp through dims' markers need not be one at other values of the dims)."""
    if array.dtype.kind not in "iub" or array.size == 0 or array.size > RAMP_LIMIT:
        return None
    a = array.astype(np.int64)
    shape = tuple(int(n) for n in a.shape)
    first = int(a.reshape(-1)[0])
    number = (lambda v: dims.poly(v)) if dims is not None else constant
    if (a == first).all():
        return affine(shape, number(first), (constant(0),) * a.ndim)
    if dims is not None and any(dims.is_symbolic(int(v)) for v in np.unique(a)):
        return None
    steps = [
        int(a[tuple(1 if i == axis else 0 for i in range(a.ndim))]) - first if n > 1 else 0
        for axis, n in enumerate(shape)
    ]
    ramp = first + sum(
        s * np.arange(n).reshape([-1 if i == axis else 1 for i in range(a.ndim)])
        for axis, (s, n) in enumerate(zip(steps, shape, strict=True))
    )
    if not np.array_equal(a, np.broadcast_to(ramp, shape)):
        return None
    return affine(shape, constant(first), tuple(constant(s) for s in steps))


# --- transfer ---------------------------------------------------------------------------------


def transfer(
    op: str,
    attrs: dict[str, Any],
    operands: Sequence[Operand],
    out: tuple[int, ...],
    out_dtype: int,
    extent: Callable[[int], Poly],
) -> Affine | None:
    """The affine form of an ONNX ``op``'s output (of shape ``out`` at the markers, element type
    ``out_dtype``) from its operands' (in ONNX order); ``extent`` reads a dim at the markers as
    a polynomial. None where unknown."""
    if out_dtype not in INTEGERS or not operands:
        return None
    ins = [o.value for o in operands]
    first = ins[0]
    if op in _RESHAPES:
        return None if first is None else _reshaped(first, out)
    if op == "Cast":
        if first is None or operands[0].dtype not in INTEGERS:
            return None
        if out_dtype != TensorProto.BOOL:
            return first
        truth = settled(first)
        return None if truth is None else affine(first.shape, constant(int(truth)), first.coefs)
    if op == "Expand":
        coefs = None if first is None else aligned(first, out)
        return None if first is None or coefs is None else affine(out, first.offset, coefs)
    if op == "Range":
        start, delta = first, ins[2] if len(ins) > 2 else None
        if start is None or delta is None or not start.uniform or not delta.uniform:
            return None
        return affine(out, start.offset, (delta.offset,)) if len(out) == 1 else None
    if op == "Neg":
        return None if first is None else _negated(first)
    if any(v is None for v in ins):
        return None
    known = [v for v in ins if v is not None]
    if op in ("Add", "Sub", "Mul") and len(known) == 2:
        return _arith(op, known[0], known[1])
    if op in ("And", "Or", "Not"):
        return _logic(op, known, out)
    if op in COMPARISONS and len(known) == 2:
        return compare(op, known[0], known[1], extent)
    return None


def compare(op: str, a: Affine, b: Affine, extent: Callable[[int], Poly]) -> Affine | None:
    """``a op b`` (a comparison of :data:`COMPARISONS`) where it is settled: true, or false, at
    every position and at every value of the dims; else None."""
    if op in ("Greater", "GreaterOrEqual"):
        a, b = b, a
    d = _plus(a, _negated(b))
    bounds = None if d is None else _bounds(d, extent)
    if d is None or bounds is None:
        return None
    low, high = bounds
    # a < b  <=>  d <= -1;  a <= b  <=>  d <= 0 (integers)
    limit = -1 if op in ("Less", "Greater") else 0
    if sign(add(high, constant(-limit))) in (0, -1):
        truth = 1
    elif sign(add(low, constant(-limit - 1))) in (0, 1):
        truth = 0
    else:
        return None
    return affine(d.shape, constant(truth), ((),) * len(d.shape))


def _reshaped(v: Affine, shape: tuple[int, ...]) -> Affine | None:
    """``v`` reshaped to ``shape``: known where only unit dims are inserted or dropped (or ``v``
    is uniform)."""
    if v.uniform:
        return affine(shape, v.offset, ((),) * len(shape))
    moved = [(n, c) for n, c in zip(v.shape, v.coefs, strict=True) if n != 1]
    if [n for n, _ in moved] != [n for n in shape if n != 1]:
        return None
    coefs = iter(c for _, c in moved)
    return affine(shape, v.offset, tuple(next(coefs) if n != 1 else () for n in shape))


def _arith(op: str, a: Affine, b: Affine) -> Affine | None:
    if op == "Sub":
        b = _negated(b)
    if op == "Mul":
        if not (a.uniform or b.uniform):
            return None
        if a.uniform:
            a, b = b, a  # b is the factor
        k = b.offset
        a = affine(a.shape, multiply(a.offset, k), tuple(multiply(c, k) for c in a.coefs))
        b = affine(b.shape, (), ((),) * len(b.shape))
    return _plus(a, b)


def _logic(op: str, ins: Sequence[Affine], out: tuple[int, ...]) -> Affine | None:
    truths = [settled(v) for v in ins]
    if any(t is None for t in truths):
        return None
    result = (not truths[0]) if op == "Not" else all(truths) if op == "And" else any(truths)
    return affine(out, constant(int(result)), ((),) * len(out))


def _bounds(v: Affine, extent: Callable[[int], Poly]) -> tuple[Poly, Poly] | None:
    """The least and the greatest element of ``v`` as polynomials (None when a coefficient's
    sign changes with the dims)."""
    low = high = v.offset
    for n, c in zip(v.shape, v.coefs, strict=True):
        if not c:
            continue
        s = sign(c)
        if s is None:
            return None
        span = multiply(c, add(extent(n), constant(-1)))
        if s > 0:
            high = add(high, span)
        else:
            low = add(low, span)
    return low, high


def aligned(v: Affine, shape: tuple[int, ...]) -> tuple[Poly, ...] | None:
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


def _negated(v: Affine) -> Affine:
    minus = constant(-1)
    return Affine(v.shape, multiply(minus, v.offset), tuple(multiply(minus, c) for c in v.coefs))


def _plus(a: Affine, b: Affine) -> Affine | None:
    """``a + b`` broadcast (None when they do not broadcast)."""
    try:
        shape = tuple(int(n) for n in np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        return None
    ca, cb = aligned(a, shape), aligned(b, shape)
    if ca is None or cb is None:
        return None
    return affine(
        shape, add(a.offset, b.offset), tuple(add(x, y) for x, y in zip(ca, cb, strict=True))
    )


def product(polys: Iterable[Poly]) -> Poly:
    """The product of ``polys`` (1 for none)."""
    out = _ONE
    for p in polys:
        out = multiply(out, p)
    return out


# --- index grids ------------------------------------------------------------------------------


def in_order(axes: Sequence[int | None], lead: tuple[int, ...]) -> bool:
    """Whether the moving axes increase with the data dims and cover every output axis longer
    than 1."""
    moved = [a for a in axes if a is not None]
    covered = set(moved)
    return moved == sorted(covered) and all(n == 1 or a in covered for a, n in enumerate(lead))


def grid_dims(parts: Sequence[Affine], lead: tuple[int, ...]) -> tuple[int, ...] | None:
    """The dims of the data a ``GatherND`` at an index of components ``parts`` (each a form
    over the output axes ``lead``) reads whole, one per component: where each component is the
    position along one axis (coefficient 1, offset 0; that axis's length) or 0 throughout (a
    dim of 1), the moving axes in order and every axis of ``lead`` longer than 1 read by one
    (:func:`in_order`). The gather is then its data reshaped to ``lead`` (plus the data's dims
    past the components). None where the index is no such grid.

    >>> one = constant(1)
    >>> b, k = (Affine((2, 1, 5), constant(0), c) for c in ((one, (), ()), ((), (), one)))
    >>> grid_dims([b, k], (2, 1, 5)), grid_dims([k, b], (2, 1, 5)), grid_dims([b], (2, 1, 5))
    ((2, 5), None, None)
    """
    axes: list[int | None] = []
    for part in parts:
        if part.shape != lead or part.offset:
            return None
        moving = [a for a, c in enumerate(part.coefs) if c]
        if not moving:
            axes.append(None)
        elif len(moving) == 1 and part.coefs[moving[0]] == _ONE:
            axes.append(moving[0])
        else:
            return None
    if not in_order(axes, lead):
        return None
    return tuple(1 if a is None else lead[a] for a in axes)


def components_grid(parts: Sequence[Affine | None]) -> tuple[int, ...] | None:
    """:func:`grid_dims` of a GatherND index's components (each a form over the index's other
    axes), None where one is unknown."""
    known = [p for p in parts if p is not None]
    if not known or len(known) != len(parts):
        return None
    return grid_dims(known, known[0].shape)


def row_dims(v: Affine, dims: Dims | None = None) -> tuple[int, ...] | None:
    """The dims of the data a row index ``v`` into that data flattened reads in row-major
    order, one per moving axis (``b * kv + k``: ``(batch, kv)``): the offset 0, every axis
    longer than 1 moving, in order, the last by 1 and each other by the next one's coefficient
    times a dim (the data's there; where the next axis is shorter, the index reads that dim's
    first rows). The first is the first moving axis's length. A ``Gather`` (axis 0) of the data
    flattened at ``v`` is then the data cut to ``v``'s lengths and reshaped to its shape.
    ``dims``: the model's symbolic dims (None: all static); a coefficient is a polynomial over
    them, each dim read at the markers. None where ``v`` is no such index.

    >>> one = constant(1)
    >>> row_dims(Affine((2, 1, 5), constant(0), (constant(5), (), one)))
    (2, 5)
    >>> row_dims(Affine((2, 1, 5), constant(0), (constant(7), (), one)))
    (2, 7)
    >>> row_dims(Affine((2, 1, 5), constant(0), (constant(4), (), one))) is None
    True
    """
    if v.offset:
        return None
    moving = [a for a, c in enumerate(v.coefs) if c]
    if not moving or not in_order(moving, v.shape) or v.coefs[moving[-1]] != _ONE:
        return None
    extent = dims.poly if dims is not None else constant
    at = dims.with_sums(dims.markers()) if dims is not None else {}
    out = [v.shape[moving[0]]]
    for a, b in itertools.pairwise(moving):
        outer, inner = _at(v.coefs[a], at), _at(v.coefs[b], at)
        if outer is None or inner is None or inner <= 0 or outer % inner:
            return None
        n = outer // inner
        if n < v.shape[b] or multiply(v.coefs[b], extent(n)) != v.coefs[a]:
            return None
        out.append(n)
    return tuple(out)


def _at(poly: Poly, values: dict[str, int]) -> int | None:
    """``poly`` at ``values`` (the markers), None where it names a dim without one."""
    try:
        return poly_value(poly, values)
    except KeyError:
        return None


def index_facts(
    array: np.ndarray, dims: Dims | None = None
) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """The facts ``grid`` and ``rows`` of a constant index (:func:`grid_dims` of its last axis'
    components, :func:`row_dims` of the whole; ``dims``: the model's symbolic dims, None where
    all are static): what the importer stores of a mask gather's constant index, and what the
    rule checker reads of the indices it draws.

    >>> b, k = np.indices((2, 1, 5))[[0, 2]]
    >>> index_facts(np.stack([b, k], -1)), index_facts(5 * b + k)
    (((2, 5), None), (None, (2, 5)))
    """
    if array.dtype.kind not in "iu" or array.ndim == 0:
        return None, None
    grid = components_grid([of_constant(array[..., j], dims) for j in range(array.shape[-1])])
    whole = of_constant(array, dims)
    return grid, None if whole is None else row_dims(whole, dims)
