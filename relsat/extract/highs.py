"""One HiGHS solve of an extraction model, anytime: the warm start goes in, every acyclic
improving solution comes out through ``offer`` as soon as HiGHS finds it, a cyclic one is cut
off (lazy cycle cuts, then the solve resumes), and limits of time and work end it with a status,
never an exception."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import highspy
import numpy as np

from relsat.errors import ExtractionError
from relsat.extract.model import (
    Order,
    _build,
    _Cuts,
    _read_choice,
    _sccs,
    _short_cycles,
    _start_vector,
)
from relsat.extract.problem import Problem, Status, _cycles

Choice = dict[int, int]
#: At most this many nonzeros of static short-cycle cuts go into a model.
STATIC_CUT_NONZEROS = 500_000


@dataclass(frozen=True)
class SolverLimits:
    """What one solve may spend: ``deadline`` (a ``time.perf_counter()`` value), ``runs``
    (HiGHS runs: 1 + rounds of lazy cuts), ``nodes`` (branch-and-bound nodes per run),
    ``stall_nodes`` and ``stall_seconds`` (nodes or seconds without a better solution);
    ``mip_gap`` the relative gap to stop at, ``threads`` HiGHS's threads."""

    deadline: float
    runs: int | None = None
    nodes: int | None = None
    stall_nodes: int | None = None
    stall_seconds: float | None = None
    mip_gap: float = 0.0
    threads: int | None = None
    log: bool = False


@dataclass(frozen=True)
class Run:
    """The outcome of :func:`run_model`: ``bound`` is HiGHS's dual bound on this model's optimum
    (0 when none was proven), ``iterations`` the HiGHS runs (1 + rounds of cuts)."""

    status: Status
    bound: float
    iterations: int
    cuts: int
    abandoned: bool = False  # a HiGHS run was left running past the deadline


