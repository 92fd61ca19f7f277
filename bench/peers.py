"""The transformer optimizers relsat is compared with (bench/ort_fusions.py), one call each.

* ``ort-opt``: onnxruntime's transformers optimizer, ``optimize_model(source, model_type,
  num_heads, hidden_size, opt_level=0)`` — its Python pattern fusions only (onnxruntime's own
  graph optimizations run when a session is made, for every variant alike);
* ``onnxscript``: onnxscript's onnxruntime fusions, ``onnxscript.rewriter.ort_fusions.
  optimize_for_ort`` on the model loaded with ``onnx_ir`` (the successor onnxruntime is moving
  its fusions to; it runs ONNX shape inference and onnxscript's optimizer itself);
* ``onnxslim``: the ``onnxslim IN OUT`` command (:func:`simplifiers.onnxslim`).

:func:`run` calls one of them and returns a :class:`PeerRun`; a tool that raises or fails is a
``PeerRun`` with ``error`` set, never an exception. The fusers' outputs get static shapes on every
tensor from onnxruntime's symbolic shape inference (:func:`annotate_shapes`), which knows their
contrib operators (ONNX's does not, and relsat needs a static shape for each operator it keeps
opaque); that changes nothing onnxruntime runs.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import onnx
from exports import stdout_to_stderr
from simplifiers import onnxslim
from timing import first_line

PEERS = ("ort-opt", "onnxscript", "onnxslim")


@dataclass(frozen=True)
class PeerRun:
    """One peer on one model: the file written (None: it failed, ``error`` says why), the
    seconds it took, and what it said it did (onnxscript's fusion counts; a shape-inference
    failure)."""

    output: Path | None
    seconds: float
    error: str | None = None
    detail: str = ""


def run(
    peer: str,
    source: Path,
    target: Path,
    *,
    model_type: str = "bert",
    heads: int = 0,
    hidden: int = 0,
    timeout: float = 600.0,
    annotate: bool = True,
) -> PeerRun:
    """``peer`` (one of :data:`PEERS`) on ``source``, written to ``target``; ``model_type``,
    ``heads`` and ``hidden`` are ort-opt's (0: let it detect them); ``annotate``: give the
    fusers' outputs static shapes (:func:`annotate_shapes`, for relsat to read them; off where
    the file is judged as the fuser wrote it, its interface included)."""
    target.unlink(missing_ok=True)
    start = time.perf_counter()
    detail = ""
    if peer == "onnxslim":
        slim = onnxslim(source, target, timeout)
        return PeerRun(slim.output, slim.seconds, slim.error)
    try:
        with warnings.catch_warnings(), stdout_to_stderr():
            warnings.simplefilter("ignore")
            if peer == "ort-opt":
                ort_opt(source, target, model_type, heads, hidden)
            elif peer == "onnxscript":
                detail = onnxscript_fusions(source, target)
            else:
                raise ValueError(f"unknown peer {peer!r}; one of {PEERS}")
    # Broad on purpose: the fusers' matchers raise all kinds of errors on graphs they do not know.
    except Exception as exc:
        return PeerRun(None, time.perf_counter() - start, first_line(exc))
    seconds = time.perf_counter() - start
    failure = annotate_shapes(target) if annotate else None
    if failure:
        detail = "; ".join(d for d in (detail, f"shape inference failed: {failure}") if d)
    return PeerRun(target, seconds, None, detail)


def ort_opt(source: Path, target: Path, model_type: str, heads: int, hidden: int) -> None:
    """onnxruntime's transformers optimizer (pattern fusions only) from ``source`` to
    ``target``."""
    from onnxruntime.transformers.optimizer import optimize_model

    model = optimize_model(
        str(source), model_type, num_heads=heads, hidden_size=hidden, opt_level=0
    )
    model.save_model_to_file(str(target))


def onnxscript_fusions(source: Path, target: Path) -> str:
    """onnxscript's ``optimize_for_ort`` from ``source`` to ``target``; the fusions it counts
    (``sdpa 4, attention 4, ...``)."""
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    model, counts = optimize_for_ort(ir.load(str(source)))
    ir.save(model, str(target))
    return ", ".join(f"{k} {v}" for k, v in counts.items() if v) or "no fusion"


def annotate_shapes(path: Path) -> str | None:
    """Static shapes on every tensor of ``path`` from onnxruntime's symbolic shape inference
    (the file rewritten); None, or why it failed (the file then left as it was)."""
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    model = onnx.load(str(path))
    try:
        # in a folder of its own: when it cannot infer every shape it writes
        # sym_shape_infer_temp.onnx and its weights into the working directory before raising
        with (
            tempfile.TemporaryDirectory() as scratch,
            contextlib.chdir(scratch),
            warnings.catch_warnings(),
            stdout_to_stderr(),
        ):
            warnings.simplefilter("ignore")
            inferred = SymbolicShapeInference.infer_shapes(model, auto_merge=True)
        onnx.save(inferred, str(path))
    # Broad on purpose: a model it cannot follow; relsat will then say what it lacks.
    except Exception as exc:
        return first_line(exc)
    return None
