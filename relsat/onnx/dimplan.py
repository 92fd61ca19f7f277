"""A model's dynamic dims planned: which dims there are, their pricing values and markers
(:class:`~relsat.onnx.symbolic.Dims`).

:func:`plan` reads the inputs' dims (a ``dim_param`` spelling a sum of dims is a
:class:`~relsat.onnx.dimexpr.Sum`), takes the pricing values given (``input_shapes``,
``batch``) or the defaults (:data:`PRICING_BATCH` for a leading dim, :data:`PRICING_OTHER` for
any other) and chooses markers (:func:`choose_markers`: primes dividing no static number of the
model, :func:`static_numbers`; :func:`remarked` when sums must read back at them too).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any

from relsat.graph.specialize import SHAPE_LIKE
from relsat.onnx.dimexpr import Poly, Sum, parse
from relsat.onnx.errors import OnnxError
from relsat.onnx.symbolic import Dim, Dims

__all__ = [
    "MARKER_CEILING",
    "MARKER_FLOOR",
    "PRICING_BATCH",
    "PRICING_OTHER",
    "SMALLEST_MARKER",
    "WIDE_MARKERS",
    "choose_markers",
    "plan",
    "remarked",
    "static_numbers",
]

#: The pricing value of a dynamic leading dim (batch) when none is given.
PRICING_BATCH = 1
#: The pricing value of any other dynamic dim (a sequence length, an image side) when none is
#: given.
PRICING_OTHER = 128
#: Markers are primes at least this large (small primes divide too many static sizes) and at
#: most the dim's pricing value, or this floor when the pricing value is smaller, so that a
#: marker stays within a bound the model puts on its dim (a sequence at most the position
#: table's length) whenever the pricing value does.
SMALLEST_MARKER = 23
MARKER_FLOOR = 61
#: Markers are looked for up to this many times the range's top when the range has none left.
MARKER_CEILING = 8
#: Marker sets tried for a model whose sums must read back (:meth:`Dims.sum_clash`).
SUM_TRIES = 16
#: Markers of the dims a divided sum is made of (an image side through strided convolutions:
#: :attr:`~relsat.onnx.dimexpr.Sum.divisor`) are primes in this range, largest first: after
#: five halvings such a side is still in the hundreds, above a model's small static numbers,
#: and products of a few such dims stay far inside int64.
WIDE_MARKERS = (1 << 12, 1 << 14)
#: Marker sets tried for a model with divided sums (each of its chains of halvings reads back
#: at about one prime in 2**depth).
WIDE_TRIES = 4096


def plan(
    model: Any,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    batch: int | None = None,
    *,
    avoid: Iterable[int] = (),
    path: str | None = None,
    same: Mapping[str, str | Poly] | None = None,
    fixed: Mapping[str, int] | None = None,
    capped: Iterable[str] = (),
) -> Dims | None:
    """The dynamic dims of ``model`` (an ``onnx.ModelProto``) with markers and pricing values,
    or None when every input dim is static. ``input_shapes`` gives pricing values by input and
    axis, ``batch`` those of dynamic leading dims; :class:`OnnxError` for unknown inputs, a wrong
    rank, a static dim given another value, or one dim given two values. A ``dim_param`` that
    spells an expression of dims (``past + 1``: :func:`relsat.onnx.dimexpr.parse`) is a
    :class:`~relsat.onnx.dimexpr.Sum` of them: its value follows theirs, and a value given for
    it gives the one dim of it not given otherwise. ``avoid``: primes not to use (beside those
    dividing a static number of the model); ``path`` names the file in errors; ``same`` maps a
    dim's name to the name of a dim it is one with (the model ties them:
    :func:`relsat.onnx.marked.tied_dims`) or to the sum of dims it is
    (:func:`relsat.onnx.marked.summed_dims`), and ``fixed`` a dim's name to the value the model
    fixes it to (:func:`relsat.onnx.marked.bound_dims`: static here, listed in
    :attr:`Dims.fixed`); ``capped`` names the dims the model runs with at most another of their
    pricing value (:attr:`Dim.capped`: the smaller markers). (Nine parameters: the model, the
    two ways a user gives pricing values, and what the importer knows of the model.)"""
    given = dict(input_shapes or {})
    alias = {k: v for k, v in (same or {}).items() if isinstance(v, str)}
    summed = {k: v for k, v in (same or {}).items() if not isinstance(v, str)}
    pinned = dict(fixed or {})
    inits = {i.name for i in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    unknown = sorted(set(given) - {vi.name for vi in inputs})
    if unknown:
        raise OnnxError(
            f"{{input_shapes}} names unknown inputs {unknown}; inputs are "
            f"{[vi.name for vi in inputs]}",
            path=path,
            settings=("input_shapes",),
        )
    spelled = _Spelled(inputs, alias, pinned, summed)
    layout: dict[str, tuple[int | str, ...]] = {}
    axes: dict[str, list[tuple[str, int]]] = {}
    values: dict[str, int] = {}
    wanted: list[tuple[Sum, int, str, int]] = []  # sums given a value: sum, value, input, axis
    for vi in inputs:  # the values given, checked against the model and each other
        dims = vi.type.tensor_type.shape.dim
        shape = given.get(vi.name)
        if shape is not None and len(shape) != len(dims):
            raise OnnxError(
                f"{{input_shapes}} gives rank {len(shape)}, the input has rank {len(dims)}",
                tensor=vi.name,
                path=path,
                settings=("input_shapes",),
            )
        for i, d in enumerate(dims):
            static = d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
            if static is not None and shape is not None and shape[i] != static:
                raise OnnxError(
                    f"{{input_shapes}} gives dim {i} = {shape[i]}, the model fixes it to {static}",
                    tensor=vi.name,
                    path=path,
                    settings=("input_shapes",),
                )
            if static is not None or shape is None:
                continue
            name, expr = spelled.dim(vi.name, i, d)
            if isinstance(expr, int) and expr != shape[i]:
                raise OnnxError(
                    f"{{input_shapes}} gives dim {i} = {shape[i]}, the model fixes it to {expr}",
                    tensor=vi.name,
                    path=path,
                    settings=("input_shapes",),
                )
            if expr is not None:
                if isinstance(expr, Sum):
                    wanted.append((expr, int(shape[i]), vi.name, i))
                continue
            if values.get(name, shape[i]) != shape[i]:
                first = axes[name][0]
                raise OnnxError(
                    f"{{input_shapes}} gives dim {name!r} = {shape[i]} here and {values[name]} "
                    f"for {first[0]} dim {first[1]}",
                    tensor=vi.name,
                    path=path,
                    settings=("input_shapes",),
                )
            values[name] = int(shape[i])
            axes.setdefault(name, []).append((vi.name, i))
    _solve(wanted, values, path)
    sums: dict[str, Sum] = {}
    for vi in inputs:  # every dim: static, or a name with a value (given, or a default)
        row: list[int | str] = []
        for i, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                row.append(int(d.dim_value))
                continue
            name, expr = spelled.dim(vi.name, i, d)
            if isinstance(expr, int):  # a sum of dims the model fixes
                row.append(expr)
                continue
            if name in pinned:  # the model fixes it: static, said in Dims.fixed
                if (vi.name, i) not in axes.setdefault(name, []):
                    axes[name].append((vi.name, i))
                row.append(pinned[name])
                continue
            for n in expr.names if expr is not None else (name,):
                if n not in values:
                    lead = i == 0 and expr is None
                    values[n] = batch if lead and batch is not None else _default(lead)
            if expr is not None:
                held_axes = sums[name].axes if name in sums else ()
                sums[name] = Sum(name, expr.terms, (*held_axes, (vi.name, i)))
            elif (vi.name, i) not in axes.setdefault(name, []):
                axes[name].append((vi.name, i))
            row.append(name)
        layout[vi.name] = tuple(row)
    held = tuple(
        (n, v, f"{axes[n][0][0]} dim {axes[n][0][1]} ({n})")
        for n, v in pinned.items()
        if axes.get(n)
    )
    values = {n: v for n, v in values.items() if n not in pinned}
    if not values:
        return None
    low = set(capped)
    spec = tuple(
        Dim(name, 0, v, tuple(axes.get(name, ())), name in low) for name, v in values.items()
    )
    return remarked(Dims(spec, layout, held, tuple(sums.values())), set(avoid), model)


def remarked(dims: Dims, avoid: set[int], model: Any, *, taken: Iterable[int] = ()) -> Dims:
    """``dims`` with markers (:func:`choose_markers`, not ``avoid`` nor ``taken``) at which
    each of its sums is an atom (:meth:`Dims.sum_clash`); :class:`OnnxError` when tries run
    out."""
    static = static_numbers(model)
    avoid = set(avoid)
    divided = {b for s in dims.sums if s.divisor > 1 for b in dims.base(s.name)}
    wide = [d.name in divided for d in dims.dims]
    for _ in range(WIDE_TRIES if divided else SUM_TRIES):
        values = [d.value for d in dims.dims]
        last = [d.capped for d in dims.dims]
        markers = choose_markers(values, avoid, static, taken=taken, wide=wide, last=last)
        out = dims.with_markers(markers)
        bad = out.sum_clash(static)
        if bad is None:
            return out
        avoid.add(bad)
    names = ", ".join(s.name for s in dims.sums)
    raise OnnxError(f"no markers found at which the dims {names} read back as sums")


class _Spelled:
    """Each input dim's name after the ties and, for a ``dim_param`` spelling an expression,
    its :class:`Sum` (with the dims tied renamed and those fixed put in; an int when nothing
    is left)."""

    def __init__(
        self,
        inputs: Sequence[Any],
        alias: Mapping[str, str],
        pinned: Mapping[str, int],
        summed: Mapping[str, Poly],
    ):
        self.alias, self.pinned, self.summed = alias, pinned, summed
        self.plain = {
            d.dim_param for vi in inputs for d in vi.type.tensor_type.shape.dim if d.dim_param
        }

    def dim(self, tensor: str, axis: int, d: Any) -> tuple[str, Sum | int | None]:
        name = d.dim_param or f"{tensor}[{axis}]"
        poly = self.summed.get(name) or (parse(name, self.plain) if d.dim_param else None)
        if poly is None:
            return self.alias.get(name, name), None
        terms: dict[tuple[str, ...], int] = {}
        for mono, c in poly:
            kept = []
            for n in mono:
                n = self.alias.get(n, n)
                if n in self.pinned:
                    c *= self.pinned[n]
                else:
                    kept.append(n)
            key = tuple(sorted(kept))
            terms[key] = terms.get(key, 0) + c
        canon = tuple(sorted((m, c) for m, c in terms.items() if c))
        if all(not m for m, _ in canon):
            return name, sum(c for _, c in canon)
        if len(canon) == 1 and canon[0][1] == 1 and len(canon[0][0]) == 1:
            return canon[0][0][0], None  # the expression is one dim
        return name, Sum(name, canon, ())


def _default(leading: bool) -> int:
    return PRICING_BATCH if leading else PRICING_OTHER


def _solve(
    wanted: list[tuple[Sum, int, str, int]], values: dict[str, int], path: str | None
) -> None:
    """Work out the dims the values given for sums fix (``past + 1`` given 129: past = 128),
    and check the sums whose dims are all known; :class:`OnnxError` naming the dim that
    disagrees or cannot be worked out."""
    pending = list(wanted)
    while pending:
        left = []
        for expr, v, tensor, axis in pending:
            if all(n in values for n in expr.names):
                if expr.at(values) != v:
                    at = ", ".join(f"{n} = {values[n]}" for n in expr.names)
                    raise OnnxError(
                        f"{{input_shapes}} gives dim {axis} ({expr.name}) = {v}; with {at} it is "
                        f"{expr.at(values)}",
                        tensor=tensor,
                        path=path,
                        settings=("input_shapes",),
                    )
                continue
            solved = expr.solve(v, values)
            if solved is None:
                left.append((expr, v, tensor, axis))
            else:
                values[solved[0]] = solved[1]
        if len(left) == len(pending):
            expr, v, tensor, axis = left[0]
            raise OnnxError(
                f"{{input_shapes}} gives dim {axis} ({expr.name}) = {v}, which does not fix its "
                f"dims {', '.join(n for n in expr.names if n not in values)}; give them too",
                tensor=tensor,
                path=path,
                settings=("input_shapes",),
            )
        pending = left


def choose_markers(
    values: Sequence[int],
    avoid: set[int],
    static: Iterable[int],
    *,
    taken: Iterable[int] = (),
    wide: Sequence[bool] = (),
    last: Sequence[bool] = (),
) -> list[int]:
    """One prime per pricing value: the largest in ``[SMALLEST_MARKER, max(value,
    MARKER_FLOOR)]`` that is not in ``avoid`` or ``taken``, divides no number of ``static``,
    and is not yet chosen; when that range has none left (a model with many small dims: the
    second assignment needs as many primes again), the smallest such prime above it, up to
    :data:`MARKER_CEILING` times its top. A marker above a bound the model puts on its dim
    then fails the import, which says so. Where ``wide`` is true for a value, the largest free
    prime in :data:`WIDE_MARKERS` instead. Values are given theirs largest first, and among
    equal values those where ``last`` is true after the others
    (:attr:`~relsat.onnx.symbolic.Dim.capped`), so that markers keep the order of the values: a
    model that runs at the pricing values only with one dim at most another (a mask at least as
    long as the keys it is read at) runs at the markers too. :class:`OnnxError` when none is
    left.

    >>> choose_markers([3] * 6, set(), [], taken=[61, 59, 53, 47, 43, 41, 37])
    [31, 29, 23, 67, 71, 73]
    >>> choose_markers([1, 1], set(), []), choose_markers([1, 1], set(), [], last=[True, False])
    ([61, 59], [59, 61])
    >>> choose_markers([127, 128], set(), [])
    [113, 127]
    """
    numbers = {abs(int(n)) for n in static if n}
    used = set(avoid) | set(taken)
    out = [0] * len(values)
    capped = [i < len(last) and last[i] for i in range(len(values))]
    for i in sorted(range(len(values)), key=lambda i: (-int(values[i]), capped[i])):
        value = values[i]
        if i < len(wide) and wide[i]:
            low, ceiling = WIDE_MARKERS
            below, above = [p for p in reversed(_primes(ceiling)) if p >= low], []
        else:
            top = max(int(value), MARKER_FLOOR)
            ceiling = MARKER_CEILING * top
            below = [p for p in reversed(_primes(top)) if p >= SMALLEST_MARKER]
            above = [p for p in _primes(ceiling) if p > top]
        pick = next(
            (p for p in [*below, *above] if p not in used and all(n % p for n in numbers)),
            None,
        )
        if pick is None:
            raise OnnxError(f"no prime up to {ceiling} is free to stand for a dynamic dim")
        used.add(pick)
        out[i] = pick
    return out


@cache
def _primes(top: int) -> tuple[int, ...]:
    """The primes up to ``top``."""
    sieve = bytearray([1]) * (top + 1)
    sieve[:2] = b"\x00\x00"
    for p in range(2, math.isqrt(top) + 1):
        if sieve[p]:
            sieve[p * p :: p] = bytearray(len(sieve[p * p :: p]))
    return tuple(i for i, flag in enumerate(sieve) if flag)


def static_numbers(model: Any) -> set[int]:
    """The static numbers a marker must not divide: every initializer's and declared tensor's
    dims, small integer constants (initializers, Constant nodes, :data:`SHAPE_LIKE` or fewer
    elements) and integer attributes."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    out: set[int] = set()
    graph = model.graph
    ints = {getattr(onnx.TensorProto, t) for t in ("INT8", "INT16", "INT32", "INT64", "UINT8")}
    ints |= {onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64}

    def tensor(t: onnx.TensorProto) -> None:
        out.update(int(d) for d in t.dims)
        if t.data_type in ints and math.prod(t.dims) <= SHAPE_LIKE and t.data_location == 0:
            out.update(int(v) for v in np.asarray(numpy_helper.to_array(t)).reshape(-1))

    for t in graph.initializer:
        tensor(t)
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        out.update(d.dim_value for d in vi.type.tensor_type.shape.dim if d.HasField("dim_value"))
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.INT:
                out.add(int(a.i))
            elif a.type == onnx.AttributeProto.INTS:
                out.update(int(v) for v in a.ints)
            elif a.type == onnx.AttributeProto.TENSOR:
                tensor(a.t)
    return {n for n in out if n}
