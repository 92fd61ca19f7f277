"""Latency: is the optimized model faster than its original in onnxruntime, beyond noise?

:func:`compare_latency` times both models on the CPU with one
:class:`~relsat.onnx.runtime.OrtSettings`
(the configuration relsat's ``ort-cpu`` cost model prices with) and returns a
:class:`LatencyComparison` whose ``verdict`` says ``"faster"``, ``"slower"`` or ``"same"``.

Protocol. Both sessions get the same inputs (drawn as :func:`relsat.onnx.random_inputs` draws
them: N(0, 1) floats, token ids in range, padded 0/1 masks, booleans) and
``warmup`` runs each. A third session of the original is the *A/A control*. Then *rounds*: each
round runs original, optimized, control, control, optimized, original (symmetric, so a linear
drift of the machine's speed hits all alike), each block ``k`` back-to-back
runs, ``k`` chosen per model from the warm-up so a block lasts about ``max_seconds / 200`` (tiny
models are averaged over many runs, big ones run once per block). A round yields each model's
mean time per run and their ratio optimized / original. Reported are the medians over rounds of
each model's time and of the ratio, and a distribution-free confidence interval for the median
ratio: the order statistics ``[r_(j), r_(n+1-j)]`` with the largest ``j`` such that
``P(Binomial(n, 1/2) < j) <= (1 - confidence) / 2`` (with fewer than 6 rounds no 95 % interval
exists and the interval is the full range).

Budget. Rounds continue until ``max_seconds`` (default 10 s, warm-up included) have passed and at
least ``min_rounds`` (default 15) are done, or ``max_rounds`` (default 400) are done: a tiny model
gets hundreds of rounds, a model taking seconds per run gets ``min_rounds`` however long they
take.

Verdict. ``"faster"`` iff the interval's upper end is below ``1 - min_gain`` (default 0.01: at
least 1 % faster with the stated confidence) *and* below the lower end of the control's interval
(control / original, which only noise moves), ``"slower"`` iff its lower end is above 1 and above
the control's upper end, else ``"same"``. The control is there because load on a shared machine
comes in bursts, which rounds do not average out: measured here, a ConvNeXt whose rewrite
changes nothing was timed 0.954 (95 % CI 0.943–0.963) inside a busy run and 1.00 alone.

>>> from relsat.models.example import PATH
>>> compare_latency(PATH, PATH, max_seconds=0.2, min_rounds=7).rounds >= 7
True
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from relsat.onnx import OnnxError
from relsat.onnx.runtime import OrtSettings, RuntimeSettingsError

__all__ = ["VERDICTS", "LatencyComparison", "compare_latency"]

#: What :attr:`LatencyComparison.verdict` can be.
VERDICTS = ("faster", "slower", "same")

#: Blocks per budget: a block of runs lasts about ``max_seconds / BLOCKS_PER_BUDGET``.
BLOCKS_PER_BUDGET = 200


@dataclass(frozen=True)
class LatencyComparison:
    """Two models timed against each other (see :mod:`relsat.onnx.latency` for the protocol).

    ``original_ms`` / ``optimized_ms``: median time per run; ``ratio``: median over rounds of
    optimized / original, in ``[ratio_low, ratio_high]`` with probability ``confidence``;
    ``ratios``: the per-round ratios.
    """

    original_ms: float
    optimized_ms: float
    ratio: float
    ratio_low: float
    ratio_high: float
    rounds: int
    verdict: str
    threads: int
    confidence: float = 0.95
    min_gain: float = 0.01
    ratios: tuple[float, ...] = field(default=(), repr=False)
    control: float = 1.0
    control_low: float = 1.0
    control_high: float = 1.0

    @property
    def speedup(self) -> float:
        """How many times faster the optimized model runs, ``1 / ratio`` (below 1: slower)."""
        return 1.0 / self.ratio if self.ratio > 0 else math.inf

    def report(self) -> str:
        """One line, e.g. ``onnxruntime CPU (2 threads): 12.31 -> 10.02 ms, 1.23x faster
        (ratio 0.814, 95% CI 0.79-0.84, 21 rounds)``."""
        if self.verdict == "faster":
            change = f"{self.speedup:.2f}x faster"
        elif self.verdict == "slower":
            change = f"{self.ratio:.2f}x slower"
        elif self.ratio_low <= 1.0 <= self.ratio_high:
            change = "no difference beyond noise"
        else:
            change = f"{self.speedup:.3f}x faster, not clearly by the {self.min_gain:.0%} minimum"
        threads = f"{self.threads} thread" + ("s" if self.threads != 1 else "")
        return (
            f"onnxruntime CPU ({threads}): {self.original_ms:.4g} -> {self.optimized_ms:.4g} ms, "
            f"{change} (ratio {self.ratio:.3f}, {self.confidence:.0%} CI "
            f"{self.ratio_low:.3g}-{self.ratio_high:.3g}, A/A {self.control_low:.3g}-"
            f"{self.control_high:.3g}, {self.rounds} rounds)"
        )


def compare_latency(
    original: Any,
    optimized: Any,
    *,
    settings: OrtSettings | None = None,
    max_seconds: float = 10.0,
    min_rounds: int = 15,
    max_rounds: int = 400,
    warmup: int = 3,
    min_gain: float = 0.01,
    confidence: float = 0.95,
    seed: int = 0,
) -> LatencyComparison:
    """Time ``optimized`` against ``original`` (ONNX ModelProtos, serialized bytes or paths) in
    onnxruntime on the CPU, both with ``settings`` (default :class:`OrtSettings()`: onnxruntime's
    default threads, all graph optimizations).

    The models must have the same input names. Raises :class:`~relsat.onnx.OnnxError` naming the
    model when a session cannot be created or run, or when the inputs differ or have dynamic
    shapes, and :class:`~relsat.onnx.runtime.RuntimeSettingsError` for a bad budget.
    """
    _check_budget(max_seconds, min_rounds, max_rounds, warmup, min_gain, confidence)
    settings = settings or OrtSettings()
    start = time.perf_counter()
    run_a = _runner(original, "original", settings)
    run_b = _runner(optimized, "optimized", settings)
    run_c = _runner(original, "original", settings)  # the A/A control
    feed = _draw_inputs(run_b.session, run_a.session, seed, (original, optimized))
    block_s = max_seconds / BLOCKS_PER_BUDGET
    k_a, k_b = _block_size(run_a, feed, warmup, block_s), _block_size(run_b, feed, warmup, block_s)
    k_c = _block_size(run_c, feed, warmup, block_s)
    a_ms: list[float] = []
    b_ms: list[float] = []
    c_ms: list[float] = []
    while len(a_ms) < max_rounds and (
        len(a_ms) < min_rounds or time.perf_counter() - start < max_seconds
    ):
        a1, b1, c1 = run_a(feed, k_a), run_b(feed, k_b), run_c(feed, k_c)
        c2, b2, a2 = run_c(feed, k_c), run_b(feed, k_b), run_a(feed, k_a)
        a_ms.append((a1 + a2) / 2)
        b_ms.append((b1 + b2) / 2)
        c_ms.append((c1 + c2) / 2)
    ratios = sorted(b / a for a, b in zip(a_ms, b_ms, strict=True))
    controls = sorted(c / a for a, c in zip(a_ms, c_ms, strict=True))
    low, high = _median_interval(ratios, confidence)
    c_low, c_high = _median_interval(controls, confidence)
    return LatencyComparison(
        original_ms=statistics.median(a_ms),
        optimized_ms=statistics.median(b_ms),
        ratio=statistics.median(ratios),
        ratio_low=low,
        ratio_high=high,
        rounds=len(ratios),
        verdict=_verdict(low, high, min_gain, c_low, c_high),
        threads=settings.effective_threads,
        confidence=confidence,
        min_gain=min_gain,
        ratios=tuple(ratios),
        control=statistics.median(controls),
        control_low=c_low,
        control_high=c_high,
    )


def _check_budget(
    max_seconds: float,
    min_rounds: int,
    max_rounds: int,
    warmup: int,
    min_gain: float,
    confidence: float,
) -> None:
    problems = [
        (not max_seconds > 0, "max_seconds", max_seconds, "> 0"),
        (min_rounds < 1, "min_rounds", min_rounds, ">= 1"),
        (max_rounds < min_rounds, "max_rounds", max_rounds, f">= min_rounds ({min_rounds})"),
        (warmup < 1, "warmup", warmup, ">= 1"),
        (not 0 <= min_gain < 1, "min_gain", min_gain, "in [0, 1)"),
        (not 0 < confidence < 1, "confidence", confidence, "in (0, 1)"),
    ]
    for bad, option, value, wanted in problems:
        if bad:
            raise RuntimeSettingsError(option, value, wanted)


@dataclass(frozen=True)
class _Runner:
    """One model's session; calling it runs ``k`` times and returns the mean ms per run."""

    session: Any
    label: str
    path: str | None

    def __call__(self, feed: dict[str, np.ndarray], k: int) -> float:
        run = self.session.run
        t = time.perf_counter()
        try:
            for _ in range(k):
                run(None, feed)
        except Exception as exc:  # onnxruntime raises its own unrelated exception classes
            raise self.error(f"onnxruntime cannot run the {self.label} model", exc) from None
        return (time.perf_counter() - t) * 1e3 / k

    def error(self, message: str, exc: BaseException | None = None) -> OnnxError:
        """An :class:`OnnxError` naming this model (its path, or original/optimized)."""
        detail = f": {_first_line(exc)}" if exc is not None else ""
        return OnnxError(message + detail, path=self.path)


