"""Latency: is the optimized model faster than its original in onnxruntime, beyond noise?

:func:`compare_latency` times both models on the CPU with one
:class:`~relsat.onnx.runtime.OrtSettings` (the configuration relsat's ``ort-cpu`` cost model prices
with) under one :class:`Timing`, and returns a :class:`LatencyComparison` whose ``verdict`` says
``"faster"``, ``"slower"`` or ``"same"`` and whose ``stopped`` says why the timing ended.

Protocol. Both sessions get the same inputs (drawn as :func:`relsat.onnx.random_inputs` draws
them: N(0, 1) floats, token ids in range, padded 0/1 masks, booleans) and ``warmup`` runs each. A
third session of the original is the *A/A control*. Then *rounds*: each round runs original,
optimized, control, control, optimized, original (symmetric, so a linear drift of the machine's
speed hits all alike), each block ``k`` back-to-back runs, ``k`` chosen per model from the warm-up
so a block lasts about ``max_seconds / 200`` (tiny models are averaged over many runs, big ones
run once per block). A round yields each model's mean time per run and their ratio optimized /
original. Reported are the medians over rounds of each model's time and of the ratio, and a
distribution-free confidence interval for the median ratio: the order statistics ``[r_(j),
r_(n+1-j)]`` with the largest ``j`` such that ``P(Binomial(n, 1/2) < j) <= alpha / 2`` (with too
few rounds for the level, the full range).

Sequential stopping. The intervals are looked at after ``min_rounds`` rounds, then at
geometrically spaced round counts (each 1.5 times the one before, up to ``max_rounds``: 15, 23,
35, 53, 80, 120, 180, 270, 400 by default: :meth:`Timing.looks`), and once more when the budget is
spent. Stopping at the first of several looks whose 95 % interval decides would be wrong more
often than 5 % of the time, so every look's intervals are Bonferroni-adjusted: computed at
``alpha = (1 - confidence) / L`` for the ``L`` scheduled looks (the look at the budget takes the
place of the scheduled ones it cuts off, so there are never more than ``L``), and the verdict is
wrong with probability at most ``1 - confidence`` however many looks were made. A look decides:

* ``"faster"`` when the interval's upper end is below ``1 - min_gain`` (default 0.01: at least
  1 % faster) *and* below the lower end of the control's interval (control / original, which only
  noise moves);
* ``"slower"`` when its lower end is above 1 and above the control's upper end;
* ``"same"`` when the interval's lower end is at least ``1 - min_gain``: the optimized model
  is, at that confidence, not ``min_gain`` faster, so no later look could show it faster (a
  futility stop: the question the timing answers is whether to keep the optimized model).

What a reader is told is :func:`explain`'s: one :data:`WORDS` word (``"faster"``, ``"slower"``,
``"too noisy to tell"``, ``"not faster"``) and one line with the numbers behind it — the report,
the before/after table and the optimize-many summary all say that word.

The timing stops at the first look that decides (``stopped == "decided"``); else when at least
``min_rounds`` are done and ``max_seconds`` (default 10 s, warm-up included) have passed
(``"time limit"``), or when ``max_rounds`` are done (``"round limit"``); an undecided timing's
verdict is ``"same"`` (not shown to differ). A model taking seconds per run gets ``min_rounds``
however long they take. The reported interval is the last look's. The control is there because
load on a shared machine comes in bursts, which rounds do not average out: measured here, a
ConvNeXt whose rewrite changes nothing was timed 0.954 (95 % CI 0.943–0.963) inside a busy run
and 1.00 alone.

>>> from relsat.models.example import PATH
>>> c = compare_latency(PATH, PATH, timing=Timing(max_seconds=0.2, min_rounds=7))
>>> c.rounds >= 7 and c.stopped in STOPS
True
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from relsat.errors import SettingsError, check_int, check_number
from relsat.onnx.errors import OnnxError
from relsat.onnx.runtime import OrtSettings, RuntimeSettingsError

__all__ = [
    "STOPS",
    "VERDICTS",
    "WORDS",
    "LatencyComparison",
    "Reason",
    "Timing",
    "compare_latency",
    "explain",
]

#: What :attr:`LatencyComparison.verdict` can be.
VERDICTS = ("faster", "slower", "same")
#: What :attr:`LatencyComparison.word` can be (:func:`explain`): faster or slower beyond noise;
#: too noisy to tell (the interval admits a gain, but the noise hides it); not faster (surely
#: not by the minimum gain).
WORDS = ("faster", "slower", "too noisy to tell", "not faster")
#: What :attr:`LatencyComparison.stopped` can be: a look decided the verdict, the time budget
#: was spent, or ``max_rounds`` were run.
STOPS = ("decided", "time limit", "round limit")

#: Blocks per budget: a block of runs lasts about ``max_seconds / BLOCKS_PER_BUDGET``.
BLOCKS_PER_BUDGET = 200
#: Each scheduled look comes after this many times the rounds of the one before.
LOOK_GROWTH = 1.5


@dataclass(frozen=True)
class Timing:
    """How two models are timed against each other (see :mod:`relsat.onnx.latency`).

    ``max_seconds``: the time budget, warm-up included (> 0); ``min_rounds``: rounds before the
    first look, run whatever the budget (>= 1); ``max_rounds``: rounds at most (>= min_rounds);
    ``warmup``: untimed runs per session (>= 1); ``min_gain``: the smallest relative change that
    counts (in [0, 1)); ``confidence``: the probability that the verdict is right, over all looks
    together (in (0, 1)); ``seed``: of the drawn inputs (>= 0). A bad value raises
    :class:`~relsat.onnx.runtime.RuntimeSettingsError` naming the field.

    >>> Timing(max_seconds=2).looks()
    (15, 23, 35, 53, 80, 120, 180, 270, 400)
    """

    max_seconds: float = 10.0
    min_rounds: int = 15
    max_rounds: int = 400
    warmup: int = 3
    min_gain: float = 0.01
    confidence: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        try:
            check_number("max_seconds", self.max_seconds, 0, strict=True)
            check_int("min_rounds", self.min_rounds, 1)
            check_int("max_rounds", self.max_rounds, self.min_rounds)
            check_int("warmup", self.warmup, 1)
            check_number("min_gain", self.min_gain, 0)
            check_number("confidence", self.confidence, 0, strict=True)
            check_int("seed", self.seed, 0)
        except SettingsError as exc:
            raise RuntimeSettingsError(exc.option, exc.value, exc.wanted) from None
        if self.min_gain >= 1:
            raise RuntimeSettingsError("min_gain", self.min_gain, "a number in [0, 1)")
        if self.confidence >= 1:
            raise RuntimeSettingsError("confidence", self.confidence, "a number in (0, 1)")

    def looks(self) -> tuple[int, ...]:
        """The round counts at which the intervals are looked at (if the budget lasts)."""
        looks = [self.min_rounds]
        while looks[-1] < self.max_rounds:
            looks.append(min(self.max_rounds, math.ceil(looks[-1] * LOOK_GROWTH)))
        return tuple(looks)

    @property
    def alpha(self) -> float:
        """The error probability of each look's intervals (Bonferroni over the looks)."""
        return (1.0 - self.confidence) / len(self.looks())


