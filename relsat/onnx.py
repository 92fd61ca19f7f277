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
opaque ``Pad`` before a VALID conv. Graph inputs and outputs may have any tensor element type:
tensors other than float32 (token ids, attention masks, shapes, booleans) are read only by opaque
nodes (Gather of an embedding, Cast, Where, ...), so rewrites never touch them, and the float32
regions between them are rewritten as usual. Every graph input is kept, used or not, in its
order. Dynamic dims must be fixed with ``input_shapes`` or ``batch``.

**Export** (:func:`save`, :func:`to_model`) writes opset 17 (``OPSET``) by default — or, when the
graph holds opaque nodes imported from another opset, that opset, so they keep their meaning — with
the lowest IR version supporting it (8 for opset 17), in the default domain plus the custom domains
of opaque nodes. Fused activations become a separate Relu/Sigmoid/Tanh node; TASO's SAME padding
becomes explicit pads giving exactly the declared output size; subgraphs of weights only (TASO's
``preprocess_weights``: concat/split/enlarge/merge/transpose/... of weights) are evaluated with
relsat's NumPy kernels and stored as new initializers. Weights without data get the values
:func:`relsat.execute.random_values` draws (same ``seed``: the values :func:`relsat.run` uses), so
the model runs.

Inputs and outputs are written with the element types the opaque nodes reading and writing them
recorded; ``like=`` (the original model) keeps its interface exactly: inputs (unused ones too) and
outputs in its order, with its names and element types.

