"""Models in onnxruntime: sessions, running, random inputs per input, and :func:`verify`.

Outputs are compared by :func:`relsat.graph.execute.compare_outputs`, the routine NumPy verification
(:func:`relsat.graph.execute.compare`) uses too, so one tolerance rule holds for both. The ``onnx``
and
``onnxruntime`` packages are imported inside the functions: importing :mod:`relsat` must not pay
for them.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from relsat.graph.execute import Comparison, compare_outputs
from relsat.onnx.errors import OnnxError
from relsat.onnx.runtime import OrtSettings
from relsat.threads import cap as thread_cap

__all__ = ["failure_at", "output_shapes", "random_inputs", "run_onnx", "runs_at", "verify"]


def _session(model_or_path: Any, *, quiet: bool = False) -> Any:
    import onnx
    import onnxruntime as ort

    from relsat.onnx.data import MAX_INLINE_BYTES, save_beside

    # errors-only logging, no spinning threads; RELSAT_THREADS when the cores are shared
    options = OrtSettings(threads=thread_cap() or 0).session_options()
    if quiet:  # failures expected: not even errors logged
        options.log_severity_level = 4
    source = model_or_path
    if isinstance(model_or_path, onnx.ModelProto):
        if model_or_path.ByteSize() > MAX_INLINE_BYTES:  # too big to pass as one protobuf
            with tempfile.TemporaryDirectory() as tmp:
                return _session(save_beside(model_or_path, tmp, "model.onnx"), quiet=quiet)
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
    below the size of the embedding they index, padded 0/1 masks, ...: :mod:`relsat.onnx.inputs`);
    one generator, inputs in sorted name order. Raises :class:`OnnxError` for a dynamic dim or
    an element type that cannot be drawn (strings)."""
    from relsat.onnx.inputs import kinds_of

    return _draw(_session(model_or_path), None, kinds_of(model_or_path), seed)


def failure_at(
    model_or_path: Any,
    shape: Mapping[str, Sequence[int]],
    given: Mapping[str, np.ndarray] | None = None,
) -> str | None:
    """Why onnxruntime does not run the model at ``shape`` (input name → dims; random inputs as
    :func:`random_inputs` draws them, ``given`` ones where their shapes fit:
    :func:`relsat.onnx.inputs.draw`), in one line; None when it runs (or cannot be loaded: the
    importer says why)."""
    from relsat.onnx.inputs import kinds_of

    try:
        session = _session(model_or_path, quiet=True)
    except OnnxError:
        return None
    try:
        _run(session, _draw(session, None, kinds_of(model_or_path), 0, shape, given))
    except (OnnxError, ValueError) as exc:
        text = str(exc).strip()
        return text.splitlines()[0] if text else type(exc).__name__
    return None


def output_shapes(
    model_or_path: Any,
    names: Sequence[str],
    shapes: Mapping[str, Sequence[int]],
    given: Mapping[str, np.ndarray] | None = None,
) -> dict[str, tuple[int, ...]] | None:
    """The shapes of the model's tensors ``names`` (any, not only its outputs) when onnxruntime
    runs it at input ``shapes`` on the inputs :func:`verify` draws there (``given`` ones where
    their shapes fit); None when it cannot load or run it."""
    import onnx

    from relsat.onnx.inputs import kinds_of

    if not names:  # onnxruntime reads no names as every graph output
        return {}
    if isinstance(model_or_path, onnx.ModelProto):  # the caller's: extended on a copy
        probe = onnx.ModelProto()
        probe.CopyFrom(model_or_path)
    else:  # read here: extended in place, the weights held once
        probe = onnx.load(os.fspath(model_or_path))
    kinds = kinds_of(probe)  # what an input is, read before the extra outputs are declared
    declared = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in declared)
    try:
        session = _session(probe, quiet=True)
        feeds = _draw(session, None, kinds, 0, shapes, given)
        wanted = list(names)
        got = session.run(wanted, feeds)
    except Exception:  # OnnxError, or onnxruntime's own classes
        return None
    return {n: tuple(int(d) for d in np.shape(v)) for n, v in zip(wanted, got, strict=True)}


def runs_at(model_or_path: Any, shapes: Sequence[Mapping[str, Sequence[int]]]) -> list[bool]:
    """Whether onnxruntime runs the model at each of ``shapes`` (input name → dims; random
    inputs as :func:`random_inputs` draws them); False for every shape when it cannot load it."""
    from relsat.onnx.inputs import kinds_of

    try:
        session = _session(model_or_path, quiet=True)
    except OnnxError:
        return [False] * len(shapes)
    kinds = kinds_of(model_or_path)
    out = []
    for one in shapes:
        try:
            _run(session, _draw(session, None, kinds, 0, one))
            out.append(True)
        except (OnnxError, ValueError):
            out.append(False)
    return out


def _draw(
    session: Any,
    other: Any,
    kinds: Any,
    seed: int,
    shapes: Mapping[str, Sequence[int]] | None = None,
    given: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Inputs of ``session``; dims it leaves dynamic are taken from ``other`` when given, the
    shapes of those ``shapes`` names from there; ``given`` values where their shapes fit."""
    from relsat.onnx.inputs import DRAWABLE, draw, given_at

    others = {i.name: i.shape for i in other.get_inputs()} if other is not None else {}
    specs = {}
    for i in session.get_inputs():
        shape, alt = list(i.shape), others.get(i.name, i.shape)
        if shapes is not None and i.name in shapes:
            shape = [int(d) for d in shapes[i.name]]
        elif len(alt) == len(shape):
            shape = [d if _static(d) else o for d, o in zip(shape, alt, strict=True)]
        asked = shapes is not None and i.name in shapes  # 0 there is a length (empty axes)
        if not all(_static(d) or (asked and d == 0) for d in shape):
            raise OnnxError(f"input has dynamic shape {i.shape}", tensor=i.name)
        if i.type not in DRAWABLE and given_at(given, i.name, shape) is None:
            raise OnnxError(f"cannot draw inputs of type {i.type}", tensor=i.name)
        specs[i.name] = (i.type, shape)
    return draw(specs, kinds, seed=seed, given=given)


def _static(dim: Any) -> bool:
    return isinstance(dim, int) and dim > 0


def verify(
    original: Any,
    optimized: Any,
    *,
    seed: int = 0,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    shapes: Mapping[str, Sequence[int]] | None = None,
    given: Mapping[str, np.ndarray] | None = None,
) -> Comparison:
    """Run both models (ModelProto or path) in onnxruntime on the same random inputs and compare.

    Inputs are drawn for the optimized model (whose dims are static; dims it leaves dynamic come
    from the original; ``shapes`` gives inputs' shapes by name, for models with dynamic dims)
    as :func:`random_inputs` draws them, what an input is read off both models, ``given`` ones
    taken where their shapes fit; the two models must have the same input names. Outputs are
    compared by position (:func:`relsat.graph.execute.compare_outputs`).
    """
    from relsat.onnx.inputs import kinds_of

    first, second = _session(original), _session(optimized)
    names_orig = sorted(i.name for i in first.get_inputs())
    names_opt = sorted(i.name for i in second.get_inputs())
    if names_orig != names_opt:
        raise OnnxError(f"the models' inputs differ: {names_orig} vs {names_opt}")
    inputs = _draw(second, first, kinds_of(original, optimized), seed, shapes, given)
    return compare_outputs(_run(first, inputs), _run(second, inputs), rtol=rtol, atol=atol)
