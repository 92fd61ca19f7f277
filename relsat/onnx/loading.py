"""Reading an ONNX model for optimizing: :func:`read`, the one entry point
:func:`relsat.optimize` reads an ONNX model through, and what it gives back (:class:`Loaded`:
the graph, the :class:`Source` written back when the original is kept, what became of the
dynamic dims as :class:`Shapes`, and the sample inputs checked against the model).

An ONNX model with dynamic dims is imported with them symbolic
(:func:`relsat.onnx.load_symbolic`), the dims planned by :mod:`relsat.onnx.dimplan` at the pricing
shape (``input_shapes`` and ``batch``, else the samples' shapes, else batch 1 and 128 for any
other dim; where the model does not run at those defaults — probed in onnxruntime — one
defaulted dim one more or one less, said in the note: a legacy decode step runs only with its
mask one longer than its cache). With ``static``, or when a dim cannot stay symbolic (the reason
goes in :attr:`Shapes.note`), the model is imported at the pricing shape instead
(:func:`relsat.onnx.load`; an output whose dims an operator computes from values keeps those
symbolic: :mod:`relsat.onnx.opened`). ``inputs`` are checked against the model's inputs and cast
to their types.

The arguments are named as :class:`relsat.Options`' fields, and a bad one raises
:class:`~relsat.errors.SettingsError` naming that field.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relsat.errors import SettingsError
from relsat.graph.graph import Graph
from relsat.onnx.errors import OnnxError, PricingShapeError, SymbolicDimError

if TYPE_CHECKING:
    from relsat.onnx.symbolic import Dims

__all__ = ["Loaded", "Shapes", "Source", "is_model", "read"]


@dataclass(frozen=True)
class Source:
    """An ONNX input: ``given`` as the caller gave it (a path or an ``onnx.ModelProto``, which
    onnxruntime reads with its external data), ``data`` its serialized bytes (what is written
    back, byte for byte, when the original is kept) and ``path`` its file, if any."""

    given: Any
    data: bytes = field(repr=False)
    path: Path | None = None

    def proto(self) -> Any:
        """The input as an ``onnx.ModelProto`` (external data left as references)."""
        import onnx

        return onnx.load_from_string(self.data)


@dataclass(frozen=True)
class Shapes:
    """What became of an ONNX input's dynamic dims. ``dims``: the dims the e-graph holds as
    markers (None: imported at fixed shapes); ``pricing``: each input's shape at the pricing
    values, what prices, NumPy verification and timing use; ``symbolic``: the written model
    keeps the dims symbolic; ``note``: one line, in words (the dims kept, or why they were
    fixed)."""

    dims: Dims | None
    pricing: dict[str, tuple[int, ...]]
    symbolic: bool
    note: str

    @property
    def opened(self) -> bool:
        """Does the run hold dims an operator computes from values (``Dims.opened``)?"""
        return self.dims is not None and bool(self.dims.opened)

    def describe_pricing(self) -> str:
        """``input_ids=[1, 128], attention_mask=[1, 128]``."""
        return ", ".join(f"{k}={list(v)}" for k, v in self.pricing.items())


@dataclass(frozen=True)
class Loaded:
    """An ONNX model read for optimizing: its ``graph``, its ``source``, what became of its
    dynamic dims (``shapes``; None: it has none) and the sample ``inputs`` cast to the model's
    input types (None when none were given)."""

    graph: Graph
    source: Source
    shapes: Shapes | None
    inputs: Mapping[str, Any] | None


def read(
    model: Any,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    batch: int | None = None,
    inputs: Mapping[str, Any] | None = None,
    static: bool = False,
    timing_shapes: Sequence[Mapping[str, int]] = (),
) -> Loaded:
    """Read the ONNX ``model`` (a path or an ``onnx.ModelProto``) for optimizing (see the module
    docstring): ``input_shapes`` and ``batch`` give the pricing shape, ``inputs`` sample values
    (their shapes price the model where ``input_shapes`` is None), ``static`` fixes the dims at
    the pricing shape, ``timing_shapes`` are checked to name the model's dims."""
    samples = inputs
    if inputs:  # checked against the model, cast to its inputs' types
        proto = model if is_model(model) else _inputs_only(model)
        samples = _samples(proto, inputs) if proto is not None else inputs
    graph, shapes = _import(model, input_shapes, batch, samples, static, timing_shapes)
    if is_model(model):
        source = Source(model, model.SerializeToString())
    else:
        path = Path(model)
        source = Source(os.fspath(model), path.read_bytes(), path)
    return Loaded(graph, source, shapes, samples)