def run_model(
    p: Problem,
    limits: SolverLimits,
    *,
    incumbent: Callable[[], Choice | None],
    offer: Callable[[Choice], object],
    order: Order = None,
    cyclic: bool = True,
    cycle_len: int = 6,
) -> Run:
    """Solve the extraction ILP of ``p`` (TENSAT's model, see :func:`~relsat.extract.model._build`)
    within ``limits``. ``incumbent()`` gives the current best choice of ``p`` (the warm start of
    each run); ``offer(choice)`` receives every acyclic solution HiGHS finds. Without ``order``
    and with ``cyclic``, acyclicity is enforced by cuts: static cuts for the class cycles of at
    most ``cycle_len`` classes, and lazily for every cycle of a cyclic incumbent.

    (Long: HiGHS's callback and the re-solve loop share the run's state — pending cuts, the
    deadline, the stall clock — as closures over one HiGHS instance.)
    """
    lazy = order is None and cyclic
    lp, _, _ = _build(p, order, at_most_one=lazy)
    h = silent_highs()
    h.setOptionValue("output_flag", limits.log)
    h.setOptionValue("log_to_console", limits.log)
    h.setOptionValue("mip_rel_gap", float(limits.mip_gap))
    h.setOptionValue("mip_abs_gap", 1e-9)
    if limits.threads is not None:
        h.setOptionValue("threads", int(limits.threads))
    if limits.nodes is not None:
        h.setOptionValue("mip_max_nodes", int(limits.nodes))
    if limits.stall_nodes is not None:
        h.setOptionValue("mip_max_stall_nodes", int(limits.stall_nodes))
    h.passModel(lp)
    cut_gen = _Cuts(p)
    if lazy and cycle_len > 0:  # static cuts: a tenth of the time, a bounded size
        soon = time.perf_counter() + 0.1 * max(limits.deadline - time.perf_counter(), 0.0)
        cycles = _short_cycles(p, cycle_len, 50_000, deadline=soon)
        _add_rows(h, cut_gen.rows(cycles, budget=STATIC_CUT_NONZEROS))
    pending: list[list[int]] = []
    CB = highspy.cb.HighsCallbackType
    begun = [time.perf_counter()]
    last: list[float | None] = [None]  # when the last solution of this run came

    def on_solution(kind: Any, message: str, data_out: Any, data_in: Any, user: Any) -> None:
        # HiGHS keeps the flag of the last callback that set it, across runs: a run after a cut
        # (or a search round after one that stalled) was interrupted at its first callback, its
        # status read as a work limit. Every callback says again whether to stop.
        data_in.user_interrupt = False
        if kind in (CB.kCallbackSimplexInterrupt, CB.kCallbackIpmInterrupt):
            # HiGHS's own time limit is not checked inside every LP solve of the branch and
            # bound (a GPT-2 e-graph's root LP ran minutes past it): the deadline is held here.
            data_in.user_interrupt = overdue()
            return
        if kind == CB.kCallbackMipInterrupt:
            if overdue():
                data_in.user_interrupt = True
                return
            # A stall counts from the run's first solution, and lasts at least as long as the
            # run took to reach its last one (a slow machine gets proportionally more time).
            stall, at = limits.stall_seconds, last[0]
            if at is not None and stall is not None:
                stalled[0] = time.perf_counter() - at > max(stall, at - begun[0])
                data_in.user_interrupt = stalled[0]
            return
        last[0] = time.perf_counter()
        try:
            choice = _read_choice(p, np.asarray(data_out.mip_solution))
        except ExtractionError:  # not a complete term graph (tolerances): wait for the next
            return
        comps = _sccs(p, choice) if lazy else []
        if comps:  # a cyclic incumbent would prune with an invalid bound: stop and cut it off
            pending.extend(comps)
            pending.extend(_cycles(p, choice, first_only=False))
            data_in.user_interrupt = True
        else:
            offer(choice)

    stalled, timed_out = [False], [False]

    def overdue() -> bool:
        timed_out[0] = timed_out[0] or time.perf_counter() > limits.deadline
        return timed_out[0]

    h.setCallback(on_solution, None)
    for kind in (
        CB.kCallbackMipImprovingSolution,
        CB.kCallbackMipInterrupt,
        CB.kCallbackSimplexInterrupt,
        CB.kCallbackIpmInterrupt,
    ):
        h.startCallback(kind)
    MS = highspy.HighsModelStatus
    bound = 0.0  # costs are >= 0
    iterations = cuts = 0
    status: Status = "time_limit"
    abandoned = False
    while (left := limits.deadline - time.perf_counter()) > 0:
        h.setOptionValue("time_limit", float(HIGHS_TIME_SHARE * left))
        best = incumbent()
        if best is not None:
            x0 = _start_vector(p, best, order)
            h.setSolution(len(x0), np.arange(len(x0), dtype=np.int32), x0)
        pending.clear()
        begun[0], last[0], stalled[0], timed_out[0] = time.perf_counter(), None, False, False
        if not _run_within(h, limits.deadline + ABANDON_AFTER):
            # HiGHS ran on past the deadline where no interrupt reaches it: it is left to
            # finish alone (a daemon thread; ``h`` is not touched again) and the incumbent
            # stands.
            status, abandoned = "time_limit", True
            break
        iterations += 1
        ms = h.getModelStatus()
        info = h.getInfo()
        if ms == MS.kInfeasible:
            raise ExtractionError(
                "no acyclic extraction exists", solver_status=h.modelStatusToString(ms)
            )
        if ms not in (MS.kOptimal, MS.kTimeLimit, MS.kInterrupt, MS.kSolutionLimit):
            raise ExtractionError("solver failed", solver_status=h.modelStatusToString(ms))
        if ms != MS.kInterrupt and np.isfinite(info.mip_dual_bound):
            bound = max(bound, float(info.mip_dual_bound))
        if info.primal_solution_status == 2:  # the final solution, in case no callback saw it
            try:
                choice = _read_choice(p, np.asarray(h.getSolution().col_value))
            except ExtractionError:
                choice = {}
            if choice and lazy and (comps := _sccs(p, choice)):
                pending.extend(comps)
                pending.extend(_cycles(p, choice, first_only=False))
            elif choice:
                offer(choice)
        if timed_out[0]:
            status = "time_limit"
            break
        if not pending or stalled[0]:
            if ms == MS.kOptimal:
                status = "optimal" if limits.mip_gap == 0 or info.mip_gap <= 1e-9 else "gap"
            else:
                status = "time_limit" if ms == MS.kTimeLimit else "work_limit"
            break
        if limits.runs is not None and iterations >= limits.runs:
            status = "work_limit"
            break
        rows = cut_gen.rows(pending)
        if not rows[0]:
            raise ExtractionError("cycle cut repeated", solver_status=h.modelStatusToString(ms))
        cuts += _add_rows(h, rows)
    return Run(status, bound, iterations, cuts, abandoned)


