"""Symbolic dims: a model's dynamic axes kept dynamic through optimization.

The e-graph engine works on concrete shapes. A dynamic dim (an input's ``dim_param`` such as
``batch`` or ``sequence``, or an unnamed dynamic dim) is therefore given a *marker*: a distinct
prime, the same for every occurrence of one name. Everything shape-like the model computes from
it — a Reshape target, a Slice bound, an intermediate tensor's dims — comes out as a product of
markers and a constant (the affine forms exporters produce), which :meth:`Dims.factor` reads
back. Markers are chosen so that no static number of the model is divisible by one, so a rule
that needs a dim to be 1, or to equal another dim, cannot match a marker by accident: what the
e-graph rewrites holds for every value of the dim.

Nothing runs at marker sizes. Each dim also has a *pricing value* (``input_shapes`` and
``batch`` as given, else :data:`PRICING_BATCH` for a leading dim and :data:`PRICING_OTHER` for
any other): prices, NumPy verification and timing substitute it (:meth:`Dims.value`), and the
onnxruntime check runs at :meth:`Dims.check_shapes` (the pricing shape and two others).

>>> batch, seq = Dim("batch", 61, 1, (("x", 0),)), Dim("seq", 113, 128, (("x", 1),))
>>> dims = Dims((batch, seq), {"x": ("batch", "seq", 64)})
>>> dims.factor(61 * 113 * 4), dims.value(61 * 113 * 4), dims.spell(61 * 113 * 4)
((4, (('batch', 1), ('seq', 1))), 512, '4*batch*seq')
>>> dims.shapes()
{'x': (1, 128, 64)}
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from relsat.graph.specialize import SHAPE_LIKE
from relsat.onnx.dimexpr import Poly, Sum, parse
from relsat.onnx.errors import OnnxError

__all__ = [
    "PRICING_BATCH",
    "PRICING_OTHER",
    "SHAPE_LIKE",
    "Dim",
    "Dims",
    "plan",
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


@dataclass(frozen=True)
class Dim:
    """One dynamic dim: its ``name`` (the ``dim_param``, or ``input[axis]`` for an unnamed one),
    its ``marker`` prime, its pricing ``value`` and the ``(input, axis)`` places it occurs."""

    name: str
    marker: int
    value: int
    axes: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Dims:
    """The dynamic dims of one model and each input's dims (an int, or a dim's name);
    ``sums``: the dims the model spells as expressions of others (``past + 1``:
    :class:`~relsat.onnx.dimexpr.Sum`, their values following those dims'); ``fixed``: the dims
    the model itself fixes (it runs at no other value): name, value and where in words
    (``("d3_2", 2, "grid dim 3 (d3_2)")``), static here and in the written model's interface.

    A sum of several terms is an *atom* of the products :meth:`factor` reads, beside the
    markers: at the markers its value is divisible by none of them and divides no static
    number of the model (:meth:`sum_clash`), so ``2*batch*(past + 1)`` reads back as such."""

    dims: tuple[Dim, ...]
    inputs: Mapping[str, tuple[int | str, ...]] = field(hash=False, compare=False)
    fixed: tuple[tuple[str, int, str], ...] = ()
    sums: tuple[Sum, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", {k: tuple(v) for k, v in self.inputs.items()})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dims)

    def dim(self, name: str) -> Dim:
        return next(d for d in self.dims if d.name == name)

    def sum(self, name: str) -> Sum | None:
        return next((s for s in self.sums if s.name == name), None)

    def pricing(self) -> dict[str, int]:
        """Dim name → pricing value."""
        return {d.name: d.value for d in self.dims}

    def markers(self) -> dict[str, int]:
        """Dim name → marker."""
        return {d.name: d.marker for d in self.dims}

    def atoms(self) -> tuple[tuple[str, int], ...]:
        """The sums of several terms, then the dims: ``(name, value at the markers)``."""
        markers = self.markers()
        sums = tuple((s.name, s.at(markers)) for s in self.sums if len(s.terms) > 1)
        return sums + tuple(markers.items())

    def factor(self, v: int) -> tuple[int, tuple[tuple[str, int], ...]] | None:
        """``v`` as ``(coefficient, ((atom, exponent), ...))`` when an atom (a marker, or a sum's
        value at the markers) divides it, else None (a static number)."""
        if v == 0:
            return None
        rest, powers = int(v), []
        for name, value in self.atoms():
            e = 0
            while rest % value == 0:
                rest, e = rest // value, e + 1
            if e:
                powers.append((name, e))
        return (rest, tuple(powers)) if powers else None

    def is_symbolic(self, v: int) -> bool:
        return self.factor(v) is not None

    def resolve(self, values: Mapping[str, int] | None = None) -> dict[str, int]:
        """Every dim's and sum's value at ``values`` (missing dims: their pricing values)."""
        want = {**self.pricing(), **(values or {})}
        return want | {s.name: s.at(want) for s in self.sums}

    def value(self, v: int, values: Mapping[str, int] | None = None) -> int:
        """``v`` with every atom replaced by its value at ``values`` (missing dims, or all when
        None: the pricing values)."""
        f = self.factor(v)
        if f is None:
            return int(v)
        want = self.resolve(values)
        coef, powers = f
        return coef * math.prod(want[n] ** e for n, e in powers)

    def spell(self, v: int) -> str:
        """``v`` in words: ``4*batch*sequence``, ``2*(past + 1)``, or the number."""
        f = self.factor(v)
        if f is None:
            return str(v)
        coef, powers = f
        parts = [] if coef == 1 else [str(coef)]
        alone = coef == 1 and len(powers) == 1 and powers[0][1] == 1
        for n, e in powers:
            atom = n if alone or self.sum(n) is None else f"({n})"
            parts.append(atom if e == 1 else f"{atom}^{e}")
        return "*".join(parts)

    def marked(self) -> dict[str, tuple[int, ...]]:
        """Each input's shape with markers for its dynamic dims."""
        at = {d.name: d.marker for d in self.dims}
        at |= {s.name: s.at(at) for s in self.sums}
        return {
            k: tuple(at[d] if isinstance(d, str) else d for d in v) for k, v in self.inputs.items()
        }

    def shapes(self, values: Mapping[str, int] | None = None) -> dict[str, tuple[int, ...]]:
        """Each input's shape at ``values`` (dim name → value; missing ones: pricing)."""
        want = self.resolve(values)
        return {
            k: tuple(want[d] if isinstance(d, str) else d for d in v)
            for k, v in self.inputs.items()
        }

    def with_markers(self, markers: Sequence[int]) -> Dims:
        """The same dims with other markers (the second assignment the import checks with)."""
        return replace(
            self, dims=tuple(replace(d, marker=m) for d, m in zip(self.dims, markers, strict=True))
        )

    def sum_clash(self, static: Iterable[int]) -> int | None:
        """A marker to choose again, when a sum of several terms is no atom at these markers:
        below 2, divisible by a marker, dividing a static number of the model or another sum's
        value; None when every sum is one."""
        markers = self.markers()
        numbers = {abs(int(n)) for n in static if n}
        values = [(s, s.at(markers)) for s in self.sums if len(s.terms) > 1]
        for s, v in values:
            bad = (
                v < 2
                or any(v % m == 0 for m in markers.values())
                or any(n % v == 0 for n in numbers)
                or any(w != v and w % v == 0 for _, w in values)
                or sum(w == v for _, w in values) > 1
            )
            if bad:
                return markers[s.names[0]]
        return None

    def marker_of(self, atom: str) -> int:
        """The marker of dim ``atom``, or of a sum's first dim (the one to choose again)."""
        s = self.sum(atom)
        return self.dim(s.names[0] if s is not None else atom).marker

    def describe(self, values: Mapping[str, int] | None = None) -> str:
        """``batch=1, sequence=128``."""
        want = {**self.pricing(), **(values or {})}
        return ", ".join(f"{d.name}={want[d.name]}" for d in self.dims)

    def describe_shapes(self, values: Mapping[str, int] | None = None) -> str:
        """``input_ids=[1, 128], attention_mask=[1, 128]``."""
        return ", ".join(f"{k}={list(v)}" for k, v in self.shapes(values).items())

    def check_shapes(self) -> tuple[dict[str, int], ...]:
        """The dim values the onnxruntime check runs at: the pricing values; leading (batch)
        dims one larger; the other dims all moved down by half the smallest of them less one
        (128 to 65; two up when that is tiny), so that dims the model keeps apart by a constant
        (a mask of ``past + 1`` beside a cache of ``past``) stay so. Where the model has only
        one kind, the third varies that kind again."""
        price = self.pricing()
        batch = [d.name for d in self.dims if any(axis == 0 for _, axis in d.axes)]
        other = [d.name for d in self.dims if d.name not in batch]
        second = {n: price[n] + 1 for n in (batch or other)}
        if other and batch:
            down = min(price[n] for n in other) // 2
            third = {n: price[n] - down + 1 if down > 1 else price[n] + 2 for n in other}
        else:
            third = {n: price[n] + 2 for n in (batch or other)}
        return ({**price}, {**price, **second}, {**price, **third})

    def where(self, name: str) -> str:
        """Where dim (or sum) ``name`` occurs first, in words: ``input_ids dim 1 (sequence)``;
        a dim that occurs only inside sums, where the first of them does; a sum found inside
        the model, by its first dim."""
        s = self.sum(name)
        if s is not None and not s.axes:
            return f"{name}, of {self.where(s.names[0])}"
        axes = s.axes if s is not None else self.dim(name).axes
        label = name
        if not axes:
            holder = next((h for h in self.sums if name in h.names and h.axes), None)
            if holder is None:
                return name
            axes, label = holder.axes, f"{holder.name}, of {name}"
        tensor, axis = axes[0]
        return f"{tensor} dim {axis} ({label})"


def plan(
    model: Any,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    batch: int | None = None,
    *,
    avoid: Iterable[int] = (),
    path: str | None = None,
    same: Mapping[str, str | Poly] | None = None,
    fixed: Mapping[str, int] | None = None,
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
    :attr:`Dims.fixed`). (Eight parameters: the model, the two ways a user gives pricing values,
    and what the importer knows of the model.)"""
    given = dict(input_shapes or {})
    alias = {k: v for k, v in (same or {}).items() if isinstance(v, str)}
    summed = {k: v for k, v in (same or {}).items() if not isinstance(v, str)}
    pinned = dict(fixed or {})
    inits = {i.name for i in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    unknown = sorted(set(given) - {vi.name for vi in inputs})
    if unknown:
        raise OnnxError(
            f"input_shapes names unknown inputs {unknown}; inputs are {[vi.name for vi in inputs]}",
            path=path,
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
                f"input_shapes gives rank {len(shape)}, the input has rank {len(dims)}",
                tensor=vi.name,
                path=path,
            )
        for i, d in enumerate(dims):
            static = d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
            if static is not None and shape is not None and shape[i] != static:
                raise OnnxError(
                    f"input_shapes gives dim {i} = {shape[i]}, the model fixes it to {static}",
                    tensor=vi.name,
                    path=path,
                )
            if static is not None or shape is None:
                continue
            name, expr = spelled.dim(vi.name, i, d)
            if isinstance(expr, int) and expr != shape[i]:
                raise OnnxError(
                    f"input_shapes gives dim {i} = {shape[i]}, the model fixes it to {expr}",
                    tensor=vi.name,
                    path=path,
                )
            if expr is not None:
                if isinstance(expr, Sum):
                    wanted.append((expr, int(shape[i]), vi.name, i))
                continue
            if values.get(name, shape[i]) != shape[i]:
                first = axes[name][0]
                raise OnnxError(
                    f"input_shapes gives dim {name!r} = {shape[i]} here and {values[name]} "
                    f"for {first[0]} dim {first[1]}",
                    tensor=vi.name,
                    path=path,
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
    spec = tuple(Dim(name, 0, v, tuple(axes.get(name, ()))) for name, v in values.items())
    return remarked(Dims(spec, layout, held, tuple(sums.values())), set(avoid), model)


def remarked(dims: Dims, avoid: set[int], model: Any, *, taken: Iterable[int] = ()) -> Dims:
    """``dims`` with markers (:func:`choose_markers`, not ``avoid`` nor ``taken``) at which
    each of its sums is an atom (:meth:`Dims.sum_clash`); :class:`OnnxError` when tries run
    out."""
    static = static_numbers(model)
    avoid = set(avoid)
    for _ in range(SUM_TRIES):
        markers = choose_markers([d.value for d in dims.dims], avoid, static, taken=taken)
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
                        f"input_shapes gives dim {axis} ({expr.name}) = {v}; with {at} it is "
                        f"{expr.at(values)}",
                        tensor=tensor,
                        path=path,
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
                f"input_shapes gives dim {axis} ({expr.name}) = {v}, which does not fix its "
                f"dims {', '.join(n for n in expr.names if n not in values)}; give them too",
                tensor=tensor,
                path=path,
            )
        pending = left


def choose_markers(
    values: Sequence[int], avoid: set[int], static: Iterable[int], *, taken: Iterable[int] = ()
) -> list[int]:
    """One prime per pricing value: the largest in ``[SMALLEST_MARKER, max(value,
    MARKER_FLOOR)]`` that is not in ``avoid`` or ``taken``, divides no number of ``static``,
    and is not yet chosen; when that range has none left (a model with many small dims: the
    second assignment needs as many primes again), the smallest such prime above it, up to
    :data:`MARKER_CEILING` times its top. A marker above a bound the model puts on its dim
    then fails the import, which says so. :class:`OnnxError` when none is left.

    >>> choose_markers([3] * 6, set(), [], taken=[61, 59, 53, 47, 43, 41, 37])
    [31, 29, 23, 67, 71, 73]
    """
    numbers = {abs(int(n)) for n in static if n}
    used = set(avoid) | set(taken)
    out = []
    for value in values:
        top = max(int(value), MARKER_FLOOR)
        below = [p for p in reversed(_primes(top)) if p >= SMALLEST_MARKER]
        above = [p for p in _primes(MARKER_CEILING * top) if p > top]
        pick = next(
            (p for p in [*below, *above] if p not in used and all(n % p for n in numbers)),
            None,
        )
        if pick is None:
            raise OnnxError(
                f"no prime up to {MARKER_CEILING * top} is free to stand for a dynamic dim"
            )
        used.add(pick)
        out.append(pick)
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
