"""onnxruntime sessions timed side by side: interleaved rounds, medians, an A/A row.

One session per variant on ``CPUExecutionProvider``: ``intra_op_num_threads`` fixed,
``inter_op_num_threads`` 1, sequential execution, and worker threads that do not spin between
runs (``session.intra_op.allow_spinning = "0"``: with sessions interleaved on a few cores, one
session's spinning threads take the cores of the next). The original gets two sessions,
``original`` and ``A/A``: the A/A ratio is what noise alone does to a ratio.

:func:`side_by_side` first runs every session once and compares its outputs with the original's
(``rtol``/``atol``); a variant onnxruntime refuses is left out of the timing with the reason.
Then an interleaved warm-up (at least ``warmup_s`` seconds and 3 rounds: the first runs of a
session are slower), then ``rounds`` rounds of one run per session, the order rotated every
round so that drift hits every variant alike; the median per variant in ms.
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ORIGINAL, AA = "original", "A/A"
LEVELS = {
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}
RTOL, ATOL = 1e-4, 1e-5


def session(
    path: Path, threads: int = 1, level: str = "all", spin: bool = False
) -> ort.InferenceSession:
    """A CPU session of ``path`` as described above (``spin``: onnxruntime's default spinning)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = LEVELS[level]
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def machine(threads: int, level: str = "all", spin: bool = False) -> str:
    """What the numbers were measured on, one line."""
    cpu = platform.processor() or platform.machine()
    return (
        f"onnxruntime {ort.__version__} CPU, {cpu}, {threads} threads, level {level}, "
        f"spinning {'on' if spin else 'off'}"
    )


_NUMPY = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.BOOL: np.bool_,
}


def random_inputs(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input that is not an initializer: floats standard normal,
    integers zero (a safe index), booleans true; a symbolic dimension is 1."""
    graph = onnx.load(str(path), load_external_data=False).graph
    weights = {t.name for t in graph.initializer}
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for value in graph.input:
        if value.name in weights:
            continue
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor.shape.dim]
        dtype = _NUMPY.get(tensor.elem_type)
        if dtype is None:
            raise ValueError(f"input {value.name!r}: element type {tensor.elem_type} unsupported")
        if np.issubdtype(dtype, np.floating):
            out[value.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype is np.bool_:
            out[value.name] = np.ones(shape, dtype)
        else:
            out[value.name] = np.zeros(shape, dtype)
    return out


def feed(sess: ort.InferenceSession, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``inputs`` under the session's input names (by position when the names differ)."""
    names = [i.name for i in sess.get_inputs()]
    if set(names) == set(inputs):
        return {n: inputs[n] for n in names}
    if len(names) != len(inputs):
        raise ValueError(f"inputs {names} do not match the given {sorted(inputs)}")
    return dict(zip(names, inputs.values(), strict=True))


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message``."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _check(reference: list[np.ndarray], outputs: list[np.ndarray], rtol: float, atol: float) -> str:
    if len(reference) != len(outputs):
        return f"DIFFERS: {len(outputs)} outputs, the original has {len(reference)}"
    worst = 0.0
    for i, (a, b) in enumerate(zip(reference, outputs, strict=True)):
        if a.shape != b.shape:
            return f"DIFFERS: output {i} shape {b.shape}, the original's {a.shape}"
        if a.size == 0:
            continue
        if a.dtype.kind in "fc":
            worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b))))
        if not np.allclose(b, a, rtol=rtol, atol=atol, equal_nan=True):
            return f"DIFFERS: output {i} max abs error {worst:.3g}"
    return f"ok ({worst:.1g})"


@dataclass(frozen=True)
class Timing:
    """Medians (ms) and output checks by variant; ``original`` and ``A/A`` first."""

    ms: dict[str, float]
    checks: dict[str, str]
    rounds: int
    threads: int

    def ratio(self, variant: str) -> float | None:
        """``variant``'s median over the original's (below 1 = faster), None if not timed."""
        base = self.ms.get(ORIGINAL)
        return self.ms[variant] / base if variant in self.ms and base else None


def side_by_side(
    original: Path,
    variants: Mapping[str, Path],
    inputs: Mapping[str, np.ndarray] | None = None,
    *,
    threads: int = 1,
    rounds: int = 30,
    level: str = "all",
    spin: bool = False,
    warmup_s: float = 0.5,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> Timing:
    """Time ``original`` (twice: ``original`` and ``A/A``) and each of ``variants`` (name →
    file) on ``inputs`` (default: :func:`random_inputs` of the original)."""
    if inputs is None:
        inputs = random_inputs(original)
    files = {ORIGINAL: original, AA: original, **variants}
    sessions: dict[str, ort.InferenceSession] = {}
    feeds: dict[str, dict[str, np.ndarray]] = {}
    checks: dict[str, str] = {}
    reference: list[np.ndarray] | None = None
    for name, path in files.items():
        try:
            sess = session(path, threads, level, spin)
            feeds[name] = feed(sess, inputs)
            outputs = [np.asarray(o) for o in sess.run(None, feeds[name])]
        # Broad on purpose: onnxruntime raises its own unrelated exception classes.
        except Exception as exc:
            checks[name] = "fails in onnxruntime: " + first_line(exc)
            continue
        sessions[name] = sess
        if name == ORIGINAL:
            reference = outputs
        if reference is None:
            checks[name] = "no reference"
        else:
            checks[name] = _check(reference, outputs, rtol, atol)
    names = list(sessions)
    start, done = time.perf_counter(), 0
    while names and (done < 3 or time.perf_counter() - start < warmup_s):
        for n in names:
            sessions[n].run(None, feeds[n])
        done += 1
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names) if names else 0
        for n in names[k:] + names[:k]:
            t = time.perf_counter()
            sessions[n].run(None, feeds[n])
            times[n].append(1000 * (time.perf_counter() - t))
    ms = {n: statistics.median(v) for n, v in times.items() if v}
    return Timing(ms, checks, rounds, threads)


def describe(timing: Timing, variant: str) -> str:
    """``1.234 (0.95x)`` for a table cell; ``–`` when not timed."""
    if variant not in timing.ms:
        return "–"
    ratio = timing.ratio(variant)
    if variant == ORIGINAL or ratio is None:
        return f"{timing.ms[variant]:.3f}"
    return f"{timing.ms[variant]:.3f} ({ratio:.2f}x)"
