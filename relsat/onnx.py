"""ONNX in and out: import a model as a relsat graph, export a graph as a model, check it in
onnxruntime.

The public surface is chosen here; :mod:`relsat.onnx_import` and :mod:`relsat.onnx_export` hold
the two directions.

**Import** (:func:`load`) maps Conv (2-D; groups, strides, pads, bias), MatMul, Gemm, Add, Mul,
Relu, Tanh, Sigmoid, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, Concat, Split,
Reshape, Flatten, Squeeze, Unsqueeze, Transpose, BatchNormalization, Identity, Dropout and
Constant onto relsat's operators. Everything else — and a supported op in a form relsat cannot
express (dilated conv, Gemm with alpha != 1, pooling with ceil_mode that changes the size, non-float
tensors, ...) — becomes an *opaque* node that keeps its op_type, domain, opset, attributes,
constant (non-float) inputs and all outputs, and is exported back unchanged; its output shapes come
from ONNX shape inference. Explicit conv padding that is neither VALID nor TASO's SAME becomes an
opaque ``Pad`` before a VALID conv. Only float32 graph inputs and outputs are supported; dynamic
dims must be fixed with ``input_shapes`` or ``batch``.

**Export** (:func:`save`, :func:`to_model`) writes opset 17 (``OPSET``) by default — or, when the
graph holds opaque nodes imported from another opset, that opset, so they keep their meaning — with
the lowest IR version supporting it (8 for opset 17), in the default domain plus the custom domains
of opaque nodes. Fused activations become a separate Relu/Sigmoid/Tanh node; TASO's SAME padding
becomes explicit pads giving exactly the declared output size; subgraphs of weights only (TASO's
``preprocess_weights``: concat/split/enlarge/merge/transpose/... of weights) are evaluated with
relsat's NumPy kernels and stored as new initializers. Weights without data get the values
:func:`relsat.execute.random_values` draws (same ``seed``: the values :func:`relsat.run` uses), so
the model runs.

**Verification** (:func:`verify`) runs two models in onnxruntime (CPUExecutionProvider) on the same
random N(0, 1) float32 inputs and compares outputs by position: ``|a - b| <= atol * max(1, max|b|)
+ rtol * |b|`` element-wise, default ``rtol=1e-4, atol=1e-5`` — the absolute term scales with the
output's largest magnitude, because rewrites reorder float32 sums.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from relsat.errors import RelsatError
from relsat.execute import Comparison
from relsat.graph import Graph

__all__ = [
    "OPSET",
    "DynamicShapeError",
    "OnnxError",
    "load",
    "run_onnx",
    "save",
    "to_model",
    "verify",
]

#: The default opset of exported models.
OPSET = 17


class OnnxError(RelsatError, ValueError):
    """An ONNX model relsat cannot read, write or run.

    ``path`` names the file, ``node`` the ONNX node (its name, or ``#k`` for the k-th unnamed one),
    ``op_type`` its operator and ``tensor`` the tensor (e.g. a graph input) at fault; any may be
    None. ``reason`` is the message without them.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        node: str | None = None,
        op_type: str | None = None,
        tensor: str | None = None,
    ) -> None:
        self.reason = message
        self.path = path
        self.node = node
        self.op_type = op_type
        self.tensor = tensor
        where = []
        if node is not None:
            where.append(f"node {node!r}" + (f" ({op_type})" if op_type else ""))
        elif op_type is not None:
            where.append(op_type)
        if tensor is not None:
            where.append(f"tensor {tensor!r}")
        text = f"{', '.join(where)}: {message}" if where else message
        super().__init__(f"{path}: {text}" if path else text)


class DynamicShapeError(OnnxError):
    """An operator's output shape is computed at run time (ONNX shape inference leaves it open)."""


def load(
    path_or_model: str | os.PathLike[str] | Any,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    batch: int | None = None,
) -> Graph:
    """Read an ONNX model (a path or an ``onnx.ModelProto``) as a relsat :class:`Graph`.

    ``input_shapes`` gives full shapes by input name, ``batch`` the value of dynamic leading dims;
    a dim left dynamic raises :class:`OnnxError` naming the input. Initializers and Constant nodes
    become weights with their real values (``graph.values``). Raises :class:`OnnxError` for an
    unreadable or invalid file, an opset below 7, non-float32 inputs or outputs, a node reading a
    tensor nobody defines, or a shape ONNX cannot infer.
    """
    from relsat.onnx_import import load_model

    try:
        return load_model(path_or_model, input_shapes=input_shapes, batch=batch)
    except DynamicShapeError as first:
        # Exporters compute shapes at run time (Shape → Gather → Slice …, e.g. torch's attention).
        # onnxruntime's constant folding resolves them when the input shapes are static; retry
        # once on the folded model, else report the original problem.
        try:
            folded = _fold_constants(path_or_model)
        except Exception:
            raise first from None
        try:
            return load_model(folded, input_shapes=input_shapes, batch=batch)
        except OnnxError:
            raise first from None


def _fold_constants(path_or_model: Any) -> Any:
    """The model after onnxruntime's BASIC graph optimizations (constant folding)."""
    import tempfile

    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "in.onnx"
        if isinstance(path_or_model, str | os.PathLike):
            source = Path(path_or_model)
        else:
            onnx.save(path_or_model, str(source))
        target = Path(tmp) / "folded.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(target)
        options.log_severity_level = 3
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        return onnx.load(str(target))


def to_model(
    graph: Graph,
    *,
    opset: int | None = None,
    seed: int = 0,
    output_names: Sequence[str] | None = None,
) -> Any:
    """``graph`` as a checked ``onnx.ModelProto`` (see the module docstring for what is emitted).

    ``opset=None``: the opset opaque nodes were imported at, else :data:`OPSET`. Outputs are named
    ``output_names``, else after their node's label (as :func:`load` sets them), else ``output<i>``.
    """
    from relsat.onnx_export import build_model

    return build_model(graph, opset=opset, seed=seed, output_names=output_names)