def _import(
    model: Any,
    given: Mapping[str, Sequence[int]] | None,
    batch: int | None,
    samples: Mapping[str, Any] | None,
    static: bool,
    timing_shapes: Sequence[Mapping[str, int]],
) -> tuple[Graph, Shapes | None]:
    """The graph of an ONNX ``model`` and what became of its dynamic dims (None: it has none)."""
    from relsat.onnx.dimplan import plan
    from relsat.onnx.marked import load_symbolic

    proto = model if is_model(model) else _inputs_only(model)
    path = None if is_model(model) else os.fspath(model)
    if given is None and samples:  # the samples' shapes price a model with dynamic dims
        given = {name: tuple(v.shape) for name, v in samples.items()}
    dims = plan(proto, given, batch, path=path) if proto is not None else None
    if dims is None:  # static inputs (or an unreadable file: load says why)
        if timing_shapes:
            raise SettingsError("timing_shapes", timing_shapes, "() for static inputs")
        graph, opened = _fixed(model, given, batch, samples)
        if opened is None:
            return graph, None
        return graph, Shapes(opened, opened.shapes(), True, _opened_note(opened))
    unknown = sorted({k for one in timing_shapes for k in one} - set(dims.names))
    if unknown:
        raise SettingsError(
            "timing_shapes", timing_shapes, f"dims of this model ({', '.join(dims.names)})"
        )
    source = proto if proto is not None else model
    moved = ""
    try:
        _check_runs(source, dims, path, samples)
    except PricingShapeError:
        if not _runs_empty(proto, dims, path, samples):
            near = _runnable_neighbour(source, dims, given, batch, path)
            if near is None:
                raise
            given, dims, moved = near
    pricing = dims.shapes()
    if static:
        note = f"fixed at {dims.describe()} (static){moved}"
    else:
        try:
            graph, marked = load_symbolic(model, input_shapes=given, batch=batch, inputs=samples)
        except OnnxError as exc:  # a dim relsat cannot keep symbolic, or a marker out
            # of a bound the model puts on its dim: never worse than fixed shapes
            why = str(exc).removeprefix(f"{exc.path}: ") if exc.path else str(exc)
            if not isinstance(exc, SymbolicDimError):
                markers = ", ".join(f"{d.name}={d.marker}" for d in dims.dims)
                ones = [dims.where(d.name) for d in dims.dims if d.value == 1]
                guess = "out of a bound of the model"
                if ones:  # a 1 that broadcasts is not a 1 at a marker
                    guess += f", or a dim of 1 it broadcasts: {', '.join(ones)}"
                why += f" (with the dims at markers {markers}: {guess}?)"
            note = f"fixed at {dims.describe()}{moved}: {why}"
        else:
            assert marked is not None
            free = [n for n in marked.names if n not in marked.opened_names()]
            note = f"{', '.join(free)} kept symbolic; priced at {marked.describe()}{moved}"
            if marked.sums:  # the dims spelled or found as sums of these
                names = [s.name for s in marked.sums]
                more = f" and {len(names) - 2} more" if len(names) > 4 else ""
                note += f"; {', '.join(names[:2] if more else names)}{more} with them"
            if marked.fixed:  # said, never silent: the model runs at no other value of these
                held = "; ".join(f"{where} = {v}" for _, v, where in marked.fixed)
                note += f"; fixed by the model (it runs at no other value), written static: {held}"
            if marked.opened:
                note += f"; {_opened_note(marked)}"
            return graph, Shapes(marked, pricing, True, note)
    graph, opened = _fixed(model, pricing, None, samples)
    if opened is None:
        return graph, Shapes(None, pricing, False, note)
    return graph, Shapes(opened, pricing, True, f"{note}; {_opened_note(opened)}")


def _fixed(model: Any, shapes: Any, batch: int | None, samples: Any) -> tuple[Graph, Any]:
    """The graph with the inputs at ``shapes`` (and ``batch``), and the dims operators compute
    from values, when an output has any (:mod:`relsat.onnx.opened`; else None)."""
    from relsat.onnx.errors import DynamicShapeError
    from relsat.onnx.importer import load_model
    from relsat.onnx.marked import load_symbolic

    try:
        return load_model(model, input_shapes=shapes, batch=batch), None
    except DynamicShapeError:
        graph, opened = load_symbolic(
            model, input_shapes=shapes, batch=batch, inputs=samples, static=True
        )
        assert opened is not None
        return graph, opened


def _opened_note(dims: Any) -> str:
    """The dims operators compute from values, in words: ``dims computed from values kept
    symbolic, priced as onnxruntime computes them: y_dim0 (of NonZero 'y') = 7``."""
    parts = [
        f"{d} (of {o.op} {o.tensor!r}) = {dims.dim(d).value}"
        for o in dims.opened
        for d in o.layout
        if isinstance(d, str) and dims.dim(d).axes[0][0] == o.tensor
    ]
    more = f" and {len(parts) - 3} more" if len(parts) > 3 else ""
    return (
        f"dims computed from values kept symbolic, priced as onnxruntime computes them: "
        f"{', '.join(parts[:3])}{more}"
    )


