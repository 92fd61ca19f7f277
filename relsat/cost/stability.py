"""When a measured price holds: the median of repeats, their spread, the machine's load, re-checks.

A unit is timed in *attempts*. One attempt runs ``passes`` round-robin passes over a batch of
units (:class:`~relsat.cost.ort.OrtTiming`) and gives each unit one *repeat* per pass (the median
of that pass's runs). The price is the **median of the repeats**; its **spread** is their
interquartile range over that median. Each attempt is watched by a :class:`LoadProbe`
(:class:`CpuLoad` by default): the share of the machine's CPU time other processes took from the
attempt's start to its end.

:func:`settle` times a batch until each unit is **sound** (:meth:`Stability.sound`): repeats of
quiet attempts only (load at most ``max_load``) whose spread is at most ``max_spread``. A unit
that is not is timed again (only it, not the batch), up to ``attempts`` attempts. The repeats
of its quiet attempts are pooled (more repeats, a steadier median); where the pool is not sound
but one quiet attempt is on its own (a burst spoiled the others), that attempt gives the price.
A busy attempt's repeats are set aside and used only when no attempt was quiet. What is left
after the last attempt is stored as measured, with its spread and load: a *doubtful* price,
re-checked on its next use. A re-check is one attempt: on a machine that stays busy a doubtful
price costs one more timing per run that uses it, not ``attempts``.

:func:`recheck` decides between a stored price and its re-check: a sound re-check that
disagrees (by more than ``agree``) replaces it, one that agrees confirms it (the price stays
put, so a run and the next price the same units the same way: a verdict does not flip on a
re-check's noise); a doubtful re-check never displaces a sound price, and between two doubtful
ones the lower stands (load only ever adds time).

>>> s = Stability()
>>> s.sound(0.02, 0.05), s.sound(0.4, 0.0), s.sound(None, 0.0), s.sound(0.02, 0.9)
(True, False, False, False)
>>> recheck(Price(0.025), Price(0.006, 0.03, 0.0), s).ms  # an outlier replaced
0.006
>>> recheck(Price(1.02), Price(1.0, 0.03, 0.0, attempts=1), s)  # confirmed: it stays put
Price(ms=1.02, spread=0.03, load=0.0, attempts=1)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, TypeVar

import numpy as np

__all__ = ["CpuLoad", "LoadProbe", "Price", "Stability", "recheck", "relative_iqr", "settle"]

U = TypeVar("U", bound=Hashable)


@dataclass(frozen=True)
class Stability:
    """When a price is sound, and what is done until it is.

    ``max_spread`` (0.15): the widest interquartile range of the repeats, over their median,
    of a sound price. On a quiet 2-core machine five repeats of small units spread 0.5-12 %
    (the multi-threaded conv and matmul widest); a burst over some of the repeats, like the
    fused rotary once priced 25 µs whose re-checks timed 4-11 µs, spreads far wider. The IQR,
    not the range: one repeat of five hit by a burst does not make a price doubtful (the
    median already ignores it), two or more do.

    ``max_load`` (0.25): the largest share of the machine's CPU time other processes may take
    while a sound price is timed (:class:`CpuLoad`). A quarter: on a 2-core machine another
    process's half core; a burst of a single-threaded neighbour is below it on a big machine,
    and a steady neighbour that inflates every repeat alike (a narrow spread, a wrong price:
    the encoder priced 1.37 ms under load, 1.08 ms quiet) above it on a small one.

    ``attempts`` (3): attempts per unit at most before a price is stored as doubtful: a burst
    lasts seconds, an attempt over a batch about as long, so a third usually runs clear of it;
    under steady load more would only cost time (the price is re-checked on next use anyway).

    ``agree`` (0.10): a sound re-check within this share of the stored price confirms it (twice
    the rewrite margin of ``ort-cpu`` prices, about what two sound timings of a multi-threaded
    unit differ by); further off, it replaces it.
    """

    attempts: int = 3
    max_spread: float = 0.15
    max_load: float = 0.25
    agree: float = 0.10

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("need attempts >= 1")
        if min(self.max_spread, self.max_load, self.agree) < 0:
            raise ValueError("max_spread, max_load and agree must be >= 0")

    def sound(self, spread: float | None, load: float | None) -> bool:
        """Whether a price of this spread, timed under this load, holds: its spread known and
        at most ``max_spread``, its load at most ``max_load`` (an unknown load, where no probe
        exists, does not count against it)."""
        return (
            spread is not None
            and spread <= self.max_spread
            and (load is None or load <= self.max_load)
        )


@dataclass(frozen=True)
class Price:
    """A unit's price (ms) with the ``spread`` of its repeats and the ``load`` it was timed
    under (None: unknown, as in a table written before they were stored); ``attempts``: how
    many attempts timed it (0: read from a table)."""

    ms: float
    spread: float | None = None
    load: float | None = None
    attempts: int = 0

    def sound(self, stability: Stability) -> bool:
        """:meth:`Stability.sound` of this price."""
        return stability.sound(self.spread, self.load)


def relative_iqr(repeats: Sequence[float]) -> float:
    """The interquartile range of ``repeats`` over their median (0 for a zero median).

    >>> relative_iqr([1.0, 1.0, 1.1, 1.0, 0.9])
    0.0
    >>> round(relative_iqr([0.9, 0.2, 0.8]), 3)
    0.438
    """
    q1, q2, q3 = np.percentile(np.asarray(repeats, dtype=np.float64), [25, 50, 75])
    return float((q3 - q1) / q2) if q2 > 0 else 0.0


class LoadProbe(Protocol):
    """What :func:`settle` watches an attempt with: :meth:`start` before, :meth:`share` after."""

    def start(self) -> object:
        """A reading to measure from."""

    def share(self, since: object) -> float | None:
        """Other processes' share (0-1) of the machine's CPU time since ``since``; None when
        it cannot tell."""


@dataclass
class CpuLoad:
    """Other processes' share of this machine's CPU time over a window: 0 quiet, 1 every core
    busy with someone else's work.

    Why not ``os.getloadavg()``: the load average is a one-minute exponential average of
    runnable tasks. It lags a burst lasting the few seconds of one attempt, keeps reporting it
    a minute after it ended, and counts the measurement's own threads (timing units on all
    cores of a 2-core machine reads as "load 2" with nothing else running). The kernel's CPU
    time counters (``/proc/stat``), read before and after, say what happened during the
    attempt itself: the busy time of the cores this process may run on, less this process's
    own CPU time (:func:`time.process_time`, exact), over their total. Steal time counts as
    busy: on a virtual machine it is a neighbour's load. The counters tick every 10 ms, so a
    window shorter than ``min_window`` seconds is waited out before the second reading (a
    tiny batch measures in milliseconds; a 100 ms window reads within a few percent).

    Where ``/proc/stat`` is absent (macOS) the load average is the fallback, less the
    measurement's ``threads``, over the core count; where neither exists, None.
    """

    threads: int = 1
    min_window: float = 0.1
    stat: str = "/proc/stat"
    _cpus: frozenset[str] | None = field(default=None, init=False, repr=False)

    def start(self) -> object:
        return _Reading(time.monotonic(), self._jiffies(), time.process_time(), _loadavg())

    def share(self, since: object) -> float | None:
        assert isinstance(since, _Reading)
        t0, jiffies0, own0, avg0 = since
        wait = self.min_window - (time.monotonic() - t0)
        if jiffies0 is not None and wait > 0:
            time.sleep(wait)
        jiffies1, own1 = self._jiffies(), time.process_time()
        if jiffies0 is not None and jiffies1 is not None:
            busy = jiffies1[0] - jiffies0[0]
            total = jiffies1[1] - jiffies0[1]
            if total <= 0:
                return None
            own = (own1 - own0) * _CLOCK_TICKS
            return float(min(max((busy - own) / total, 0.0), 1.0))
        avg1 = _loadavg()
        if avg0 is None or avg1 is None:
            return None
        cores = _cores()
        return float(min(max(((avg0 + avg1) / 2 - self.threads) / cores, 0.0), 1.0))

    def _jiffies(self) -> tuple[int, int] | None:
        """(busy, total) clock ticks of the cores this process may run on (all, where the
        per-core lines or the affinity are unknown)."""
        try:
            with open(self.stat, encoding="ascii") as f:
                lines = [line.split() for line in f if line.startswith("cpu")]
        except OSError:
            return None
        if self._cpus is None:
            try:
                self._cpus = frozenset(f"cpu{i}" for i in os.sched_getaffinity(0))
            except AttributeError:
                self._cpus = frozenset()
        mine = [w for w in lines if w[0] in self._cpus] or [w for w in lines if w[0] == "cpu"]
        busy = total = 0
        for words in mine:
            # user nice system idle iowait irq softirq steal (guest time is inside user/nice)
            ticks = [int(x) for x in words[1:9]]
            total += sum(ticks)
            busy += sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)
        return busy, total


class _Reading(NamedTuple):
    """One :class:`CpuLoad` reading: when, the cores' (busy, total) ticks, this process's CPU
    seconds, the one-minute load average."""

    at: float
    jiffies: tuple[int, int] | None
    own: float
    loadavg: float | None


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def settle(
    units: Sequence[U],
    time_pass: Callable[[U, bool], float],
    *,
    passes: int,
    stability: Stability,
    probe: LoadProbe,
    on_error: Callable[[U, Exception], None],
    attempts: int | None = None,
) -> dict[U, Price]:
    """The price of each of ``units`` (the module docstring): ``time_pass(unit, first)`` times
    one pass of one unit and returns its repeat (ms; ``first``: the unit's first pass, which
    warms it up). A unit whose pass raises is handed to ``on_error`` and left out of the
    result. Prices are of the repeats as timed (the caller subtracts fixed overheads).
    ``attempts``: at most that many (default ``stability.attempts``; a re-check takes one)."""
    quiet: dict[U, list[tuple[float | None, list[float]]]] = {u: [] for u in units}
    busy: dict[U, tuple[float, list[float]]] = {}  # the least loaded busy attempt's repeats
    tries: dict[U, int] = {u: 0 for u in units}
    prices: dict[U, Price] = {}
    pending = list(units)
    for attempt in range(attempts if attempts is not None else stability.attempts):
        if not pending:
            break
        since = probe.start()
        got: dict[U, list[float]] = {u: [] for u in pending}
        for p in range(passes):
            for u in list(got):
                try:
                    got[u].append(time_pass(u, attempt == 0 and p == 0))
                except Exception as exc:  # one unit that cannot run: its caller falls back
                    on_error(u, exc)
                    del got[u]
        load = probe.share(since)
        pending = []
        for u, repeats in got.items():
            tries[u] += 1
            if load is not None and load > stability.max_load:
                if u not in busy or load < busy[u][0]:
                    busy[u] = (load, repeats)
            else:
                quiet[u].append((load, repeats))
            prices[u] = _price(quiet[u], busy.get(u), tries[u], stability)
            if not prices[u].sound(stability):
                pending.append(u)
    return prices


def _price(
    quiet: list[tuple[float | None, list[float]]],
    busy: tuple[float, list[float]] | None,
    attempts: int,
    stability: Stability,
) -> Price:
    """The price of a unit's repeats: of its quiet attempts pooled, or the one of them sound on
    its own where the pool is not; without a quiet attempt, of its least loaded one."""
    if not quiet:
        assert busy is not None
        return _of(busy[1], busy[0], attempts)
    loads = [load for load, _ in quiet if load is not None]
    pooled = _of([x for _, xs in quiet for x in xs], max(loads) if loads else None, attempts)
    if pooled.sound(stability) or len(quiet) == 1:
        return pooled
    load, repeats = min(quiet, key=lambda a: relative_iqr(a[1]))
    alone = _of(repeats, load, attempts)
    return alone if alone.sound(stability) else pooled


def _of(repeats: list[float], load: float | None, attempts: int) -> Price:
    return Price(float(np.median(repeats)), relative_iqr(repeats), load, attempts)


def recheck(stored: Price, check: Price, stability: Stability) -> Price:
    """What stands after ``check`` re-timed the ``stored`` price (the module docstring): the
    check where it is sound and disagrees; the stored price, confirmed with the check's spread
    and load, where it is sound and agrees; the stored price where only it is sound; the lower
    of the two where neither is."""
    if check.sound(stability):
        if abs(stored.ms - check.ms) <= stability.agree * check.ms:
            return Price(stored.ms, check.spread, check.load, check.attempts)
        return check
    if stored.sound(stability) or stored.ms <= check.ms:
        return stored
    return check
