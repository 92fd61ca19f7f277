"""Whether two models run alike in onnxruntime: the graph onnxruntime makes of each.

onnxruntime rewrites a model when it loads it (``OrtSettings.level``: constant folding, a Conv
with the BatchNormalization, bias and activation after it fused into one kernel, Gemm with its
bias, …). relsat's rules make many of the same rewrites on its e-graph, so an optimized model
can differ from its input only by what onnxruntime would have done to the input anyway; timing
the two against each other then only measures noise. :func:`runs_alike` writes the graph
onnxruntime makes of each model (``optimized_model_filepath``) and compares their structure
(:func:`form`): each node by its domain, its operator and the forms of its inputs; a graph
input by its name; a constant by its element type and its dims in any order (not its values:
relsat folds a batch normalization into a weight in float32, onnxruntime in its own order of
operations). Attributes are left out, since relsat writes them in its own normal form: the
explicit pads of the same windows, a pool over the whole image as the global pool, a Gemm's
weight untransposed (onnxruntime prepacks it either way), a default written out. Where the
comparison errs, it calls two models alike that are not, and the input is kept: a gain missed,
never a wrong model.

A model onnxruntime cannot load is not alike anything: the caller checks and times as before.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from typing import Any

from relsat.onnx.runtime import OrtSettings

__all__ = ["form", "runs_alike"]


def runs_alike(a: Any, b: Any, settings: OrtSettings) -> bool:
    """Whether onnxruntime, at ``settings``, makes graphs of the same :func:`form` of ``a`` and
    ``b`` (ModelProto, bytes or path); False when it cannot load either."""
    try:
        return form(_as_run(a, settings)) == form(_as_run(b, settings))
    # Broad on purpose: onnxruntime raises its own unrelated exception classes.
    except Exception:
        return False


def form(model: Any) -> tuple[str, ...]:
    """The structure of ``model``'s graph (an ``onnx.ModelProto``): one digest per graph output,
    each over the operators and the constants' types and dims that compute it."""
    graph = model.graph
    known: dict[str, str] = {i.name: f"input:{i.name}" for i in graph.input}
    for t in graph.initializer:
        known[t.name] = f"const:{t.data_type}:{sorted(t.dims)}"  # a Gemm's weight either way
    for node in graph.node:  # onnxruntime writes its graph in topological order
        op = _POOLS.get(node.op_type, node.op_type)
        inputs = [known.get(name, f"?{name}") if name else "" for name in node.input]
        digest = hashlib.sha256(repr((node.domain, op, inputs)).encode())
        for k, out in enumerate(node.output):
            known[out] = f"{digest.hexdigest()[:24]}:{k}"
    return tuple(known.get(o.name, f"?{o.name}") for o in graph.output)


#: A pool over the whole image is written as the global pool (valid at every size) where the
#: input may have a kernel as large as its image: one kernel family.
_POOLS = {"GlobalAveragePool": "AveragePool", "GlobalMaxPool": "MaxPool"}


def _as_run(model: Any, settings: OrtSettings) -> Any:
    """The graph onnxruntime runs for ``model`` at ``settings``, as an ``onnx.ModelProto``."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="relsat-alike-") as folder:
        target = os.path.join(folder, "as_run.onnx")
        options = settings.session_options()
        options.optimized_model_filepath = target
        source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
        if isinstance(source, os.PathLike):
            source = os.fspath(source)
        ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        return onnx.load(target, load_external_data=False)