def _runner(model: Any, label: str, settings: OrtSettings) -> _Runner:
    path = os.fspath(model) if isinstance(model, str | os.PathLike) else None
    try:
        session = settings.session(model)
    except Exception as exc:  # onnxruntime raises its own unrelated exception classes
        raise OnnxError(
            f"onnxruntime cannot load the {label} model: {_first_line(exc)}", path=path
        ) from None
    return _Runner(session, label, path)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _draw_inputs(
    session: Any, other: Any, seed: int, models: tuple[Any, ...] = ()
) -> dict[str, np.ndarray]:
    """One set of inputs for both sessions, drawn as :func:`relsat.onnx.random_inputs` draws
    them (what an integer input is — ids, a mask — read off ``models``); dims the first session
    leaves dynamic are taken from the second."""
    from relsat.onnx.inputs import DRAWABLE, draw, kinds_of

    inputs = {i.name: i for i in session.get_inputs()}
    others = {i.name: i for i in other.get_inputs()}
    if sorted(inputs) != sorted(others):
        raise OnnxError(
            f"the models' inputs differ: original {sorted(others)} vs optimized {sorted(inputs)}"
        )
    specs = {}
    for name in sorted(inputs):
        meta, dims = inputs[name], others[name].shape
        shape = [d if _static(d) else o for d, o in zip(meta.shape, dims, strict=False)]
        if len(meta.shape) != len(dims) or not all(_static(d) for d in shape):
            raise OnnxError(
                f"input shapes {meta.shape} and {dims} differ or are dynamic", tensor=name
            )
        if meta.type not in DRAWABLE:
            raise OnnxError(f"cannot draw inputs of type {meta.type}", tensor=name)
        specs[name] = (meta.type, shape)
    return draw(specs, kinds_of(*models), seed=seed)


