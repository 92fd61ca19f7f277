"""Import with symbolic dims: :func:`relsat.onnx.load_symbolic`.

The dims are planned (:func:`relsat.onnx.dimplan.plan`: a marker and a pricing value each),
the model's shape computations folded at two marker assignments
(:func:`relsat.onnx.shapefold.fold`; other markers when a static size turns out divisible by
one), and the folded model imported at the first markers (:class:`~relsat.onnx.importer.
Importer`, which folds nothing that reads a dim any further).

Exporters do not always give equal dims one name: torch's dynamo exporter names the batch of
``input_ids`` ``s21`` and that of ``attention_mask`` ``s35``; a model with a dynamic input and a
dynamic bias ties the bias's length to the input's last dim. Dims with the same pricing value
are made one dim when the model itself requires it: onnxruntime runs the original with them
equal and fails with one of them apart (a fact about the model, not an assumption of relsat's).
Dims a model does not tie stay apart; one it caps by another (it fails moved up alone, the other
does not: a GatherND reads the first rows of the mask) gets the smaller marker, so that the model
runs at its markers, where the rules read its shapes.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import onnx

from relsat.graph.graph import Graph
from relsat.onnx.data import read_array
from relsat.onnx.dimexpr import SUM_CONSTANT, Poly, Sum, linear
from relsat.onnx.dimplan import plan, remarked
from relsat.onnx.errors import DynamicShapeError, OnnxError, SymbolicDimError
from relsat.onnx.importer import Importer, read_model, skeleton
from relsat.onnx.opened import (
    MAX_OPENED,
    Found,
    RunShapes,
    declared_dims,
    opened_output,
    with_opened,
)
from relsat.onnx.shapefold import FOLD_LIMIT, MarkerClash, fold
from relsat.onnx.symbolic import Dims

__all__ = ["MARKER_TRIES", "bound_dims", "load_symbolic", "summed_dims", "tied_dims"]

#: Marker sets tried before giving up on keeping the dims symbolic.
MARKER_TRIES = 4


def load_symbolic(
    path_or_model: Any,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    batch: int | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    static: bool = False,
) -> tuple[Graph, Dims | None]:
    """See :func:`relsat.onnx.load_symbolic`."""
    model, path = read_model(path_or_model)
    dims = plan(model, input_shapes, batch, path=path)
    if dims is not None and static:  # the inputs fixed at the pricing shape
        input_shapes, batch, dims = dims.shapes(), None, None
    if dims is None:
        importer = Importer(model, path, input_shapes or {}, batch)
        try:
            return importer.run(), None
        except DynamicShapeError as error:  # an output's dims computed from values
            layout = {
                vi.name: tuple(int(d.dim_value) for d in vi.type.tensor_type.shape.dim)
                for vi in importer.inputs
            }
            fixed_inputs = Dims((), layout)
            at = RunShapes(path_or_model, inputs)
            return _import(model, path, fixed_inputs, lambda avoid: fixed_inputs, at, error)
    tied, capped = tied_dims(path_or_model, dims)
    same: dict[str, str | Poly] = {**tied}
    same |= summed_dims(path_or_model, dims, same)
    if same or capped:
        dims = plan(model, input_shapes, batch, path=path, same=same, capped=capped)
        assert dims is not None
    fixed = bound_dims(path_or_model, dims)
    if fixed:
        held = plan(model, input_shapes, batch, path=path, same=same, fixed=fixed, capped=capped)
        if held is None:
            described = "; ".join(f"{dims.where(n)} = {v}" for n, v in fixed.items())
            raise SymbolicDimError(
                f"the model runs at no other value of its dynamic dims: {described}",
                dims=tuple(fixed),
                path=path,
            )
        dims = held
    return _import(
        model,
        path,
        dims,
        lambda avoid: plan(
            model,
            input_shapes,
            batch,
            avoid=avoid,
            path=path,
            same=same,
            fixed=fixed,
            capped=capped,
        ),
        RunShapes(path_or_model, inputs),
    )


def _import(
    model: onnx.ModelProto,
    path: str | None,
    dims: Dims,
    replan: Any,
    source: RunShapes,
    error: DynamicShapeError | None = None,
) -> tuple[Graph, Dims]:
    """The import at ``dims``; each output whose dims an operator computes from values (a
    :class:`DynamicShapeError`, the first one ``error`` when given) opened and the import run
    again, up to :data:`~relsat.onnx.opened.MAX_OPENED` of them."""
    found: list[Found] = []
    declared = declared_dims(model)
    base, at = dims, dims  # at: the dims the error's shapes are at
    first = error
    for _ in range(MAX_OPENED + 1):
        if error is not None:
            one = opened_output(source, at, error, declared)
            if one is None or len(found) == MAX_OPENED:
                raise _unopened(error, at, path)
            found.append(one)
            dims = with_opened(base, found, model)
        try:
            return _import_at(
                model, path, dims, lambda avoid: with_opened(replan(avoid), found, model, avoid)
            )
        except _Open as stop:
            error, at = stop.error, stop.dims
            first = first or error
        except OnnxError as exc:
            if not found or first is None or not _about_opened(exc, dims):
                raise  # a refusal of its own (a subgraph further on): that one is said
            # an opened dim the model ties to a number or another dim (a MatMul's inner dim
            # after a Reduce over axes given as an input): not kept symbolic, said as before
            raise _unopened(first, base, path) from None
    raise AssertionError("unreachable: the loop returns or raises")


class _Open(Exception):
    """An import stopped at an output whose dims an operator computes from values: the
    importer's ``error`` and the ``dims`` (markers) it imported at."""

    def __init__(self, error: DynamicShapeError, dims: Dims) -> None:
        super().__init__(error.reason)
        self.error, self.dims = error, dims


