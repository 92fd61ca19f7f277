"""Stage ``load``: what :func:`relsat.optimize` was given, as a :class:`~relsat.pipeline.run.Run`.

A :class:`~relsat.graph.graph.Graph` is taken as it is; an ONNX model (a path or an
``onnx.ModelProto``) is imported and kept as the run's :class:`~relsat.pipeline.run.Source`, for
the ONNX stages at the end (export with its interface, onnxruntime checks, timing, writing the
original back unchanged).

An ONNX model with dynamic dims is imported with them symbolic
(:func:`relsat.onnx.load_symbolic`): the run's :class:`~relsat.pipeline.run.Shapes` holds the
dims and the pricing shape (``Options.input_shapes`` and ``batch``, else batch 1 and 128 for
any other dim; where the model does not run at those defaults, one defaulted dim one more or
one less, said in the note: a legacy decode step runs only with its mask one longer than its
cache). With ``Options.static``, or when a dim cannot stay symbolic (the reason goes in
:attr:`Shapes.note`), the model is imported at the pricing shape instead (and then, without
``static``, the input is handed back: :func:`relsat.pipeline.ort.choose`). ``Options.inputs``
are checked against the model's inputs here and cast to their types.

A model too large to verify and time on this machine is refused here, before any work
(:class:`~relsat.onnx.TooLargeError`, naming the memory it would need).
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from relsat.errors import SettingsError
from relsat.graph.graph import Graph
from relsat.pipeline.options import Options
from relsat.pipeline.run import OnPhase, Run, Shapes, Source

__all__ = ["available_memory", "load", "memory_needed"]

GIB = 1 << 30


def load(model: Any, options: Options, on_phase: OnPhase | None = None) -> Run:
    """The run of ``model`` (a Graph, an ONNX path or an ``onnx.ModelProto``) with ``options``;
    anything else raises :class:`~relsat.errors.SettingsError` naming ``model``."""
    if isinstance(model, Graph):
        _check_memory(model, None, options, onnx=False)
        return Run(options, model, on_phase=on_phase)
    if not isinstance(model, str | os.PathLike) and not _is_proto(model):
        raise SettingsError(
            "model", model, "a relsat.Graph, a path to an ONNX file or an onnx.ModelProto"
        )
    if options.inputs:  # checked against the model, cast to its inputs' types
        proto = model if _is_proto(model) else _inputs_only(model)
        if proto is not None:
            options = replace(options, inputs=_samples(proto, options.inputs))
    graph, shapes = _import(model, options)
    if _is_proto(model):
        source = Source(model, model.SerializeToString())
    else:
        path = Path(model)
        source = Source(os.fspath(model), path.read_bytes(), path)
    _check_memory(graph, shapes, options, onnx=True)
    return Run(options, graph, source=source, shapes=shapes, on_phase=on_phase)


def _import(model: Any, options: Options) -> tuple[Graph, Shapes | None]:
    """The graph of an ONNX ``model`` and what became of its dynamic dims (None: it has none)."""
    from relsat import onnx as ronnx
    from relsat.onnx.dimplan import plan

    given, batch = options.input_shapes, options.batch
    proto = model if _is_proto(model) else _inputs_only(model)
    path = None if _is_proto(model) else os.fspath(model)
    samples = options.inputs
    if given is None and samples:  # the samples' shapes price a model with dynamic dims
        given = {name: tuple(v.shape) for name, v in samples.items()}
    dims = plan(proto, given, batch, path=path) if proto is not None else None
    if dims is None:  # static inputs (or an unreadable file: load says why)
        if options.timing_shapes:
            raise SettingsError("timing_shapes", options.timing_shapes, "() for static inputs")
        graph, opened = _fixed(model, given, batch, samples)
        if opened is None:
            return graph, None
        return graph, Shapes(opened, opened.shapes(), True, _opened_note(opened))
    unknown = sorted({k for one in options.timing_shapes for k in one} - set(dims.names))
    if unknown:
        raise SettingsError(
            "timing_shapes", options.timing_shapes, f"dims of this model ({', '.join(dims.names)})"
        )
    source = proto if proto is not None else model
    moved = ""
    try:
        _check_runs(source, dims, path, samples)
    except ronnx.PricingShapeError:
        if not _runs_empty(proto, dims, path, samples):
            near = _runnable_neighbour(source, dims, given, batch, path)
            if near is None:
                raise
            given, dims, moved = near
    pricing = dims.shapes()
    if options.static:
        note = f"fixed at {dims.describe()} (static){moved}"
    else:
        try:
            graph, marked = ronnx.load_symbolic(
                model, input_shapes=given, batch=batch, inputs=samples
            )
        except ronnx.OnnxError as exc:  # a dim relsat cannot keep symbolic, or a marker out
            # of a bound the model puts on its dim: never worse than fixed shapes
            why = str(exc).removeprefix(f"{exc.path}: ") if exc.path else str(exc)
            if not isinstance(exc, ronnx.SymbolicDimError):
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
    from relsat import onnx as ronnx

    try:
        return ronnx.load(model, input_shapes=shapes, batch=batch), None
    except ronnx.DynamicShapeError:
        graph, opened = ronnx.load_symbolic(
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
    from relsat.onnx.errors import PricingShapeError
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
    from relsat.onnx.errors import OnnxError
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


def memory_needed(graph: Graph, value: Any = None, *, numpy: bool, onnx: bool) -> int:
    """An estimate of the bytes verifying and timing ``graph`` takes, its dims mapped by
    ``value`` (an int → int function: markers to pricing values; None: as they are). NumPy
    verification (``numpy``) holds both graphs' inputs and weights as float64 and a few
    intermediate tensors; onnxruntime (``onnx``: the check and the timing) holds three
    sessions' weights and inputs as float32, and their largest tensors."""
    size = (lambda d: d) if value is None else value
    leaves = largest = 0
    for n in graph.nodes:
        for t in n.outputs:
            elements = math.prod(size(d) for d in t.shape)
            largest = max(largest, elements)
            if n.op in ("input", "weight"):
                leaves += elements
    need_numpy = 8 * (2 * leaves + 4 * largest) if numpy else 0
    need_ort = 4 * (3 * leaves + 3 * largest) if onnx else 0
    return max(need_numpy, need_ort)


