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
``batch`` as given, else :data:`~relsat.onnx.dimplan.PRICING_BATCH` for a leading dim and
:data:`~relsat.onnx.dimplan.PRICING_OTHER` for
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

from relsat.graph.specialize import SHAPE_LIKE
from relsat.onnx.dimexpr import Poly, Sum, constant, multiply

__all__ = ["SHAPE_LIKE", "Dim", "Dims", "Opened"]


@dataclass(frozen=True)
class Dim:
    """One dynamic dim: its ``name`` (the ``dim_param``, or ``input[axis]`` for an unnamed one),
    its ``marker`` prime, its pricing ``value`` and the ``(input, axis)`` places it occurs;
    ``capped``: the model runs with it at most another dim of its pricing value, never above
    (:func:`relsat.onnx.marked.tied_dims`), so its marker is the smaller."""

    name: str
    marker: int
    value: int
    axes: tuple[tuple[str, int], ...]
    capped: bool = False


@dataclass(frozen=True)
class Opened:
    """A tensor whose dims an operator computes from values, not shapes (NonZero's count, a
    Reshape to a shape given as an input, a Reduce over axes given as one): ``layout`` its dims
    (an int where ONNX infers one, else the name of a dim of its own), ``elem_type`` its ONNX
    element type, ``op`` the operator writing it (:mod:`relsat.onnx.opened`)."""

    tensor: str
    elem_type: int
    layout: tuple[int | str, ...]
    op: str


