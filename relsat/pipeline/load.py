"""Stage ``load``: what :func:`relsat.optimize` was given, as a :class:`~relsat.pipeline.run.Run`.

A :class:`~relsat.graph.graph.Graph` is taken as it is; an ONNX model (a path or an
``onnx.ModelProto``) is imported with :func:`relsat.onnx.load` (``Options.input_shapes`` and
``batch`` fix its dynamic dims) and kept as the run's :class:`~relsat.pipeline.run.Source`, for
the ONNX stages at the end (export with its interface, onnxruntime checks, timing, writing the
original back unchanged).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from relsat.errors import SettingsError
from relsat.graph.graph import Graph
from relsat.pipeline.options import Options
from relsat.pipeline.run import OnPhase, Run, Source

__all__ = ["load"]


def load(model: Any, options: Options, on_phase: OnPhase | None = None) -> Run:
    """The run of ``model`` (a Graph, an ONNX path or an ``onnx.ModelProto``) with ``options``;
    anything else raises :class:`~relsat.errors.SettingsError` naming ``model``."""
    if isinstance(model, Graph):
        return Run(options, model, on_phase=on_phase)
    if not isinstance(model, str | os.PathLike) and not _is_proto(model):
        raise SettingsError(
            "model", model, "a relsat.Graph, a path to an ONNX file or an onnx.ModelProto"
        )
    from relsat import onnx as ronnx

    graph = ronnx.load(model, input_shapes=options.input_shapes, batch=options.batch)
    if _is_proto(model):
        source = Source(model, model.SerializeToString())
    else:
        path = Path(model)
        source = Source(os.fspath(model), path.read_bytes(), path)
    return Run(options, graph, source=source, on_phase=on_phase)


def _is_proto(model: object) -> bool:
    """Is ``model`` an ``onnx.ModelProto`` (without importing onnx for a Graph)?"""
    if type(model).__name__ != "ModelProto":
        return False
    import onnx

    return isinstance(model, onnx.ModelProto)
