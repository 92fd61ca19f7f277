"""Exploration: equality saturation with TENSAT's schedule, set-at-a-time in SQL.

Each iteration runs, in one transaction, the multi-pattern phase (only in the first ``k_multi``
iterations, before the single-pattern rules, as TENSAT does) and then the single-pattern phase.
A phase is a fixed sequence of statements whatever the number of rules (see
:mod:`relsat.compile`): match level by level, collect whole matches, check guards, instantiate
right-hand sides level by level with the shape check, insert, rebuild. Searches are semi-naive:
only matches that involve an e-node created or re-canonicalized since the last search of the same
kind are new. A run ends with a :class:`StopReason`, never an exception for a limit; one
:class:`IterationStats` row per iteration and phase, and per-rule rows, are kept in the database
(``iteration_stats``, ``rule_stats``).
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import datetime

import pyarrow as pa

from relsat.compile import Program, compile_rules
from relsat.cycles import MODES, prefilter, remove_cycles
from relsat.egraph import EGraph
from relsat.errors import AuditError, check_choice, check_int, check_number
from relsat.rebuild import rebuild
from relsat.rules import Rule
from relsat.shapecheck import check_new

__all__ = ["Exploration", "IterationStats", "Limits", "StopReason", "explore", "find_matches"]


class StopReason(enum.Enum):
    """Why exploration ended."""

    SATURATED = "saturated"
    NODE_LIMIT = "node limit"
    ITERATION_LIMIT = "iteration limit"
    TIME_LIMIT = "time limit"


@dataclass(frozen=True)
class Limits:
    """TENSAT's settings (MLSys 2021, ``reference/ALGORITHMS.md`` §1.1) as defaults.

    The node limit is checked between phases, so one phase can overshoot it (as in TENSAT).
    ``nodes`` is an integer >= 1, ``iterations`` an integer >= 0 and ``seconds`` a number >= 0
    (infinity: no limit); anything else raises :class:`~relsat.errors.SettingsError`.
    """

    nodes: int = 50_000
    iterations: int = 15
    seconds: float = 3600.0

    def __post_init__(self) -> None:
        check_int("nodes", self.nodes, 1)
        check_int("iterations", self.iterations, 0)
        check_number("seconds", self.seconds, 0)


@dataclass(frozen=True)
class IterationStats:
    """One phase of one iteration (a row of the ``iteration_stats`` table)."""

    iteration: int
    phase: str
    matches: int
    applied: int
    rejected: int
    rejected_cycle: int
    filtered: int
    new_enodes: int
    new_eclasses: int
    unions: int
    enodes: int
    eclasses: int
    search_s: float
    apply_s: float
    rebuild_s: float
    cycle_s: float
    statements: int
    plan_s: float
    exec_s: float

    @property
    def changed(self) -> bool:
        return self.new_enodes > 0 or self.unions > 0 or self.filtered > 0


@dataclass(frozen=True)
class Exploration:
    """The outcome of :func:`explore`."""

    stop: StopReason
    iterations: tuple[IterationStats, ...]
    seconds: float
    enodes: int
    eclasses: int

    def report(self) -> str:
        lines = [
            f"stop: {self.stop.value} after {len({s.iteration for s in self.iterations})} "
            f"iterations, {self.seconds:.3f} s; {self.enodes} e-nodes, "
            f"{self.eclasses} e-classes",
            "iter phase   matches applied rejected  +nodes  e-nodes  search   apply "
            "rebuild  stmts  plan%",
        ]
        for s in self.iterations:
            total = s.plan_s + s.exec_s
            lines.append(
                f"{s.iteration:4d} {s.phase:6s} {s.matches:8d} {s.applied:7d} "
                f"{s.rejected:8d} {s.new_enodes:7d} {s.enodes:8d} {s.search_s:7.3f} "
                f"{s.apply_s:7.3f} {s.rebuild_s:7.3f} {s.statements:6d} "
                f"{100 * s.plan_s / total if total else 0:5.1f}"
            )
        return "\n".join(lines)


def explore(
    egraph: EGraph,
    rules: Iterable[Rule] | None = None,
    *,
    k_multi: int = 1,
    limits: Limits | None = None,
    guards: bool = True,
    cycle_filter: str = "efficient",
    audit: bool = False,
    on_phase: Callable[[IterationStats], None] | None = None,
) -> Exploration:
    """Saturate ``egraph`` with ``rules`` (default: the shipped rule set).

    ``guards=False`` ignores the rules' ``where`` guards, as TENSAT does (some rules are then
    unsound for grouped convolutions and broadcasting; ``reference/SEMANTICS.md`` §7).
    ``cycle_filter``: ``"efficient"`` (TENSAT's Algorithm 2: rank-pruned pre-filter of
    multi-pattern matches, then a post-pass after every phase that filters the newest e-node of
    each remaining cycle), ``"vanilla"`` (per-match descendant sets, no post-pass: the paper's
    Table 6 ablation) or ``"off"``. ``k_multi`` (an integer >= 0) is the number of iterations
    that run the multi-pattern rules. A bad setting raises :class:`~relsat.errors.SettingsError`.
    ``audit=True`` runs the invariant checks (:meth:`EGraph.audit`) after every phase and raises
    :class:`~relsat.errors.AuditError` (rolling the iteration back) when one fails.
    ``on_phase`` is called with each phase's :class:`IterationStats` (progress display).
    """
    from relsat.rulefile import load_rules

    limits = limits or Limits()
    check_int("k_multi", k_multi, 0)
    check_choice("cycle_filter", cycle_filter, MODES)
    program = compile_rules(load_rules() if rules is None else rules, guards=guards)
    runner = _Runner(egraph, program, k_multi, cycle_filter)
    start = time.perf_counter()
    stats: list[IterationStats] = []
    stop = StopReason.ITERATION_LIMIT
    for iteration in range(limits.iterations):
        if time.perf_counter() - start > limits.seconds:
            stop = StopReason.TIME_LIMIT
            break
        if egraph.counts()[0] >= limits.nodes:
            stop = StopReason.NODE_LIMIT
            break
        with egraph.db.transaction():
            done = []
            for multi in (True, False):
                if multi and iteration >= k_multi:
                    continue
                done.append(runner.phase(iteration, multi=multi))
                if on_phase is not None:
                    on_phase(done[-1])
                violations = egraph.audit() if audit else {}
                if any(violations.values()):
                    raise AuditError(
                        violations,
                        where=f"after iteration {iteration} ({'multi' if multi else 'single'})",
                    )
        stats.extend(done)
        if not any(s.changed for s in done) and iteration >= k_multi - 1:
            stop = StopReason.SATURATED
            break
    seconds = time.perf_counter() - start
    enodes, eclasses = egraph.counts()
    egraph.db.execute(
        "INSERT INTO run VALUES ($started, $iterations, $stop, $seconds, $settings)",
        {
            "started": datetime.now(),
            "iterations": len({s.iteration for s in stats}),
            "stop": stop.value,
            "seconds": seconds,
            "settings": json.dumps(
                {
                    "k_multi": k_multi,
                    "guards": guards,
                    **asdict(limits),
                    "rules": len(program.rules),
                }
            ),
        },
    )
    return Exploration(stop, tuple(stats), seconds, enodes, eclasses)


def find_matches(egraph: EGraph, rules: Iterable[Rule], *, multi: bool) -> pa.Table:
    """Every match of ``rules`` (the multi-pattern or the single-pattern ones) in ``egraph``, as
    the engine finds them: ``(rule name, root0, root1, v)``. Changes nothing but work tables."""
    runner = _Runner(egraph, compile_rules(rules), k_multi=0)
    runner.search(multi=multi, since=0)
    return egraph.db.arrow(
        "SELECT r.name AS rule, m.root0, m.root1, m.v FROM match m "
        "JOIN rule_info r ON r.rule = m.rule ORDER BY m.mid"
    )


class _Runner:
    """Runs the phases of one exploration over one rule program."""

    def __init__(
        self, egraph: EGraph, program: Program, k_multi: int, cycle_filter: str = "off"
    ) -> None:
        self.eg, self.db, self.program = egraph, egraph.db, program
        self.k_multi = k_multi
        self.cycle_filter = cycle_filter
        self.epoch = int(self.db.scalar("SELECT coalesce(max(stamp), 0) FROM enode"))
        self.since = {True: 0, False: 0}
        for table in ("rule_info", "pnode", "tnode", "rguard"):
            self.db.execute(f"DELETE FROM {table}")
            self.db.insert_arrow(table, getattr(program, table))

    def search(self, *, multi: bool, since: int) -> None:
        """Fill ``match`` with the phase's matches that involve an e-node stamped >= ``since``."""
        self.db.run("search/reset")
        self.db.run("search/match_leaves", multi=multi, since=since)
        for h in range(1, self.program.lhs_height + 1):
            self.db.run("search/match_level", h=h, multi=multi, since=since)
        self.db.run("search/collect_multi" if multi else "search/collect_single")

    def phase(self, iteration: int, *, multi: bool) -> IterationStats:
        db = self.db
        before = db.counters.snapshot()
        self.epoch += 1
        t0 = time.perf_counter()
        self.search(multi=multi, since=self.since[multi])
        self.since[multi] = self.epoch
        t1 = time.perf_counter()
        if multi and self.cycle_filter != "off":
            prefilter(db, self.cycle_filter)
        t1b = time.perf_counter()
        cycle_s = t1b - t1
        ((pending, height, guarded),) = db.run("apply/pending_height")
        if pending:
            if guarded:
                db.run("apply/check_guards")
            for h in range(height + 1):
                db.run("apply/instantiate_level", h=h)
            check_new(db)
            db.run("apply/insert_new", epoch=self.epoch)
        t2 = time.perf_counter()
        ((matches, applied, rejected_cycle, new_enodes),) = db.run("stats/phase_counts")
        db.run("stats/rule_counts", iteration=iteration)
        unions = rebuild(db, self.epoch)
        t3 = time.perf_counter()
        filtered = remove_cycles(db) if self.cycle_filter == "efficient" else 0
        cycle_s += time.perf_counter() - t3
        enodes, eclasses = self.eg.counts()
        used = db.counters.since(before)
        stats = IterationStats(
            iteration,
            "multi" if multi else "single",
            matches,
            applied,
            matches - applied - rejected_cycle,
            rejected_cycle,
            filtered,
            new_enodes,
            new_enodes,
            unions,
            enodes,
            eclasses,
            t1 - t0,
            t2 - t1b,
            t3 - t2,
            cycle_s,
            used.statements,
            used.plan_s,
            used.exec_s,
        )
        fields = asdict(stats)
        db.execute(
            "INSERT INTO iteration_stats VALUES (" + ", ".join(f"${k}" for k in fields) + ")",
            fields,
        )
        return stats
