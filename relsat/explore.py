"""Exploration: equality saturation with TENSAT's schedule, set-at-a-time in SQL.

Each iteration runs the multi-pattern phase (only in the first ``k_multi`` iterations, before the
single-pattern rules, as TENSAT does) and then the single-pattern phase, each phase in its own
transaction. A phase is a fixed sequence of statements whatever the number of rules (see
:mod:`relsat.compile`): match level by level, collect whole matches, check guards, instantiate
right-hand sides level by level with the shape check, insert, rebuild. Searches are semi-naive:
only matches that involve an e-node created or re-canonicalized since the last search of the same
kind are new. A run ends with a :class:`StopReason`, never an exception for a limit; one
:class:`IterationStats` row per iteration and phase, and per-rule rows, are kept in the database
(``iteration_stats``, ``rule_stats``).

Limits hold inside a phase. The time limit interrupts the running statement (a watcher thread,
:meth:`relsat.db.Database.deadline`) and **rolls the phase in progress back**: what earlier
phases added is kept, the stored e-graph is the one after the last completed phase. The e-node
limit caps what a phase may add: its matches are applied in match-id order (rule, then classes)
while the new e-nodes they build fit, the rest are counted as ``capped`` and the run stops.

A phase applies its matches :data:`CHUNK` at a time (a cross-product rule finds millions): each
chunk is pre-filtered, instantiated, shape-checked and inserted before the next, so a phase holds
one chunk's right-hand sides at a time and stops instantiating at the chunk that reaches the
e-node limit. The e-nodes a phase adds do not depend on the chunk size (only their ids do).

Exploring an e-graph that was explored before continues it: iteration numbers go on from the
stored ones (the iteration limit counts them all), and the semi-naive search starts from where
the last run's searches stopped, so matches already applied are not found or counted again.
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

import pyarrow as pa

from relsat.compile import Program, compile_rules
from relsat.cycles import MODES, prefilter, ranks, remove_cycles
from relsat.db import DeadlinePassed
from relsat.egraph import EGraph
from relsat.errors import AuditError, check_choice, check_int, check_number
from relsat.rebuild import Rebuilt, rebuild
from relsat.rules import Rule, RuleSet
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

    ``nodes``: the e-graph never holds more e-nodes than this; the phase that reaches it applies
    its matches in a deterministic order until the next one would pass it (TENSAT checks only
    between iterations and overshoots). ``iterations``: the e-graph's iterations, counting those
    of earlier runs on the same e-graph. ``seconds``: this run's wall-clock time; the phase in
    progress at the limit is stopped (a running SQL statement within milliseconds, Python work
    at its next check) and rolled back.
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
    merged: int  # e-nodes merged away by congruence: new_enodes - merged is the net change
    capped: int  # matches not applied because the e-node limit was reached
    epoch: int  # the phase's stamp

    @property
    def changed(self) -> bool:
        return self.new_enodes > 0 or self.unions > 0 or self.filtered > 0

    @property
    def net(self) -> int:
        """The change of the e-node count over the phase: added minus merged away."""
        return self.new_enodes - self.merged


@dataclass(frozen=True)
class Exploration:
    """The outcome of :func:`explore`."""

    stop: StopReason
    iterations: tuple[IterationStats, ...]
    seconds: float
    enodes: int
    eclasses: int
    #: The rules with the most matches in this run, ``(rule, matches, new e-nodes)``, busiest
    #: first: what to look at when a limit stopped the run.
    busiest: tuple[tuple[str, int, int], ...] = ()

    @property
    def why(self) -> str:
        """The stop reason in words, with the busiest rules when a limit stopped the run."""
        text = self.stop.value
        if self.stop in (StopReason.NODE_LIMIT, StopReason.TIME_LIMIT) and self.busiest:
            text += "; busiest rules: " + ", ".join(
                f"{rule} ({m} matches, {n} new e-nodes)" for rule, m, n in self.busiest
            )
        return text

    def report(self) -> str:
        lines = [
            f"stop: {self.why} after {len({s.iteration for s in self.iterations})} "
            f"iterations, {self.seconds:.3f} s; {self.enodes} e-nodes, "
            f"{self.eclasses} e-classes",
            "iter phase   matches applied rejected  capped   added  merged     net  e-nodes "
            " search   apply rebuild  stmts  plan%",
        ]
        for s in self.iterations:
            total = s.plan_s + s.exec_s
            lines.append(
                f"{s.iteration:4d} {s.phase:6s} {s.matches:8d} {s.applied:7d} "
                f"{s.rejected:8d} {s.capped:7d} {s.new_enodes:7d} {s.merged:7d} {s.net:+7d} "
                f"{s.enodes:8d} {s.search_s:7.3f} {s.apply_s:7.3f} {s.rebuild_s:7.3f} "
                f"{s.statements:6d} {100 * s.plan_s / total if total else 0:5.1f}"
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
    :class:`~relsat.errors.AuditError` (rolling the phase back) when one fails.
    An e-graph explored before is continued (see the module docstring and :class:`Limits`).
    ``on_phase`` is called with each phase's :class:`IterationStats` (progress display).
    """
    start = time.perf_counter()
    limits = limits or Limits()
    check_int("k_multi", k_multi, 0)
    check_choice("cycle_filter", cycle_filter, MODES)
    program = program_for(default_rules() if rules is None else rules, guards=guards)
    runner = _Runner(egraph, program, k_multi, cycle_filter)
    db = egraph.db
    first = iteration = runner.next_iteration
    stats: list[IterationStats] = []
    stop = StopReason.ITERATION_LIMIT
    enodes = egraph.counts()[0]
    with db.deadline(limits.seconds - (time.perf_counter() - start)):
        while iteration < limits.iterations:
            if db.expired or time.perf_counter() - start >= limits.seconds:
                stop = StopReason.TIME_LIMIT
                break
            if enodes >= limits.nodes:
                stop = StopReason.NODE_LIMIT
                break
            done: list[IterationStats] = []
            for multi in runner.phases(iteration):
                try:
                    with db.transaction():
                        s = runner.phase(iteration, multi=multi, budget=limits.nodes - enodes)
                        violations = egraph.audit() if audit else {}
                        if any(violations.values()):
                            raise AuditError(
                                violations,
                                where=f"after iteration {iteration} "
                                f"({'multi' if multi else 'single'})",
                            )
                except DeadlinePassed:  # the phase in progress was rolled back
                    stop = StopReason.TIME_LIMIT
                    break
                done.append(s)
                enodes = s.enodes
                if on_phase is not None:
                    on_phase(s)
                if s.capped:
                    stop = StopReason.NODE_LIMIT
                    break
            stats.extend(done)
            if stop is not StopReason.ITERATION_LIMIT:
                break
            if not any(s.changed for s in done) and iteration >= k_multi - 1:
                stop = StopReason.SATURATED
                break
            iteration += 1
    seconds = time.perf_counter() - start
    enodes, eclasses = egraph.counts()
    busiest = tuple(
        (str(r[0]), int(r[1]), int(r[2]))
        for r in db.execute(
            "SELECT rule, sum(matches), sum(new_enodes) FROM rule_stats "
            "WHERE iteration >= $first GROUP BY rule ORDER BY 2 DESC, 1 LIMIT 3",
            {"first": first},
        )
    )
    db.execute(
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
                    "first_iteration": first,
                }
            ),
        },
    )
    return Exploration(stop, tuple(stats), seconds, enodes, eclasses, busiest)