@dataclass(frozen=True)
class LatencyComparison:
    """Two models timed against each other (see :mod:`relsat.onnx.latency` for the protocol).

    ``original_ms`` / ``optimized_ms``: median time per run; ``ratio``: median over rounds of
    optimized / original, in ``[ratio_low, ratio_high]`` (the last look's interval: the verdict
    is right with probability ``confidence`` over all looks); ``rounds``: the rounds run;
    ``stopped``: why the timing ended (one of :data:`STOPS`); ``ratios``: the per-round ratios.
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
    stopped: str = "time limit"

    @property
    def speedup(self) -> float:
        """How many times faster the optimized model runs, ``1 / ratio`` (below 1: slower)."""
        return 1.0 / self.ratio if self.ratio > 0 else math.inf

    @property
    def decided(self) -> bool:
        """Whether a look decided the verdict (else the budget or the round limit ended the
        timing, and ``"same"`` means "not shown to differ")."""
        return self.stopped == "decided"

    @property
    def word(self) -> str:
        """The verdict in one of :data:`WORDS` (:func:`explain`)."""
        return explain(self).word

    @property
    def why(self) -> str:
        """The verdict and its reason in plain words, e.g. ``too noisy to tell: the two copies
        of the original differed by up to 28 %`` (:func:`explain`)."""
        return explain(self).text

    @classmethod
    def from_rounds(
        cls,
        original_ms: Sequence[float],
        optimized_ms: Sequence[float],
        control_ms: Sequence[float],
        *,
        timing: Timing | None = None,
        threads: int = 1,
        stopped: str | None = None,
    ) -> LatencyComparison:
        """The comparison that rounds with these mean times per run give (one entry per round,
        the A/A control's in ``control_ms``), looked at as :func:`compare_latency` looks at the
        last of its rounds; ``stopped`` (default ``"time limit"``) when that look does not
        decide. :func:`compare_latency` builds its result so; tests build one from synthetic
        samples."""
        timing = timing or Timing()
        a, b, c = list(original_ms), list(optimized_ms), list(control_ms)
        look = _look(a, b, c, timing.alpha, timing.min_gain)
        return cls(
            original_ms=statistics.median(a),
            optimized_ms=statistics.median(b),
            ratio=statistics.median(look.ratios),
            ratio_low=look.low,
            ratio_high=look.high,
            rounds=len(a),
            verdict=look.decision or "same",
            threads=threads,
            confidence=timing.confidence,
            min_gain=timing.min_gain,
            ratios=tuple(look.ratios),
            control=statistics.median(look.controls),
            control_low=look.control_low,
            control_high=look.control_high,
            stopped="decided" if look.decision else stopped or "time limit",
        )

    def report(self) -> str:
        """One line, e.g. ``onnxruntime CPU (2 threads): 12.31 -> 10.02 ms, 1.23x faster
        (ratio 0.814, 95% CI 0.79-0.84, A/A 0.97-1.02, 15 rounds, decided)``."""
        threads = f"{self.threads} thread" + ("s" if self.threads != 1 else "")
        return (
            f"onnxruntime CPU ({threads}): {self.original_ms:.4g} -> {self.optimized_ms:.4g} ms, "
            f"{self.why} (ratio {self.ratio:.3f}, {self.confidence:.0%} CI "
            f"{self.ratio_low:.3g}-{self.ratio_high:.3g}, A/A {self.control_low:.3g}-"
            f"{self.control_high:.3g}, {self.rounds} rounds, {self.stopped})"
        )


def compare_latency(
    original: Any,
    optimized: Any,
    *,
    settings: OrtSettings | None = None,
    timing: Timing | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    given: Mapping[str, np.ndarray] | None = None,
) -> LatencyComparison:
    """Time ``optimized`` against ``original`` (ONNX ModelProtos, serialized bytes or paths) in
    onnxruntime on the CPU, both with ``settings`` (default :class:`OrtSettings()`: onnxruntime's
    default threads, all graph optimizations, no spinning), until a look decides or ``timing``
    (default :class:`Timing()`) runs out.

    The models must have the same input names. ``shapes`` gives inputs' shapes by name (for
    models with dynamic dims); ``given`` input values are fed where their shapes fit, the rest
    drawn (:func:`relsat.onnx.inputs.draw`). Raises :class:`~relsat.onnx.OnnxError` naming the
    model when a session cannot be created or run, or when the inputs differ or have dynamic
    shapes that ``shapes`` does not give.
    """
    settings = settings or OrtSettings()
    timing = timing or Timing()
    start = time.perf_counter()
    run_a = _runner(original, "original", settings)
    run_b = _runner(optimized, "optimized", settings)
    run_c = _runner(original, "original", settings)  # the A/A control
    models = (original, optimized)
    feed = _draw_inputs(run_b.session, run_a.session, timing.seed, models, shapes, given)
    block_s = timing.max_seconds / BLOCKS_PER_BUDGET
    k_a = _block_size(run_a, feed, timing.warmup, block_s)
    k_b = _block_size(run_b, feed, timing.warmup, block_s)
    k_c = _block_size(run_c, feed, timing.warmup, block_s)
    looks = set(timing.looks())
    a_ms: list[float] = []
    b_ms: list[float] = []
    c_ms: list[float] = []
    while True:
        a1, b1, c1 = run_a(feed, k_a), run_b(feed, k_b), run_c(feed, k_c)
        c2, b2, a2 = run_c(feed, k_c), run_b(feed, k_b), run_a(feed, k_a)
        a_ms.append((a1 + a2) / 2)
        b_ms.append((b1 + b2) / 2)
        c_ms.append((c1 + c2) / 2)
        n = len(a_ms)
        spent = time.perf_counter() - start >= timing.max_seconds
        if n < timing.min_rounds or not (n in looks or spent):
            continue
        look = _look(a_ms, b_ms, c_ms, timing.alpha, timing.min_gain)
        if look.decision is not None or spent or n >= timing.max_rounds:
            break
    return LatencyComparison.from_rounds(
        a_ms,
        b_ms,
        c_ms,
        timing=timing,
        threads=settings.effective_threads,
        stopped="round limit" if n >= timing.max_rounds else "time limit",
    )


class Reason(NamedTuple):
    """A timing's verdict as a reader gets it: ``word`` (one of :data:`WORDS`) and ``text``, one
    line in plain words with the numbers behind it."""

    word: str
    text: str


def explain(c: LatencyComparison) -> Reason:
    """Why ``c`` says what it says, in the words every report uses: the one place that decides
    between faster, slower, too noisy to tell and not faster.

    * faster / slower: beyond the minimum gain and beyond the A/A control (``1.63x faster``);
    * not faster: the interval rules out the minimum gain (``not faster by the 1% minimum: at
      most 0.4 % faster``), or the median is slower but not beyond noise;
    * too noisy to tell: the interval admits the gain but does not show it — because the two
      copies of the original differed as much (the A/A control overlaps the interval:
      ``the two copies of the original differed by up to 28 %``), or because the interval
      itself spans the minimum (``between 1.20x faster and 1.05x slower``).

    >>> c = LatencyComparison(1.0, 0.74, 0.741, 0.567, 0.831, 15, "same", 1,
    ...                       control_low=0.795, control_high=1.28)
    >>> explain(c).word
    'too noisy to tell'
    >>> print(explain(c).text)
    too noisy to tell: the two copies of the original differed by up to 28 %
    """
    low, high, gain = c.ratio_low, c.ratio_high, c.min_gain
    if c.verdict == "faster":
        return Reason("faster", f"{c.speedup:.2f}x faster")
    if c.verdict == "slower":
        return Reason("slower", f"{c.ratio:.2f}x slower")
    if low >= 1.0 - gain:  # the gain wanted is ruled out
        if c.ratio > 1.0:
            text = f"not faster: {c.ratio:.2f}x slower by the median, within noise"
        elif low < 1.0:
            text = f"not faster by the {gain:.0%} minimum: at most {100 * (1 - low):.1f} % faster"
        else:
            text = "not faster: the same time within noise"
        return Reason("not faster", text)
    if high < 1.0 - gain:  # faster by the interval, but the A/A control moved as much
        noise = 100 * max(1.0 - c.control_low, c.control_high - 1.0)
        amount = f"{noise:.0f}" if noise >= 10 else f"{noise:.1f}"
        text = f"the two copies of the original differed by up to {amount} %"
    elif high > 1.0:
        text = f"between {1 / low:.2f}x faster and {high:.2f}x slower"
    else:
        text = f"between {1 / low:.2f}x and {1 / high:.3f}x faster, not clearly by {gain:.0%}"
    return Reason("too noisy to tell", f"too noisy to tell: {text}")


@dataclass(frozen=True)
class _Look:
    """One look at the rounds so far: the sorted ratios and controls, their intervals, and the
    decision (None: undecided)."""

    ratios: list[float]
    controls: list[float]
    low: float
    high: float
    control_low: float
    control_high: float
    decision: str | None


def _look(
    a_ms: list[float], b_ms: list[float], c_ms: list[float], alpha: float, min_gain: float
) -> _Look:
    ratios = sorted(b / a for a, b in zip(a_ms, b_ms, strict=True))
    controls = sorted(c / a for a, c in zip(a_ms, c_ms, strict=True))
    low, high = _median_interval(ratios, 1.0 - alpha)
    c_low, c_high = _median_interval(controls, 1.0 - alpha)
    decision = _decision(low, high, min_gain, c_low, c_high)
    return _Look(ratios, controls, low, high, c_low, c_high, decision)


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
    session: Any,
    other: Any,
    seed: int,
    models: tuple[Any, ...] = (),
    shapes: Mapping[str, Sequence[int]] | None = None,
    given: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """One set of inputs for both sessions, drawn as :func:`relsat.onnx.random_inputs` draws
    them (what an integer input is — ids, a mask — read off ``models``; ``given`` values where
    their shapes fit); dims the first session leaves dynamic are taken from the second."""
    from relsat.onnx.inputs import DRAWABLE, draw, given_at, kinds_of

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
        if shapes is not None and name in shapes and len(shapes[name]) == len(meta.shape):
            shape = [int(d) for d in shapes[name]]
        if len(meta.shape) != len(dims) or not all(_static(d) for d in shape):
            raise OnnxError(
                f"input shapes {meta.shape} and {dims} differ or are dynamic", tensor=name
            )
        if meta.type not in DRAWABLE and given_at(given, name, shape) is None:
            raise OnnxError(f"cannot draw inputs of type {meta.type}", tensor=name)
        specs[name] = (meta.type, shape)
    return draw(specs, kinds_of(*models), seed=seed, given=given)


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


def _decision(
    low: float, high: float, min_gain: float, control_low: float = 1.0, control_high: float = 1.0
) -> str | None:
    """What an interval ``[low, high]`` of the ratio decides (None: nothing yet): faster or
    slower only beyond ``min_gain`` and beyond what the A/A control shows; the same when it
    shows the optimized model is not ``min_gain`` faster."""
    if high < min(1.0 - min_gain, control_low):
        return "faster"
    if low > max(1.0, control_high):
        return "slower"
    if 1.0 - min_gain <= low:  # not min_gain faster: what "faster" would need cannot come
        return "same"
    return None