def _about_opened(error: OnnxError, dims: Dims) -> bool:
    """Does ``error`` name a size made of an opened dim's marker (``cannot reshape 24 elements
    to [61, 59]``)?"""
    opened = dims.opened_names()
    for number in re.findall(r"\d+", error.reason):
        f = dims.factor(int(number))
        if f is not None and any(n in opened for n, _ in f[1]):
            return True
    return False


def _unopened(error: DynamicShapeError, dims: Dims, path: str | None) -> OnnxError:
    """The error for an output that could not be opened: itself at fixed input shapes, else a
    :class:`SymbolicDimError` (the run then tries fixed shapes)."""
    free = [d.name for d in dims.dims if d.name not in dims.opened_names()]
    if not free:
        return error
    return SymbolicDimError(
        f"{error.reason} (with dims {', '.join(free)} symbolic)",
        dims=tuple(free),
        path=path,
        node=error.node,
        op_type=error.op_type,
    )


def _import_at(
    model: onnx.ModelProto, path: str | None, dims: Dims, replan: Any
) -> tuple[Graph, Dims]:
    data_dir = os.path.dirname(os.path.abspath(path)) if path else None
    tensors = {t.name: t for t in model.graph.initializer}
    cache: dict[str, np.ndarray | None] = {}

    def const(name: str) -> np.ndarray | None:
        if name not in cache:
            t = tensors.get(name)
            small = t is not None and math.prod(t.dims) <= FOLD_LIMIT
            cache[name] = read_array(t, data_dir, path) if small else None  # type: ignore[arg-type]
        return cache[name]

    avoid: set[int] = set()
    found: tuple[Sum, ...] = ()  # sums the model's operators make of its dims (shapefold)
    for _ in range(MARKER_TRIES):
        other = remarked(dims, avoid, model, taken=[d.marker for d in dims.dims])
        try:
            folded = fold(model, dims, other, skeleton=skeleton, const=const)
            break
        except MarkerClash as clash:
            avoid.add(clash.marker)
            dims = replan(avoid)
            known = {s.name for s in found}
            found += tuple(s for s in clash.sums if s.divisor > 1 and s.name not in known)
            if found:  # markers at which they read back, chosen before folding again
                dims = remarked(replace(dims, sums=(*dims.sums, *found)), avoid, model)
    else:
        raise SymbolicDimError(
            "static sizes of the model are divisible by every prime tried for its dynamic dims "
            f"({', '.join(dims.names)})",
            dims=dims.names,
            path=path,
        )
    dims = folded.dims
    try:
        graph = Importer(folded.model, path, {}, None, symbolic=folded.symbolic, dims=dims).run()
    except DynamicShapeError as exc:
        raise _Open(exc, dims) from None
    for n in graph.weights:  # a constant whose size follows a dim cannot be written back
        if any(dims.is_symbolic(d) for d in n.shape):
            spelled = "x".join(dims.spell(d) for d in n.shape)
            raise SymbolicDimError(
                f"a constant of shape {spelled} is computed from the input's dims",
                dims=dims.names,
                path=path,
                tensor=n.name,
            )
    return graph, dims


