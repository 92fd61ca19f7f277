"""Stage ``load``: what :func:`relsat.optimize` was given, as a :class:`~relsat.pipeline.run.Run`.

A :class:`~relsat.graph.graph.Graph` is taken as it is; an ONNX model (a path or an
``onnx.ModelProto``) is read by :func:`relsat.onnx.read` — the ONNX package's one entry point,
which plans the dynamic dims, probes the pricing shape in onnxruntime and falls back to fixed
shapes where a dim cannot stay symbolic — with the options it takes (``input_shapes``,
``batch``, ``inputs``, ``static``, ``timing_shapes``), and kept as the run's
:class:`~relsat.pipeline.run.Source` and :class:`~relsat.pipeline.run.Shapes`, for the ONNX
stages at the end (export with its interface, onnxruntime checks, timing, writing the original
back unchanged). ``Options.inputs`` are replaced by the ones checked against the model and cast
to its inputs' types.

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
from relsat.onnx.loading import is_model, read
from relsat.pipeline.options import Options
from relsat.pipeline.run import OnPhase, Run, Shapes

__all__ = ["available_memory", "load", "memory_needed"]

GIB = 1 << 30


def load(model: Any, options: Options, on_phase: OnPhase | None = None) -> Run:
    """The run of ``model`` (a Graph, an ONNX path or an ``onnx.ModelProto``) with ``options``;
    anything else raises :class:`~relsat.errors.SettingsError` naming ``model``."""
    if isinstance(model, Graph):
        _check_memory(model, None, options, onnx=False)
        return Run(options, model, on_phase=on_phase)
    if not isinstance(model, str | os.PathLike) and not is_model(model):
        raise SettingsError(
            "model", model, "a relsat.Graph, a path to an ONNX file or an onnx.ModelProto"
        )
    o = options
    loaded = read(
        model,
        input_shapes=o.input_shapes,
        batch=o.batch,
        inputs=o.inputs,
        static=o.static,
        timing_shapes=o.timing_shapes,
    )
    if o.inputs:
        options = replace(o, inputs=loaded.inputs)
    _check_memory(loaded.graph, loaded.shapes, options, onnx=True)
    return Run(options, loaded.graph, source=loaded.source, shapes=loaded.shapes, on_phase=on_phase)


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