@dataclass(frozen=True)
class Dims:
    """The dynamic dims of one model and each input's dims (an int, or a dim's name);
    ``sums``: the dims the model spells as expressions of others (``past + 1``:
    :class:`~relsat.onnx.dimexpr.Sum`, their values following those dims'); ``fixed``: the dims
    the model itself fixes (it runs at no other value): name, value and where in words
    (``("d3_2", 2, "grid dim 3 (d3_2)")``), static here and in the written model's interface;
    ``opened``: tensors whose dims an operator computes from values (:class:`Opened`), each
    such dim one of :attr:`dims` (its pricing value what onnxruntime computes at the pricing
    shape, its place ``(tensor, axis)``).

    A sum of several terms is an *atom* of the products :meth:`factor` reads, beside the
    markers: at the markers its value is divisible by none of them and divides no static
    number of the model (:meth:`sum_clash`), so ``2*batch*(past + 1)`` reads back as such."""

    dims: tuple[Dim, ...]
    inputs: Mapping[str, tuple[int | str, ...]] = field(hash=False, compare=False)
    fixed: tuple[tuple[str, int, str], ...] = ()
    sums: tuple[Sum, ...] = ()
    opened: tuple[Opened, ...] = ()

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

    def with_sums(self, values: Mapping[str, int]) -> dict[str, int]:
        """``values`` (dim name → value) with every sum's value at them, in order (a sum may
        name an earlier one: ``((H + 1)//2 + 1)//2``)."""
        out = dict(values)
        for s in self.sums:
            out[s.name] = s.at(out)
        return out

    def atoms(self) -> tuple[tuple[str, int], ...]:
        """The sums that are no product (:attr:`Sum.is_atom`), then the dims: ``(name, value at
        the markers)``."""
        markers = self.markers()
        at = self.with_sums(markers)
        sums = tuple((s.name, at[s.name]) for s in self.sums if s.is_atom)
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

    def poly(self, v: int) -> Poly:
        """``v`` (a number at the markers) as a polynomial over the dims, each sum written out
        (``2*(past + 1)`` reads ``2*past + 2``); a static number as itself."""
        f = self.factor(v)
        if f is None:
            return constant(v)
        coef, powers = f
        out = constant(coef)
        for name, e in powers:
            s = self.sum(name)
            atom = s.terms if s is not None and s.divisor == 1 else (((name,), 1),)
            for _ in range(e):
                out = multiply(out, atom)
        return out

    def is_symbolic(self, v: int) -> bool:
        return self.factor(v) is not None

    def resolve(self, values: Mapping[str, int] | None = None) -> dict[str, int]:
        """Every dim's and sum's value at ``values`` (missing dims: their pricing values)."""
        return self.with_sums({**self.pricing(), **(values or {})})

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
        at = self.with_sums(self.markers())
        return {
            k: tuple(at[d] if isinstance(d, str) else d for d in v) for k, v in self.inputs.items()
        }

    def marked_opened(self) -> dict[str, tuple[int, tuple[int, ...]]]:
        """Each opened tensor's element type and shape with markers for its dims."""
        at = self.markers()
        return {
            o.tensor: (o.elem_type, tuple(at[d] if isinstance(d, str) else d for d in o.layout))
            for o in self.opened
        }

    def opened_names(self) -> set[str]:
        """The dims operators compute from values (:attr:`opened`)."""
        return {d for o in self.opened for d in o.layout if isinstance(d, str)}

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
        """A marker to choose again, when a sum that is no product (:attr:`Sum.is_atom`) is no
        atom at these markers: below 2, even when divided, divisible by a marker, dividing a
        static number of the model or another sum's value; None when every sum is one."""
        markers = self.markers()
        numbers = {abs(int(n)) for n in static if n}
        at = self.with_sums(markers)
        values = [(s, at[s.name]) for s in self.sums if s.is_atom]
        for s, v in values:
            bad = (
                v < 2
                or (s.divisor > 1 and v % 2 == 0)  # odd, as the markers: no rule that needs
                # an even side (a halving) matches a side through a stride by accident
                or any(v % m == 0 for m in markers.values())
                or any(n % v == 0 for n in numbers)
                or any(w != v and w % v == 0 for _, w in values)
                or sum(w == v for _, w in values) > 1
            )
            if bad:
                return self.marker_of(s.name)
        return None

    def marker_of(self, atom: str) -> int:
        """The marker of dim ``atom``, or of a sum's first dim (the one to choose again)."""
        return self.dim(self.base(atom)[0]).marker

    def base(self, atom: str) -> tuple[str, ...]:
        """The dims ``atom`` is made of, through the sums it names (itself for a dim)."""
        s = self.sum(atom)
        if s is None:
            return (atom,)
        return tuple(dict.fromkeys(d for n in s.names for d in self.base(n)))

    def describe(self, values: Mapping[str, int] | None = None) -> str:
        """``batch=1, sequence=128`` (the inputs' dims: not those operators compute from
        values, :attr:`opened`)."""
        want = {**self.pricing(), **(values or {})}
        opened = self.opened_names()
        return ", ".join(f"{d.name}={want[d.name]}" for d in self.dims if d.name not in opened)

    def describe_shapes(self, values: Mapping[str, int] | None = None) -> str:
        """``input_ids=[1, 128], attention_mask=[1, 128]``."""
        return ", ".join(f"{k}={list(v)}" for k, v in self.shapes(values).items())

    def check_shapes(self) -> tuple[dict[str, int], ...]:
        """The dim values the onnxruntime check runs at: the pricing values; leading (batch)
        dims one larger; the other dims all moved down by half the smallest of them less one
        (128 to 65; two up when that is tiny), so that dims the model keeps apart by a constant
        (a mask of ``past + 1`` beside a cache of ``past``) stay so. Where the model has only
        one kind, the third varies that kind again. Dims operators compute from values
        (:attr:`opened`) follow the inputs: never moved (one shape when there is no other)."""
        price = self.pricing()
        free = [d for d in self.dims if d.name not in self.opened_names()]  # inputs' dims
        if not free:  # only dims computed from values: they follow the inputs
            return ({**price},)
        batch = [d.name for d in free if any(axis == 0 for _, axis in d.axes)]
        other = [d.name for d in free if d.name not in batch]
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
            return f"{name}, of {self.where(self.base(name)[0])}"
        axes = s.axes if s is not None else self.dim(name).axes
        label = name
        if not axes:
            holder = next((h for h in self.sums if name in h.names and h.axes), None)
            if holder is None:
                return name
            axes, label = holder.axes, f"{holder.name}, of {name}"
        tensor, axis = axes[0]
        return f"{tensor} dim {axis} ({label})"