def _static(dim: Any) -> bool:
    return isinstance(dim, int) and dim > 0


def _block_size(run: _Runner, feed: dict[str, np.ndarray], warmup: int, block_s: float) -> int:
    """Runs per block: about ``block_s`` seconds of runs, at least 1 (after ``warmup`` runs)."""
    best = min(run(feed, 1) for _ in range(warmup))
    return max(1, min(10_000, int(block_s * 1e3 / max(best, 1e-6))))


def _median_interval(ordered: list[float], confidence: float) -> tuple[float, float]:
    """Distribution-free interval for the median of sorted samples, from order statistics."""
    n = len(ordered)
    alpha = (1.0 - confidence) / 2
    j, tail = 0, 0.0  # tail = P(Binomial(n, 1/2) <= j - 1)
    while j < n // 2:
        next_tail = tail + math.comb(n, j) / 2**n
        if next_tail > alpha:
            break
        j, tail = j + 1, next_tail
    j = max(j, 1)  # too few rounds for the confidence: the full range
    return ordered[j - 1], ordered[n - j]


def _verdict(
    low: float, high: float, min_gain: float, control_low: float = 1.0, control_high: float = 1.0
) -> str:
    """Faster or slower only beyond ``min_gain`` and beyond what the A/A control shows."""
    if high < min(1.0 - min_gain, control_low):
        return "faster"
    if low > max(1.0, control_high):
        return "slower"
    return "same"