**Verification** (:func:`verify`) runs two models in onnxruntime (CPUExecutionProvider) on the same
random inputs, valid per input (:mod:`relsat.onnx_inputs`: N(0, 1) floats, token ids below the
embedding table's size, padded 0/1 masks, booleans), and compares outputs by position:
``|a - b| <= atol * max(1, max|b|) + rtol * |b|`` element-wise, default ``rtol=1e-4, atol=1e-5``
— the absolute term scales with the output's largest magnitude, because rewrites reorder float32
sums; equal values (infinities, NaN in both) match, and outputs that are not floats must be equal.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
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
    unreadable or invalid file, an opset below 7, inputs or outputs that are not tensors of a
    known element type, sparse tensors, subgraphs (If/Loop/Scan), a node reading a tensor nobody
    defines, or a shape ONNX cannot infer.
    """
    from relsat.onnx_import import load_model

    return load_model(path_or_model, input_shapes=input_shapes, batch=batch)


def to_model(
    graph: Graph,
    *,
    opset: int | None = None,
    seed: int = 0,
    output_names: Sequence[str] | None = None,
    like: Any = None,
) -> Any:
    """``graph`` as a checked ``onnx.ModelProto`` (see the module docstring for what is emitted).

    ``opset=None``: the opset opaque nodes were imported at, else :data:`OPSET`. Outputs are named
    ``output_names``, else as ``like``'s, else after their node's label (as :func:`load` sets
    them), else ``output<i>``. ``like`` (a ModelProto or path, normally the model ``graph`` was
    loaded from) gives the interface to keep: its inputs, unused ones included, and outputs, in
    its order, with its names and element types (shapes as fixed in ``graph``).
    """
    from relsat.onnx_export import build_model

    return build_model(graph, opset=opset, seed=seed, output_names=output_names, like=like)


def save(
    graph: Graph,
    path: str | os.PathLike[str],
    *,
    opset: int | None = None,
    seed: int = 0,
    output_names: Sequence[str] | None = None,
    like: Any = None,
) -> Any:
    """Write ``graph`` to ``path`` as an ONNX model (:func:`to_model`) and return the model.

    The file is written beside ``path`` and renamed into place, so a failure (:class:`OnnxError`
    naming the path) leaves no partial file.
    """
    from relsat.onnx_export import write_model

    model = to_model(graph, opset=opset, seed=seed, output_names=output_names, like=like)
    write_model(model, path)
    return model


# ---------------------------------------------------------------------------------------------
# onnxruntime


def _session(model_or_path: Any) -> Any:
    import onnx
    import onnxruntime as ort

    from relsat.onnx_data import MAX_INLINE_BYTES, save_beside

    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: no warnings about unused initializers
    source = model_or_path
    if isinstance(model_or_path, onnx.ModelProto):
        if model_or_path.ByteSize() > MAX_INLINE_BYTES:  # too big to pass as one protobuf
            with tempfile.TemporaryDirectory() as tmp:
                return _session(save_beside(model_or_path, tmp, "model.onnx"))
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
    return _run(_session(model_or_path), inputs)


def _run(session: Any, inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
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
    """Random inputs for the model, by name, valid for what each input is (N(0, 1) floats, ids
    below the size of the embedding they index, padded 0/1 masks, ...: :mod:`relsat.onnx_inputs`);
    one generator, inputs in sorted name order. Raises :class:`OnnxError` for a dynamic dim or
    an element type that cannot be drawn (strings)."""
    from relsat.onnx_inputs import kinds_of

    return _draw(_session(model_or_path), None, kinds_of(model_or_path), seed)


def _draw(session: Any, other: Any, kinds: Any, seed: int) -> dict[str, np.ndarray]:
    """Inputs of ``session``; dims it leaves dynamic are taken from ``other`` when given."""
    from relsat.onnx_inputs import DRAWABLE, draw

    others = {i.name: i.shape for i in other.get_inputs()} if other is not None else {}
    specs = {}
    for i in session.get_inputs():
        shape, alt = list(i.shape), others.get(i.name, i.shape)
        if len(alt) == len(shape):
            shape = [d if _static(d) else o for d, o in zip(shape, alt, strict=True)]
        if not all(_static(d) for d in shape):
            raise OnnxError(f"input has dynamic shape {i.shape}", tensor=i.name)
        if i.type not in DRAWABLE:
            raise OnnxError(f"cannot draw inputs of type {i.type}", tensor=i.name)
        specs[i.name] = (i.type, shape)
    return draw(specs, kinds, seed=seed)


def _static(dim: Any) -> bool:
    return isinstance(dim, int) and dim > 0


def verify(
    original: Any,
    optimized: Any,
    *,
    seed: int = 0,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> Comparison:
    """Run both models (ModelProto or path) in onnxruntime on the same random inputs and compare.

    Inputs are drawn for the optimized model (whose dims are static; dims it leaves dynamic come
    from the original) as :func:`random_inputs` draws them, what an input is read off both
    models; the two models must have the same input names. Outputs are compared by position
    (:func:`compare_outputs`).
    """
    from relsat.onnx_inputs import kinds_of

    first, second = _session(original), _session(optimized)
    names_orig = sorted(i.name for i in first.get_inputs())
    names_opt = sorted(i.name for i in second.get_inputs())
    if names_orig != names_opt:
        raise OnnxError(f"the models' inputs differ: {names_orig} vs {names_opt}")
    inputs = _draw(second, first, kinds_of(original, optimized), seed)
    return compare_outputs(_run(first, inputs), _run(second, inputs), rtol=rtol, atol=atol)


def compare_outputs(
    out1: Sequence[np.ndarray], out2: Sequence[np.ndarray], *, rtol: float, atol: float
) -> Comparison:
    """Two lists of output arrays compared position by position, as a :class:`Comparison`:
    ``ok`` iff every pair has the same shape and ``|a - b| <= atol * max(1, max|b|) + rtol * |b|``
    wherever the values differ (equal infinities and NaN in both count as equal); outputs that
    are not floating point must be equal."""
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
        same = (a64 == b64) | (np.isnan(a64) & np.isnan(b64))
        with np.errstate(invalid="ignore"):
            diff = np.where(same, 0.0, np.abs(a64 - b64))
        scale = np.maximum(np.abs(a64), np.abs(b64))
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = np.where(diff == 0, 0.0, diff / scale)
        max_abs.append(float(diff.max(initial=0.0)))
        max_rel.append(float(rel.max(initial=0.0)))
        # atol scales with the output's range: rewrites reorder float32 sums, and an element
        # near zero of a large output can only be as exact as the output's magnitude allows.
        finite = np.abs(b64[np.isfinite(b64)])
        tolerance = atol * max(1.0, float(finite.max(initial=0.0))) + rtol * np.abs(b64)
        exact = not (np.issubdtype(a.dtype, np.floating) and np.issubdtype(b.dtype, np.floating))
        close.append(bool(np.all(same)) if exact else bool(np.all(same | (diff <= tolerance))))
    return Comparison(all(close), tuple(max_abs), tuple(max_rel), tuple(close), rtol, atol)