_made = threading.Lock()
_banner_shown = False  # HiGHS prints its banner once per process: when the first one is made


def silent_highs() -> highspy.Highs:
    """A new ``highspy.Highs`` whose copyright banner reaches no one.

    HiGHS writes its banner (``Running HiGHS … Copyright …``) straight to the process's standard
    output, below Python and before any option can be set, when a process makes its first
    instance: that one is made with file descriptor 1 pointed at the null device (and C's
    buffers flushed before it is put back). Later instances print nothing until run, and
    :func:`run_model` sets ``output_flag`` and ``log_to_console`` off."""
    global _banner_shown
    with _made:
        if _banner_shown:
            return highspy.Highs()
        _banner_shown = True
        if sys.stdout is not None:  # what Python holds goes out before fd 1 is moved
            sys.stdout.flush()
        try:
            saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
        except OSError:  # no standard output to protect
            return highspy.Highs()
        os.dup2(null, 1)
        try:
            h = highspy.Highs()
            _flush_c_stdio()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(null)
        return h


def _flush_c_stdio() -> None:
    """``fflush(NULL)``: what C's stdio holds for fd 1 goes to the null device, not later."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library by that name (Windows)
        pass


#: HiGHS's own time limit is this share of the time left, because HiGHS also runs phases that
#: no interrupt callback reaches: the full model of extraction-gym's NasRNN e-graph, started
#: with 55 s left, ran on past a deadline that every callback answered with an interrupt and was
#: abandoned at 62.0 s of a 60 s limit; with HiGHS's own limit at 0.9 of what is left it
#: stopped by itself (total 55.0 s).
HIGHS_TIME_SHARE = 0.9
#: Seconds past the deadline after which a HiGHS run that ignores its time limit and the
#: interrupt callbacks is abandoned (seen in the root node of a 50k-e-node GPT-2 e-graph).
ABANDON_AFTER = 2.0


def _run_within(h: highspy.Highs, deadline: float) -> bool:
    """``h.run()`` in a thread of its own (HiGHS releases the GIL while it solves); False when it
    is still running at ``deadline``. Not highspy's ``startSolve``: its lock is shared by every
    ``Highs`` object, so one abandoned run would block all later ones."""
    thread = threading.Thread(target=h.run, daemon=True)
    thread.start()
    while thread.is_alive():
        now = time.perf_counter()
        if now >= deadline:
            return False
        thread.join(min(0.1, deadline - now))
    return True


def _add_rows(h: highspy.Highs, rows: tuple[list[int], list[int], list[float]]) -> int:
    """Add the cut rows ``(starts, index, value)``, each ``>= 0``; returns how many."""
    starts, idx, val = rows
    k = len(starts)
    if k:
        h.addRows(
            k,
            np.zeros(k),
            np.full(k, np.inf),
            len(idx),
            np.asarray(starts, dtype=np.int32),
            np.asarray(idx, dtype=np.int32),
            np.asarray(val, dtype=np.float64),
        )
    return k