def _check_runs(model: Any, dims: Any, path: str | None, samples: Any = None) -> None:
    """Refuse, before any work, a pricing shape the model itself does not run at (onnxruntime
    fails on the original there, on drawn inputs and the ``samples`` that fit: a dim beyond a
    bound the model puts on it), naming the dims, where they occur and what onnxruntime said."""
    from relsat.onnx.verification import failure_at

    failure = failure_at(model if path is None else path, dims.shapes(), samples)
    if failure is None:
        return
    where = "; ".join(f"{dims.where(d.name)} = {d.value}" for d in dims.dims)
    raise PricingShapeError(
        f"the model does not run at its pricing shape ({where}): {failure}; choose a shape "
        "within the model's bounds with --input-shape (Options.input_shapes), or give values "
        "relsat cannot draw with --inputs (Options.inputs)",
        dims=dims.names,
        path=path,
    )


def _runs_empty(proto: Any, dims: Any, path: str | None, samples: Any) -> bool:
    """Does the model declare dims of length 0 (an empty ``axes`` input), which relsat prices
    as dynamic dims, and run with them at 0? Then the pricing shape fails only for those: the
    model is not refused (relsat prices no empty tensor; its checks run where it runs)."""
    from relsat.onnx.opened import empty_at_zero
    from relsat.onnx.verification import failure_at

    shapes = empty_at_zero(dims, proto)
    if shapes is None:
        return False
    return failure_at(proto if path is None else path, shapes, samples) is None


def _runnable_neighbour(
    model: Any, dims: Any, given: Any, batch: int | None, path: str | None
) -> tuple[dict[str, tuple[int, ...]], Any, str] | None:
    """Where the default pricing shape does not run, the nearest that does: one defaulted dim
    one more or one less (a legacy decode step names its mask's length on its own, and runs only
    where it is the cache's plus one), as ``(input shapes, dims, what moved)``; None when no
    such shape runs, or every dim was given."""
    from relsat.onnx.dimplan import PRICING_OTHER, plan
    from relsat.onnx.verification import failure_at

    chosen = {a for name in given or {} for a in dims.inputs.get(name, ()) if isinstance(a, str)}
    defaulted = [d for d in dims.dims if d.name not in chosen and d.value == PRICING_OTHER]
    for d in defaulted:
        for value in (d.value + 1, d.value - 1):
            shapes = dims.shapes({d.name: value})
            try:
                near = plan(model, shapes, batch, path=path)
            except OnnxError:  # a shape the model's own dims refuse
                continue
            if near is None or failure_at(model if path is None else path, near.shapes()):
                continue
            moved = f" ({d.name} {value}: the model does not run at the default {d.value})"
            return shapes, near, moved
    return None


def _samples(model: Any, inputs: Any) -> dict[str, Any] | None:
    """``Options.inputs`` checked against ``model``'s inputs — a known name, its rank, its
    static dims, an element type it can be cast to without changing kind — and cast to the
    input's type; :class:`SettingsError` naming the input otherwise."""
    if not inputs:
        return None
    import numpy as np
    from onnx import helper

    inits = {t.name for t in model.graph.initializer}
    declared = {vi.name: vi for vi in model.graph.input if vi.name not in inits}
    out = {}
    for name, value in inputs.items():
        vi = declared.get(name)
        if vi is None:
            raise SettingsError(
                "inputs", name, f"names of the model's inputs ({', '.join(declared)})"
            )
        tt = vi.type.tensor_type
        dims = [
            d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in tt.shape.dim
        ]
        fits = value.ndim == len(dims) and all(
            not isinstance(d, int) or d == n for d, n in zip(dims, value.shape, strict=True)
        )
        if not fits:
            raise SettingsError(
                "inputs", f"{name}: {list(value.shape)}", f"an array of the input's shape {dims}"
            )
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        if value.dtype != dtype:
            strings = dtype.kind == "O" and value.dtype.kind in "US"  # onnxruntime's strings
            if (
                value.dtype.kind != dtype.kind
                and not strings
                and not (value.dtype.kind in "iu" and dtype.kind in "iu")
            ):
                raise SettingsError(
                    "inputs", f"{name}: {value.dtype}", f"values of the input's type ({dtype})"
                )
            value = value.astype(dtype)
        out[name] = value
    return out


def _inputs_only(path: Any) -> Any:
    """The model at ``path`` read without its external data, or None when it cannot be read
    (the importer then says why)."""
    import onnx

    try:
        return onnx.load(os.fspath(path), load_external_data=False)
    except Exception:
        return None


def is_model(model: object) -> bool:
    """Is ``model`` an ``onnx.ModelProto`` (without importing onnx for a Graph)?"""
    if type(model).__name__ != "ModelProto":
        return False
    import onnx

    return isinstance(model, onnx.ModelProto)