def available_memory() -> int:
    """Bytes this process can still allocate: the system's available memory, or the cgroup's
    limit less its use when that is lower."""
    available = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except OSError:
        pass
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return 1 << 62  # unknown: do not refuse
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        if limit != "max":
            available = min(available, int(limit) - used)
    except (OSError, ValueError):
        pass
    return available


def _check_memory(graph: Graph, shapes: Shapes | None, options: Options, *, onnx: bool) -> None:
    """Refuse, before any work, a model whose verification and timing would not fit in memory."""
    numpy = options.verify
    timed = onnx and (options.verify or options.timing is not None)
    if not numpy and not timed:
        return
    dims = shapes.dims if shapes is not None else None
    value = dims.value if dims is not None else None
    need = memory_needed(graph, value, numpy=numpy, onnx=timed)
    have = available_memory()
    if need <= have:
        return
    from relsat.onnx import TooLargeError

    size = (lambda d: d) if value is None else value
    big = max(graph.inputs, key=lambda n: math.prod(size(d) for d in n.shape), default=None)
    what = ""
    if big is not None:
        dims_text = "x".join(str(size(d)) for d in big.shape)
        gib = 4 * math.prod(size(d) for d in big.shape) / GIB
        what = f"input {big.name!r} is {dims_text} ({gib:.1f} GiB as float32); "
    raise TooLargeError(
        f"{what}verifying and timing the model needs about {need / GIB:.1f} GiB, "
        f"{have / GIB:.1f} GiB are available: refused before optimizing (a smaller shape, "
        "input_shapes / --input-shape, would fit)",
        needed=need,
        available=have,
        tensor=big.name if big is not None else None,
    )


def _is_proto(model: object) -> bool:
    """Is ``model`` an ``onnx.ModelProto`` (without importing onnx for a Graph)?"""
    if type(model).__name__ != "ModelProto":
        return False
    import onnx

    return isinstance(model, onnx.ModelProto)
