"""Latency: is the optimized model faster than its original in onnxruntime, beyond noise?

:func:`compare_latency` times both models on the CPU with one
:class:`~relsat.onnx.runtime.OrtSettings` (the configuration relsat's ``ort-cpu`` cost model prices
with) under one :class:`Timing`, and returns a :class:`LatencyComparison` whose ``verdict`` says
``"faster"``, ``"slower"`` or ``"same"`` and whose ``stopped`` says why the timing ended.

Protocol. Both sessions get the same inputs (drawn as :func:`relsat.onnx.random_inputs` draws
them: N(0, 1) floats, token ids in range, padded 0/1 masks, booleans) and ``warmup`` runs each. A
third session of the original is the *A/A control*. Then *rounds*: each round runs the three
sessions in an order drawn uniformly from the six (seeded by ``Timing.seed``) and then in the
reverse order, ``X Y Z Z Y X`` (so a linear drift of the machine's speed within a round hits all
alike), each block ``k`` back-to-back runs, ``k`` chosen per model from the warm-up so a block
lasts about ``max_seconds / 200`` (tiny models are averaged over many runs, big ones run once per
block). A round yields each session's mean time per run. The order is drawn because a fixed one
is biased: a session always in the same place runs at its own speed plus its place's (the middle
one always runs twice back to back), and a burst of load that keeps a rhythm lands on the same
place round after round. Measured here under the fixed order used before (original, optimized,
control, control, optimized, original), an identical ConvNeXt rewrite was timed 0.954 (95 % CI
0.943-0.963) inside a busy run and 1.00 alone, and over 63 A/A trials the middle session ran
1.8 % faster than the first on average. With the places drawn, two sessions of the same model are
exchangeable within every round, whatever the load does: the log ratio of their times is as
likely to be ``+d`` as ``-d``.

The test. Per round the log ratios ``optimized / original`` and ``optimized / control`` (two
copies of the original: a session's own speed — where its memory landed, which session was
made first — is not the model's). For each, the Hodges-Lehmann estimate (the median of the Walsh
averages ``(d_i + d_j) / 2``) and the Wilcoxon signed-rank confidence interval of the shift: the
``k``-th smallest and largest Walsh average, ``k`` from the exact signed-rank distribution
(:func:`relsat.onnx.intervals.shift_interval`). The drawn order is what makes this exact: if the
optimized model takes ``theta`` times as long as the original in whatever place it lands, the log
ratios minus ``log theta`` are symmetric about 0 and their signs independent from round to round,
and that is all the interval needs — bursts of load, drift and the places' own effects only widen
it. ``ratio`` is the estimate against the original
(``ratio_low``-``ratio_high`` its interval), ``against_control`` against the control; ``control``
(control / original) shows what noise alone does.

Sequential stopping. The intervals are looked at after ``min_rounds`` rounds, then at
geometrically spaced round counts (each 1.5 times the one before, up to ``max_rounds``: 15, 23,
35, 53, 80, 120, 180, 270, 400 by default: :meth:`Timing.looks`), and once more when the budget is
spent. Stopping at the first of several looks whose 95 % interval decides would be wrong more
often than 5 % of the time, so the looks' intervals are Bonferroni-adjusted: each scheduled look's
computed at ``alpha = (1 - confidence) / L`` for the ``L`` scheduled looks, and the look at the
budget (or the round limit) — the last — takes the place of the scheduled ones it cuts off and
their shares too (:meth:`Timing.alpha_at`: ``alpha`` times one plus the looks cut off), so that
the shares of the looks made never sum to more than ``1 - confidence`` and the verdict is wrong
with probability at most that, however many looks were made. (Under load a timing often ends at
the budget after 15 to 30 rounds, one or two looks in: the last look's share is most of the
error budget then, not a ninth of it.) A look decides:

* ``"faster"`` when both intervals, against the original and against the control, lie below
  ``1 - min_gain`` (default 0.01: at least 1 % faster). Each is wrong with probability at most
  half the look's level, and both must be, so requiring both costs no level (an
  intersection-union test); what it buys is robustness to a session that is fast or slow for
  reasons of its own: the optimized session must beat two copies of the original, made before
  and after it (measured here over 63 A/A timings, the session made first ran 0.5-0.7 % slower
  than the two made after it on average, within two standard errors: most of the minimum gain);
* ``"slower"`` when both lie above 1;
* ``"same"`` when either interval's lower end is at least ``1 - min_gain``: the optimized model
  is, at that confidence, not ``min_gain`` faster than that copy, so no later look could show it
  faster (a futility stop: the question the timing answers is whether to keep the optimized
  model).

What a reader is told is :func:`explain`'s: one :data:`WORDS` word (``"faster"``, ``"slower"``,
``"too noisy to tell"``, ``"not faster"``) and one line with the numbers behind it — the report,
the before/after table and the optimize-many summary all say that word.

The timing stops at the first look that decides (``stopped == "decided"``); else when at least
``min_rounds`` are done and ``max_seconds`` (default 10 s, warm-up included) have passed
(``"time limit"``), or when ``max_rounds`` are done (``"round limit"``); an undecided timing's
verdict is ``"same"`` (not shown to differ). A model taking seconds per run gets ``min_rounds``
however long they take. The reported intervals are the last look's. Measured on a shared
two-core machine with 0-2 busy loops beside, replaying recorded rounds (bench/verdicts.py,
bench/history/timing.md): this rule decided 32 of 45 timings of real gains (0.6-0.95x) where the
one it replaced (the ratio's median interval wholly below the A/A control's, under the fixed
order) decided 14, and neither called a model faster or slower than itself in 63 timings.

>>> from relsat.models.example import PATH
>>> c = compare_latency(PATH, PATH, timing=Timing(max_seconds=0.2, min_rounds=7))
>>> c.rounds >= 7 and c.stopped in STOPS
True
"""