# ---------------------------------------------------------------------------------------------
# Rule programs, once per rule set and process

#: Compiled programs by (rules, guards): parsing and compiling the shipped rules costs ~25 ms,
#: paid once per process instead of once per call.
_PROGRAMS: dict[tuple[tuple[Rule, ...], bool], Program] = {}
#: The shipped rule set, with the (path, size, mtime) of the files it was read from.
_DEFAULT: list[tuple[tuple[tuple[str, int, int], ...], tuple[Rule, ...]]] = []
_CACHE_SIZE = 16
#: The last rule set object compiled, per ``guards`` (kept alive, so its id is never reused).
_LAST: dict[bool, tuple[object, Program]] = {}


def default_rules() -> tuple[Rule, ...]:
    """The shipped rule set (``rules/*.rules``), read again only when a file changed."""
    from relsat.rulefile import RULES_DIR, load_rules

    key = tuple(
        (str(f), st.st_size, st.st_mtime_ns)
        for f in sorted(Path(RULES_DIR).glob("*.rules"))
        for st in [f.stat()]
    )
    if not _DEFAULT or _DEFAULT[0][0] != key:
        _DEFAULT[:] = [(key, tuple(load_rules()))]
    return _DEFAULT[0][1]


def program_for(rules: Iterable[Rule], *, guards: bool = True) -> Program:
    """:func:`relsat.compile.compile_rules`, memoized on the rules (equal rules, equal
    program: a rule is its name, sides, guards and flags) and ``guards``."""
    same = _LAST.get(guards)
    if same is not None and same[0] is rules:  # the same rule set object again: no hashing
        return same[1]
    key = (tuple(rules), guards)
    program = _PROGRAMS.get(key)
    if program is None:
        program = compile_rules(key[0], guards=guards)
        if len(_PROGRAMS) >= _CACHE_SIZE:
            _PROGRAMS.pop(next(iter(_PROGRAMS)))
        _PROGRAMS[key] = program
    if isinstance(rules, tuple | RuleSet):  # immutable: safe to recognize by identity
        _LAST[guards] = (rules, program)
    return program