def tied_dims(model: Any, dims: Dims) -> tuple[dict[str, str], set[str]]:
    """Dim name → the name of the dim it must equal, for dims with one pricing value that the
    model ties (see the module docstring), at one position of several inputs (two inputs'
    batch) or at different ones (a bias's length and the last dim of the tensor it is added
    to, the inner dims of a MatMul of two inputs); and the dims *capped*: bound, tied to none,
    so the model runs with them at most another of their pricing value (dynamo's batch of
    ``input_ids`` beside that of ``attention_mask``, whose first rows a GatherND reads): their
    markers are the smaller (:attr:`~relsat.onnx.symbolic.Dim.capped`), so that the model runs
    at the markers.

    onnxruntime runs the original with the dims of one pricing value together at ``v``; a dim
    that makes it fail when moved alone to ``v + 1`` (and to ``v - 1`` where that is not 1,
    which broadcasts: a dim that need only be at most another's is not tied) is bound to the
    others; two bound dims that run when moved together are one dim; bound dims no pair frees
    are one dim when all of them moved together run. Dims a model does not tie stay apart."""
    from relsat.onnx.verification import runs_at

    groups: dict[int, list[str]] = {}
    for d in dims.dims:
        groups.setdefault(d.value, []).append(d.name)
    same: dict[str, str] = {}
    capped: set[str] = set()
    for value, names in groups.items():
        if len(names) < 2:
            continue
        v = max(value, 1) + 1
        together = {n: v for n in names}
        moves = [{n: v + 1} for n in names] + ([{n: v - 1} for n in names] if v > 2 else [])
        try:
            ran = runs_at(model, [dims.shapes(together | m) for m in [{}, *moves]])
        except OnnxError:
            continue
        if not ran[0]:
            continue
        alone = ran[1:]
        bound = [
            n for i, n in enumerate(names) if not alone[i] and (v <= 2 or not alone[len(names) + i])
        ]
        tied = _classes(model, dims, together, bound, v + 1)
        same.update(tied)
        if len(bound) < len(names):  # a dim of the group free to grow alone
            capped.update(n for n in bound if n not in tied and n not in tied.values())
    return same, capped