from __future__ import annotations

import math
import os
import random
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from relsat.errors import SettingsError, check_int, check_number
from relsat.onnx.errors import OnnxError
from relsat.onnx.intervals import Shift, shift_interval
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
#: The orders a round may run (original, optimized, control) = (0, 1, 2) in: all six, so that
#: each session takes each place equally often in expectation.
ORDERS = ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))


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
        """The error probability of each scheduled look's intervals (Bonferroni over the
        looks)."""
        return (1.0 - self.confidence) / len(self.looks())

    def alpha_at(self, rounds: int, last: bool = False) -> float:
        """The error probability of the intervals of the look after ``rounds`` rounds: ``alpha``;
        for the timing's ``last`` look (the budget or the round limit ends it) also the share of
        each scheduled look it cuts off, so that the looks' shares still sum to at most
        ``1 - confidence``.

        >>> t = Timing()
        >>> t.alpha_at(15) == t.alpha and t.alpha_at(30, last=True) == 7 * t.alpha
        True
        """
        if not last:
            return self.alpha
        made = sum(1 for n in self.looks() if n < rounds)
        return self.alpha * (len(self.looks()) - made)


@dataclass(frozen=True)
class LatencyComparison:
    """Two models timed against each other (see :mod:`relsat.onnx.latency` for the protocol).

    ``original_ms`` / ``optimized_ms``: median time per run; ``ratio``: optimized / original
    (the Hodges-Lehmann estimate over rounds), in ``[ratio_low, ratio_high]`` (the last look's
    signed-rank interval: the verdict is right with probability ``confidence`` over all looks);
    ``against_control`` in ``[against_control_low, against_control_high]``: optimized / the A/A
    control, likewise (NaN when built without one); ``control`` in ``[control_low,
    control_high]``: control / original, what noise alone does; ``rounds``: the rounds run;
    ``stopped``: why the timing ended (one of :data:`STOPS`); ``ratios``: the per-round ratios
    optimized / original, sorted.
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
    against_control: float = math.nan
    against_control_low: float = math.nan
    against_control_high: float = math.nan

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
        last: bool = True,
    ) -> LatencyComparison:
        """The comparison that rounds with these mean times per run give (one entry per round,
        the A/A control's in ``control_ms``), looked at as :func:`compare_latency` looks at the
        last of its rounds — at :meth:`Timing.alpha_at` (``last``: the look the budget or the
        round limit forced; else a scheduled look that decided); ``stopped`` (default ``"time
        limit"``) when that look does not decide. :func:`compare_latency` builds its result so;
        tests build one from synthetic samples."""
        timing = timing or Timing()
        a, b, c = list(original_ms), list(optimized_ms), list(control_ms)
        look = _look(a, b, c, timing.alpha_at(len(a), last), timing.min_gain)
        return cls(
            original_ms=statistics.median(a),
            optimized_ms=statistics.median(b),
            ratio=look.ratio.estimate,
            ratio_low=look.ratio.low,
            ratio_high=look.ratio.high,
            rounds=len(a),
            verdict=look.decision or "same",
            threads=threads,
            confidence=timing.confidence,
            min_gain=timing.min_gain,
            ratios=tuple(look.ratios),
            control=look.control.estimate,
            control_low=look.control.low,
            control_high=look.control.high,
            stopped="decided" if look.decision else stopped or "time limit",
            against_control=look.against.estimate,
            against_control_low=look.against.low,
            against_control_high=look.against.high,
        )

    def report(self) -> str:
        """One line, e.g. ``onnxruntime CPU (2 threads): 12.31 -> 10.02 ms, 1.23x faster
        (ratio 0.814, 95% CI 0.79-0.84, vs the A/A copy 0.78-0.85, A/A 0.97-1.02, 15 rounds,
        decided)``: the interval of optimized / original, of optimized / control, and of
        control / original (what noise alone does)."""
        threads = f"{self.threads} thread" + ("s" if self.threads != 1 else "")
        against = ""
        if not math.isnan(self.against_control_low):
            against = (
                f", vs the A/A copy {self.against_control_low:.3g}-{self.against_control_high:.3g}"
            )
        return (
            f"onnxruntime CPU ({threads}): {self.original_ms:.4g} -> {self.optimized_ms:.4g} ms, "
            f"{self.why} (ratio {self.ratio:.3f}, {self.confidence:.0%} CI "
            f"{self.ratio_low:.3g}-{self.ratio_high:.3g}{against}, A/A {self.control_low:.3g}-"
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
    blocks = ((run_a, k_a), (run_b, k_b), (run_c, k_c))
    orders = random.Random(timing.seed)  # the rounds' orders: drawn, so no session is favoured
    while True:
        order = orders.choice(ORDERS)
        ms = [0.0, 0.0, 0.0]
        for i in (*order, *reversed(order)):
            run, k = blocks[i]
            ms[i] += run(feed, k) / 2
        a_ms.append(ms[0])
        b_ms.append(ms[1])
        c_ms.append(ms[2])
        n = len(a_ms)
        spent = time.perf_counter() - start >= timing.max_seconds
        if n < timing.min_rounds or not (n in looks or spent):
            continue
        last = spent or n >= timing.max_rounds
        look = _look(a_ms, b_ms, c_ms, timing.alpha_at(n, last), timing.min_gain)
        if look.decision is not None or last:
            break
    return LatencyComparison.from_rounds(
        a_ms,
        b_ms,
        c_ms,
        timing=timing,
        threads=settings.effective_threads,
        stopped="round limit" if n >= timing.max_rounds else "time limit",
        last=last,
    )


class Reason(NamedTuple):
    """A timing's verdict as a reader gets it: ``word`` (one of :data:`WORDS`) and ``text``, one
    line in plain words with the numbers behind it."""

    word: str
    text: str


def explain(c: LatencyComparison) -> Reason:
    """Why ``c`` says what it says, in the words every report uses: the one place that decides
    between faster, slower, too noisy to tell and not faster.

    * faster / slower: beyond the minimum gain against both copies of the original (``1.63x
      faster``);
    * not faster: an interval — against the original or against its A/A copy — rules out the
      minimum gain (``not faster by the 1% minimum: at most 0.4 % faster``, ``not faster than
      the A/A copy: the same time within noise``), or the median is slower but not beyond noise;
    * too noisy to tell: the intervals admit the gain but do not show it — because the
      optimized model beat one copy of the original clearly and the other not (the two copies
      differed: ``the two copies of the original differed by up to 28 %``, from the A/A
      interval), or because the interval itself spans the minimum (``between 1.20x faster and
      1.05x slower``).

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
    # a comparison built by hand may lack the interval against the control (NaN: never binds)
    copies = ((low, c.ratio, ""), (c.against_control_low, c.against_control, " than the A/A copy"))
    ruled_out = [copy for copy in copies if copy[0] >= 1.0 - gain]
    if ruled_out:  # the gain wanted is ruled out against one copy of the original
        lo, mid, than = ruled_out[0]
        if mid > 1.0:
            text = f"not faster{than}: {mid:.2f}x slower by the median, within noise"
        elif lo < 1.0:
            text = (
                f"not faster{than} by the {gain:.0%} minimum: at most {100 * (1 - lo):.1f} % faster"
            )
        else:
            text = f"not faster{than}: the same time within noise"
        return Reason("not faster", text)
    if high < 1.0 - gain or c.against_control_high < 1.0 - gain:
        # faster than one copy of the original beyond noise, not than the other
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
    """One look at the rounds so far: the sorted per-round ratios optimized / original, the
    shift estimates and intervals of optimized against the original, of optimized against the
    control and of the control against the original (as ratios, not logs), and the decision
    (None: undecided)."""

    ratios: list[float]
    ratio: Shift
    against: Shift
    control: Shift
    decision: str | None


def _look(
    a_ms: list[float], b_ms: list[float], c_ms: list[float], alpha: float, min_gain: float
) -> _Look:
    a, b, c = np.log(a_ms), np.log(b_ms), np.log(c_ms)
    ratio = shift_interval(b - a, 1.0 - alpha)
    against = shift_interval(b - c, 1.0 - alpha)
    control = shift_interval(c - a, 1.0 - alpha)
    decision = _decision((ratio.low, ratio.high), (against.low, against.high), min_gain)
    ratios = sorted(y / x for x, y in zip(a_ms, b_ms, strict=True))
    return _Look(ratios, ratio, against, control, decision)


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


def _decision(
    ratio: tuple[float, float], against: tuple[float, float], min_gain: float
) -> str | None:
    """What the intervals of optimized / original (``ratio``) and of optimized / control
    (``against``) decide (None: nothing yet): faster when both lie below ``1 - min_gain``,
    slower when both lie above 1, the same when either shows the optimized model is not
    ``min_gain`` faster than that copy of the original (no later look could show "faster")."""
    intervals = (ratio, against)
    if all(high < 1.0 - min_gain for _, high in intervals):
        return "faster"
    if all(low > 1.0 for low, _ in intervals):
        return "slower"
    if any(low >= 1.0 - min_gain for low, _ in intervals):
        return "same"
    return None