def save(
    graph: Graph,
    path: str | os.PathLike[str],
    *,
    opset: int | None = None,
    seed: int = 0,
    output_names: Sequence[str] | None = None,
) -> Any:
    """Write ``graph`` to ``path`` as an ONNX model (:func:`to_model`) and return the model.

    The file is written beside ``path`` and renamed into place, so a failure (:class:`OnnxError`
    naming the path) leaves no partial file.
    """
    from relsat.onnx_export import write_model

    model = to_model(graph, opset=opset, seed=seed, output_names=output_names)
    write_model(model, path)
    return model


# ---------------------------------------------------------------------------------------------
# onnxruntime


def _session(model_or_path: Any) -> Any:
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: no warnings about unused initializers
    source = model_or_path
    if isinstance(model_or_path, onnx.ModelProto):
        source = model_or_path.SerializeToString()
    elif isinstance(model_or_path, os.PathLike):
        source = os.fspath(model_or_path)
    path = source if isinstance(source, str) else None
    try:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own unrelated exception classes
        raise OnnxError(
            f"onnxruntime cannot load the model: {_first_line(exc)}", path=path
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def run_onnx(model_or_path: Any, inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
    """Run a model (ModelProto or path) in onnxruntime on the CPU; ``inputs`` by name or in order.

    Returns the outputs in the model's order. Raises :class:`OnnxError` when the model cannot be
    loaded or run, or when inputs are missing or unknown.
    """
    session = _session(model_or_path)
    names = [i.name for i in session.get_inputs()]
    if isinstance(inputs, Mapping):
        feed = dict(inputs)
        missing, unknown = sorted(set(names) - set(feed)), sorted(set(feed) - set(names))
        if missing or unknown:
            raise OnnxError(f"model inputs are {names}; missing {missing}, unknown {unknown}")
    else:
        if len(inputs) != len(names):
            raise OnnxError(f"model has {len(names)} inputs {names}, got {len(inputs)} arrays")
        feed = dict(zip(names, inputs, strict=True))
    types = {i.name: i.type for i in session.get_inputs()}
    feed = {
        k: np.asarray(v, dtype=np.float32 if types[k] == "tensor(float)" else None)
        for k, v in feed.items()
    }
    try:
        return [np.asarray(o) for o in session.run(None, feed)]
    except Exception as exc:
        raise OnnxError(f"onnxruntime failed: {_first_line(exc)}") from None


def random_inputs(model_or_path: Any, *, seed: int = 0) -> dict[str, np.ndarray]:
    """N(0, 1) float32 arrays for the model's inputs, by name (sorted names, one generator)."""
    session = _session(model_or_path)
    rng = np.random.default_rng(seed)
    out = {}
    for i in sorted(session.get_inputs(), key=lambda i: i.name):
        if i.type != "tensor(float)":
            raise OnnxError(f"only float32 inputs can be drawn, not {i.type}", tensor=i.name)
        if not all(isinstance(d, int) and d > 0 for d in i.shape):
            raise OnnxError(f"input has dynamic shape {i.shape}", tensor=i.name)
        out[i.name] = rng.standard_normal(i.shape).astype(np.float32)
    return out


def verify(
    original: Any,
    optimized: Any,
    *,
    seed: int = 0,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> Comparison:
    """Run both models (ModelProto or path) in onnxruntime on the same random inputs and compare.

    Inputs are drawn for the optimized model (whose dims are static) by :func:`random_inputs`; the
    two models must have the same input names. Outputs are compared by position:
    ``ok`` iff every pair has the same shape and ``|a - b| <= atol + rtol |b|`` everywhere.
    """
    inputs = random_inputs(optimized, seed=seed)
    names_orig = sorted(i.name for i in _session(original).get_inputs())
    if names_orig != sorted(inputs):
        raise OnnxError(f"the models' inputs differ: {names_orig} vs {sorted(inputs)}")
    out1, out2 = run_onnx(original, inputs), run_onnx(optimized, inputs)
    return compare_outputs(out1, out2, rtol=rtol, atol=atol)


def compare_outputs(
    out1: Sequence[np.ndarray], out2: Sequence[np.ndarray], *, rtol: float, atol: float
) -> Comparison:
    """Two lists of output arrays compared position by position, as a :class:`Comparison`."""
    reason = None
    if len(out1) != len(out2):
        reason = f"{len(out1)} outputs vs {len(out2)}"
    else:
        for i, (a, b) in enumerate(zip(out1, out2, strict=True)):
            if a.shape != b.shape:
                reason = f"output {i} has shape {list(a.shape)} vs {list(b.shape)}"
                break
    if reason is not None:
        return Comparison(False, (), (), (), rtol, atol, reason)
    max_abs, max_rel, close = [], [], []
    for a, b in zip(out1, out2, strict=True):
        a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        diff = np.abs(a64 - b64)
        scale = np.maximum(np.abs(a64), np.abs(b64))
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = np.where(diff == 0, 0.0, diff / scale)
        max_abs.append(float(diff.max(initial=0.0)))
        max_rel.append(float(rel.max(initial=0.0)))
        # atol scales with the output's range: rewrites reorder float32 sums, and an element
        # near zero of a large output can only be as exact as the output's magnitude allows.
        tolerance = atol * max(1.0, float(np.abs(b64).max(initial=0.0))) + rtol * np.abs(b64)
        close.append(bool(np.all(diff <= tolerance)))
    return Comparison(all(close), tuple(max_abs), tuple(max_rel), tuple(close), rtol, atol)