def summed_dims(model: Any, dims: Dims, same: Mapping[str, Any]) -> dict[str, Poly]:
    """Dim name → the sum of other dims it is (a legacy export's ``total`` beside ``past``
    and ``sequence``: the attention mask spans the cache and the new tokens), for a dim whose
    pricing value is the sum of two others' (or of another's and a constant up to
    :data:`SUM_CONSTANT`) that the model ties so: onnxruntime runs the original at the pricing
    shape, fails with the dim moved alone by one, and runs with it moved together with each
    part of the sum in turn (judged as :func:`tied_dims`)."""
    from relsat.onnx.verification import runs_at

    value = {n: v for n, v in dims.pricing().items() if n not in same}
    guesses: list[tuple[str, Poly]] = []
    for t, vt in value.items():
        parts = [n for n in value if n != t]
        pairs = [(a, b) for i, a in enumerate(parts) for b in parts[i + 1 :]]
        guesses += [(t, linear((a, b), 0)) for a, b in pairs if value[a] + value[b] == vt]
        guesses += [
            (t, linear((a,), vt - value[a])) for a in parts if 0 < vt - value[a] <= SUM_CONSTANT
        ]
    if not guesses:
        return {}
    tries: list[dict[str, int]] = [{}]
    for t, poly in guesses:
        tries.append({t: value[t] + 1})
        tries += [{t: value[t] + 1, mono[0]: value[mono[0]] + 1} for mono, _ in poly if mono]
    try:
        ran = iter(runs_at(model, [dims.shapes(x) for x in tries]))
    except OnnxError:
        return {}
    if not next(ran):
        return {}
    out: dict[str, Poly] = {}
    for t, poly in guesses:
        alone = next(ran)
        together = [next(ran) for mono, _ in poly if mono]
        made_of = {n for mono, _ in poly for n in mono}
        if not alone and all(together) and t not in out and not made_of & set(out):
            out[t] = poly
    return out


def _classes(
    model: Any, dims: Dims, together: dict[str, int], bound: list[str], moved: int
) -> dict[str, str]:
    """The bound dims made one: pairs that run moved together to ``moved``, then the rest if
    all of them moved together run."""
    from relsat.onnx.verification import runs_at

    if len(bound) < 2:
        return {}
    pairs = [(a, b) for i, a in enumerate(bound) for b in bound[i + 1 :]]
    try:
        ran = runs_at(model, [dims.shapes(together | {a: moved, b: moved}) for a, b in pairs])
    except OnnxError:
        return {}
    same: dict[str, str] = {}
    for (a, b), ok in zip(pairs, ran, strict=True):
        if ok and a not in same and b not in same:
            same[b] = a
    rest = [n for n in bound if n not in same and n not in same.values()]
    if len(rest) > 2:
        try:
            (ok,) = runs_at(model, [dims.shapes(together | dict.fromkeys(rest, moved))])
        except OnnxError:
            ok = False
        if ok:
            same.update((n, rest[0]) for n in rest[1:])
    return same


def bound_dims(model: Any, dims: Dims) -> dict[str, int]:
    """Dim name → its pricing value, for the dims the model itself fixes: onnxruntime runs the
    original at the pricing shape, and with that dim at one more, two more, twice, or one less
    (where that is not 1, which broadcasts) it fails every time — moved alone, moved with the
    dims of the same pricing value, and moved with every dim moved alike (a dim that must be
    even, at most a table's length, or equal to another dim runs in one of these). Such a dim
    is static in the e-graph and written static. Judged on random inputs valid per input
    (:func:`relsat.onnx.verification.runs_at`)."""
    from relsat.onnx.verification import runs_at

    def moved(v: int) -> list[int]:
        return [v + 1, v + 2, 2 * v] + ([v - 1] if v > 2 else [])

    kinds = range(4)  # the moves by position: +1, +2, x2, -1
    groups: dict[int, list[str]] = {}
    for d in dims.dims:
        groups.setdefault(d.value, []).append(d.name)
    tries: list[dict[str, int]] = [{}]
    for k in kinds:  # every dim moved alike
        tries.append({d.name: moved(d.value)[k] for d in dims.dims if k < len(moved(d.value))})
    for value, names in groups.items():
        for v in moved(value):
            tries.append(dict.fromkeys(names, v))  # a pricing value's dims together
            if len(names) > 1:
                tries += [{n: v} for n in names]  # each alone
    try:
        ran = runs_at(model, [dims.shapes(t) for t in tries])
    except OnnxError:
        return {}
    if not ran[0]:
        return {}
    pricing = dims.pricing()
    free = {n for t, ok in zip(tries[1:], ran[1:], strict=True) if ok for n in t}
    return {n: pricing[n] for n in dims.names if n not in free}