def find_matches(egraph: EGraph, rules: Iterable[Rule], *, multi: bool) -> pa.Table:
    """Every match of ``rules`` (the multi-pattern or the single-pattern ones) in ``egraph``, as
    the engine finds them: ``(rule name, root0, root1, v)``. Changes nothing but work tables."""
    runner = _Runner(egraph, program_for(rules), k_multi=0)
    runner.search(multi=multi, since=0)
    return egraph.db.arrow(
        "SELECT r.name AS rule, m.root0, m.root1, m.v FROM match m "
        "JOIN rule_info r ON r.rule = m.rule ORDER BY m.mid"
    )


#: ``until`` of a search that sees every e-node.
NEVER = 2**31 - 1
#: Matches applied at a time (see ``_Runner._apply``): bounds the right-hand sides a phase holds
#: at once (a cross-product rule finds millions of matches) without splitting the phases of the
#: TENSAT benchmarks at k_multi <= 2 (at most 6,740 matches), whose results stay as they were.
CHUNK = 50_000


class _Runner:
    """Runs the phases of one exploration over one rule program."""

    def __init__(
        self,
        egraph: EGraph,
        program: Program,
        k_multi: int,
        cycle_filter: str = "off",
        chunk: int | None = None,
    ) -> None:
        self.eg, self.db, self.program = egraph, egraph.db, program
        self.chunk = chunk or CHUNK
        self.k_multi = k_multi
        self.cycle_filter = cycle_filter
        # Where the stored e-graph's exploration stopped: the last phase's epoch per kind (the
        # semi-naive search goes on from there; a phase capped by the e-node limit does not
        # count, so that its matches not applied are found again) and the next iteration and
        # phase to run.
        ((stamp, epoch, multi_since, single_since, last),) = self.db.execute(
            "SELECT (SELECT coalesce(max(stamp), 0) FROM enode), "
            "coalesce(max(epoch), 0), "
            "coalesce(max(epoch) FILTER (WHERE phase = 'multi' AND capped = 0), 0), "
            "coalesce(max(epoch) FILTER (WHERE phase = 'single' AND capped = 0), 0), "
            "arg_max(struct_pack(iteration, phase, capped, epoch), epoch) FROM iteration_stats"
        )
        self.epoch = max(int(stamp), int(epoch))
        self.until: dict[bool, int] = {}
        self.since = {True: int(multi_since), False: int(single_since)}
        if last is None:
            self.next_iteration, self._skip_multi = 0, False
        elif last["capped"]:  # the e-node limit cut the last phase short: run it again over
            # the e-nodes it saw (those born before it), from the same semi-naive start
            self.next_iteration, self._skip_multi = int(last["iteration"]), last["phase"] != "multi"
            self.until[last["phase"] == "multi"] = int(last["epoch"])
        elif last["phase"] == "multi":  # stopped between the two phases of an iteration
            self.next_iteration, self._skip_multi = int(last["iteration"]), True
        else:
            self.next_iteration, self._skip_multi = int(last["iteration"]) + 1, False
        self._whole = True
        pnode = program.pnode.to_pydict()
        self.heights = {  # the tallest left-hand-side pattern of each kind of phase
            kind: max(
                (h for h, m in zip(pnode["height"], pnode["multi"], strict=True) if m == kind),
                default=0,
            )
            for kind in (True, False)
        }
        for table in ("rule_info", "pnode", "tnode", "rguard"):
            self.db.execute(f"DELETE FROM {table}")
            self.db.insert_arrow(table, getattr(program, table))

    def phases(self, iteration: int) -> list[bool]:
        """The phases of ``iteration`` still to run (True: multi-pattern)."""
        multi = iteration < self.k_multi and not (
            self._skip_multi and iteration == self.next_iteration
        )
        return [True, False] if multi else [False]

    def search(self, *, multi: bool, since: int, until: int = NEVER) -> None:
        """Fill ``match`` with the phase's matches that involve an e-node stamped >= ``since``,
        among the e-nodes born before ``until``."""
        self.db.run("search/reset")
        self.db.run("search/match_leaves", multi=multi, since=since, until=until)
        for h in range(1, self.heights[multi] + 1):
            self.db.run("search/match_level", h=h, multi=multi, since=since, until=until)
        self.db.run("search/collect_multi" if multi else "search/collect_single")

    def phase(self, iteration: int, *, multi: bool, budget: int) -> IterationStats:
        """Run one phase, adding at most ``budget`` e-nodes; its stats row is stored."""
        db = self.db
        before = db.counters.snapshot()
        self.epoch += 1
        t0 = time.perf_counter()
        self.search(multi=multi, since=self.since[multi], until=self.until.pop(multi, NEVER))
        self.since[multi] = self.epoch
        t1 = time.perf_counter()
        ((pending, height, guarded),) = db.run("apply/pending_height")
        cycle_s = 0.0
        if pending:
            if multi and self.cycle_filter != "off":
                ranks(db)
                cycle_s = time.perf_counter() - t1
            if guarded:
                db.run("apply/check_guards")
            cycle_s += self._apply(pending, height, multi=multi, budget=budget)
        t2 = time.perf_counter()
        t1b = t1 + cycle_s
        matches = applied = rejected_cycle = capped = new_enodes = 0
        rebuilt = Rebuilt(0, 0)
        if pending:  # nothing matched: nothing to count, rebuild or check for cycles
            ((matches, applied, rejected_cycle, capped, new_enodes),) = db.run("stats/phase_counts")
            db.run("stats/rule_counts", iteration=iteration)
            rebuilt = rebuild(db, self.epoch)
        t3 = time.perf_counter()
        # The first post-pass of a run looks at everything (the stored e-graph may come from a
        # run with another cycle filter); later ones only where the phase changed something.
        filtered = 0
        if self.cycle_filter == "efficient" and (new_enodes or rebuilt.unions):
            filtered = remove_cycles(db, None if self._whole else self.epoch)
            self._whole = False
        cycle_s += time.perf_counter() - t3
        enodes, eclasses = self.eg.counts()
        used = db.counters.since(before)
        stats = IterationStats(
            iteration,
            "multi" if multi else "single",
            matches,
            applied,
            matches - applied - rejected_cycle - capped,
            rejected_cycle,
            filtered,
            new_enodes,
            new_enodes,
            rebuilt.unions,
            enodes,
            eclasses,
            t1 - t0,
            t2 - t1b,
            t3 - t2,
            cycle_s,
            used.statements,
            used.plan_s,
            used.exec_s,
            rebuilt.removed,
            capped,
            self.epoch,
        )
        fields = asdict(stats)
        db.execute(
            "INSERT INTO iteration_stats VALUES (" + ", ".join(f"${k}" for k in fields) + ")",
            fields,
        )
        return stats

    def _apply(self, pending: int, height: int, *, multi: bool, budget: int) -> float:
        """Apply the phase's ``pending`` matches (ids 1..pending) a chunk of :attr:`chunk` at a
        time, in match-id order: cycle pre-filter, instantiation, shape check, e-node limit,
        insertion. A chunk's new e-nodes are inserted before the next chunk is instantiated, so
        the next one finds them by hash-consing: the e-nodes added are those of one pass over
        all matches, whatever the chunk size. Once the e-node limit caps a chunk, every later
        match is capped unseen (counted ``capped``: not checked, not applied): a phase never
        instantiates more than one chunk past what the limit lets in. Returns the seconds spent
        in the cycle pre-filter."""
        db = self.db
        cycle_s = 0.0
        for lo in range(1, pending + 1, self.chunk):
            hi = lo + self.chunk - 1
            if multi and self.cycle_filter != "off":
                t = time.perf_counter()
                prefilter(db, self.cycle_filter, (lo, hi))
                cycle_s += time.perf_counter() - t
            if lo > 1:
                db.run("apply/next_chunk")
            for h in range(height + 1):
                db.run("apply/instantiate_level", h=h, lo=lo, hi=hi)
            fresh = check_new(db)
            db.run("apply/settle")
            capped = False
            if fresh > budget:  # the e-node limit may be reached in this chunk
                db.run("apply/cap_nodes", budget=budget)
                capped = bool(db.scalar("SELECT count(*) FROM match WHERE capped"))
            last = capped or hi >= pending
            used = 0 if last else db.scalar("SELECT count(*) FROM used")
            db.run("apply/insert_new", epoch=self.epoch)
            if last:
                break
            budget -= db.scalar("SELECT count(*) FROM used") - used
        return cycle_s
