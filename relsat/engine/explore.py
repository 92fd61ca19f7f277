"""Exploration: equality saturation with TENSAT's schedule, set-at-a-time in SQL.

Each iteration runs the multi-pattern phase (only in the first ``k_multi`` iterations, before the
single-pattern rules, as TENSAT does) and then the single-pattern phase, each phase in its own
transaction. With ``Schedule(runtime_first=True)`` the first iteration opens with *runtime
phases*: the single-pattern rules marked ``runtime`` (the fusions onnxruntime makes when it loads
a model: a Conv's bias, batch norm and activation folded in) alone, repeated until one changes
nothing, so that the multi-pattern phase sees the fused units an ONNX import writes apart, as
TENSAT's input format writes them fused (:mod:`relsat.engine.phase`).

A phase is a fixed sequence of statements whatever the number of rules (see
:mod:`relsat.engine.compile`): match all pattern heights (one recursive query), collect whole
matches, check guards, instantiate right-hand sides (one recursive query), shape-check, insert,
rebuild.
Searches are semi-naive: only matches that involve an e-node created or re-canonicalized since the
last search of the same kind are new. A run ends with a :class:`StopReason`, never an exception for
a limit; one :class:`IterationStats` row per iteration and phase, and per-rule rows, are kept in the
database (``iteration_stats``, ``rule_stats``).

Limits hold inside a phase. The time limit interrupts the running statement (a watcher thread,
:meth:`relsat.engine.db.Database.deadline`) and **rolls the phase in progress back**: what earlier
phases added is kept, the stored e-graph is the one after the last completed phase. The e-node
limit caps what a phase may add: its matches are applied in match-id order (rule, then classes)
while the new e-nodes they build fit, the rest are counted as ``capped``. If congruence then
merged e-nodes away, making room, the phase runs again (over the e-nodes its first run saw, from
the same semi-naive start: the matches applied build nothing new, the next ones go on); the run
stops at the limit when a capped phase merged nothing, added nothing, or left the e-graph full.

A phase applies its matches :data:`relsat.engine.phase.CHUNK` at a time (a cross-product rule finds
millions): each chunk is pre-filtered, instantiated, shape-checked and inserted before the next,
so a phase holds one chunk's right-hand sides at a time and stops instantiating at the chunk that
reaches the e-node limit. The e-nodes a phase adds do not depend on the chunk size (only their
ids do).

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

from relsat.engine.compile import Program, compile_rules
from relsat.engine.db import DeadlinePassed
from relsat.engine.egraph import EGraph
from relsat.engine.phase import RUNTIME_ROUNDS, Backoff, IterationStats, Phases
from relsat.errors import AuditError, check_choice, check_int, check_number
from relsat.rewrite.rules import Rule, RuleSet

__all__ = [
    "SCHEDULERS",
    "Backoff",
    "Exploration",
    "IterationStats",
    "Limits",
    "Schedule",
    "StopReason",
    "explore",
    "find_matches",
]

#: ``Schedule(scheduler=...)``: every match applied, or egg's backoff scheduler with its defaults
#: (a :class:`Backoff` gives other settings).
SCHEDULERS = ("simple", "backoff")


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
            "iter phase    matches applied rejected  capped  banned   added  merged     net "
            " e-nodes  search   apply rebuild  stmts  plan%",
        ]
        for s in self.iterations:
            total = s.plan_s + s.exec_s
            lines.append(
                f"{s.iteration:4d} {s.phase:7s} {s.matches:8d} {s.applied:7d} "
                f"{s.rejected:8d} {s.capped:7d} {s.banned:7d} {s.new_enodes:7d} {s.merged:7d} "
                f"{s.net:+7d} "
                f"{s.enodes:8d} {s.search_s:7.3f} {s.apply_s:7.3f} {s.rebuild_s:7.3f} "
                f"{s.statements:6d} {100 * s.plan_s / total if total else 0:5.1f}"
            )
        return "\n".join(lines)


@dataclass(frozen=True)
class Schedule:
    """Which rules run when: ``k_multi`` (an integer >= 0) iterations run the multi-pattern
    rules; ``k_neutral`` (an integer >= 0, or None: every iteration, as TENSAT) iterations run
    the *neutral* rules (:mod:`relsat.engine.relevance`: element-wise associativity and
    commutativity, priced alike on both sides by every cost model), which then cannot fill the
    e-graph — both counted from the e-graph's first iteration; ``guards=False`` ignores the
    rules' ``where`` guards, as TENSAT does (some rules are then unsound for grouped
    convolutions and broadcasting; ``reference/SEMANTICS.md`` §7); ``cycle_filter``:
    ``"efficient"`` (TENSAT's Algorithm 2: rank-pruned pre-filter of multi-pattern matches, then
    a post-pass after every phase that filters the newest e-node of each remaining cycle),
    ``"vanilla"`` (per-match descendant sets, no post-pass: the paper's Table 6 ablation) or
    ``"off"``; ``scheduler``: ``"simple"`` applies every match, ``"backoff"`` (or a
    :class:`Backoff`) is egg's backoff scheduler, which TENSAT ran with
    (:mod:`relsat.engine.phase`): a single-pattern rule that matches too often is banned for a
    few iterations, so that a rule set that explodes spends the e-node budget on the other rules
    too.

    The values are taken as valid (:class:`relsat.Options` checks them once); a bad
    ``scheduler`` raises :class:`~relsat.errors.SettingsError` when explored.
    """

    k_multi: int = 1
    k_neutral: int | None = None
    guards: bool = True
    cycle_filter: str = "efficient"
    scheduler: str | Backoff = "simple"
    runtime_first: bool = False


def explore(
    egraph: EGraph,
    rules: Iterable[Rule] | None = None,
    limits: Limits | None = None,
    schedule: Schedule | None = None,
    *,
    on_phase: Callable[[IterationStats], None] | None = None,
    audit: bool = False,
) -> Exploration:
    """Saturate ``egraph`` with ``rules`` (default: the shipped rule set) within ``limits``
    (default :class:`Limits`), the rules run as ``schedule`` says (default :class:`Schedule`).

    An e-graph explored before is continued (see the module docstring and :class:`Limits`).
    ``on_phase`` is called with each phase's :class:`IterationStats` (progress display).
    ``audit=True`` runs the invariant checks (:meth:`EGraph.audit`) after every phase and raises
    :class:`~relsat.errors.AuditError` (rolling the phase back) when one fails.
    """
    start = time.perf_counter()
    limits = limits or Limits()
    schedule = schedule or Schedule()
    backoff = backoff_for(schedule.scheduler)
    program = program_for(default_rules() if rules is None else rules, guards=schedule.guards)
    runtime = runtime_program(program, guards=schedule.guards) if schedule.runtime_first else None
    runner = Phases(
        egraph,
        program,
        schedule.k_multi,
        schedule.cycle_filter,
        backoff=backoff,
        k_neutral=schedule.k_neutral,
        runtime=runtime,
    )
    first = runner.next_iteration
    loop = _Loop(egraph, runner, limits, start, on_phase, audit)
    with egraph.db.deadline(limits.seconds - (time.perf_counter() - start)):
        stop = loop.run(first, schedule.k_multi)
    runner.refresh_facts()  # table fact as complete as the e-graph, for SQL and a resumed run
    seconds = time.perf_counter() - start
    enodes, eclasses = egraph.counts()
    db = egraph.db
    busiest = tuple(
        (str(r[0]), int(r[1]), int(r[2])) for r in db.run("stats/busiest_rules", first=first)
    )
    settings = {
        "k_multi": schedule.k_multi,
        "k_neutral": schedule.k_neutral,
        "guards": schedule.guards,
        "scheduler": asdict(backoff) if backoff else "simple",
        "runtime_first": schedule.runtime_first,
        **asdict(limits),
        "rules": len(program.rules),
        "first_iteration": first,
    }
    db.run(
        "stats/record_run",
        started=datetime.now(),
        iterations=len({s.iteration for s in loop.stats}),
        stop=stop.value,
        seconds=seconds,
        settings=json.dumps(settings),
    )
    return Exploration(stop, tuple(loop.stats), seconds, enodes, eclasses, busiest)


class _Loop:
    """The iterations of one :func:`explore` call: phases until saturated or a limit."""

    def __init__(  # the call's pieces, kept together for its few steps
        self,
        egraph: EGraph,
        runner: Phases,
        limits: Limits,
        start: float,
        on_phase: Callable[[IterationStats], None] | None,
        audit: bool,
    ) -> None:
        self.egraph, self.runner, self.limits = egraph, runner, limits
        self.start, self.on_phase, self.audit = start, on_phase, audit
        self.stats: list[IterationStats] = []
        self.enodes = egraph.counts()[0]

    def run(self, iteration: int, k_multi: int) -> StopReason:
        """Iterate from ``iteration``; why it stopped."""
        db, limits = self.egraph.db, self.limits
        while iteration < limits.iterations:
            if db.expired or time.perf_counter() - self.start >= limits.seconds:
                return StopReason.TIME_LIMIT
            if self.enodes >= limits.nodes:
                return StopReason.NODE_LIMIT
            done: list[IterationStats] = []
            stop = self.iteration(iteration, done)
            self.stats.extend(done)
            if stop is not None:
                return stop
            if not any(s.changed for s in done) and iteration >= k_multi - 1:
                try:
                    lifted = self.runner.lift_bans(iteration)  # banned rules: not saturated yet
                except DeadlinePassed:  # one statement, refused or interrupted: nothing changed
                    return StopReason.TIME_LIMIT
                if not lifted:
                    return StopReason.SATURATED
            iteration += 1
        return StopReason.ITERATION_LIMIT

    def iteration(self, iteration: int, done: list[IterationStats]) -> StopReason | None:
        """Run one iteration's phases, appending their stats to ``done``; a limit that stopped
        it, or None."""
        db, limits = self.egraph.db, self.limits
        phases = self.runner.phases(iteration)
        rounds = 0  # runtime phases run
        while phases:
            kind = phases[0]
            try:
                db.fit_threads(self.enodes)
                with db.transaction():
                    s = self.runner.phase(iteration, kind, budget=limits.nodes - self.enodes)
                    violations = self.egraph.audit() if self.audit else {}
                    if any(violations.values()):
                        raise AuditError(violations, where=f"after iteration {iteration} ({kind})")
            except DeadlinePassed:  # the phase in progress was rolled back
                return StopReason.TIME_LIMIT
            done.append(s)
            self.enodes = s.enodes
            if self.on_phase is not None:
                self.on_phase(s)
            if kind == "runtime":
                rounds += 1
            if not s.capped:
                if not (kind == "runtime" and s.changed and rounds < RUNTIME_ROUNDS):
                    phases.pop(0)  # (the runtime phases go on until one changes nothing)
            elif not (s.merged and s.new_enodes and self.enodes < limits.nodes):
                return StopReason.NODE_LIMIT
            # else: capped, but merging made room: the phase runs again (see the module doc)
        return None


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
#: The programs of the runtime rules (:func:`runtime_program`) by the id and ``guards`` of the
#: program they come from (kept alive beside, so its id is never reused).
_RUNTIME: dict[tuple[int, bool], tuple[Program, Program | None]] = {}


def default_rules() -> tuple[Rule, ...]:
    """The shipped rule set (``rules/*.rules``), read again only when a file changed."""
    from relsat.rewrite.rulefile import RULES_DIR, load_rules

    key = tuple(
        (str(f), st.st_size, st.st_mtime_ns)
        for f in sorted(Path(RULES_DIR).glob("*.rules"))
        for st in [f.stat()]
    )
    if not _DEFAULT or _DEFAULT[0][0] != key:
        _DEFAULT[:] = [(key, tuple(load_rules()))]
    return _DEFAULT[0][1]


def program_for(rules: Iterable[Rule], *, guards: bool = True) -> Program:
    """:func:`relsat.engine.compile.compile_rules`, memoized on the rules (equal rules, equal
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


def runtime_program(program: Program, *, guards: bool = True) -> Program | None:
    """The single-pattern rules of ``program`` (compiled with ``guards``) marked ``runtime``,
    compiled alike, once per program; None when it has none."""
    same = _RUNTIME.get((id(program), guards))
    if same is not None and same[0] is program:
        return same[1]
    subset = tuple(r for r in program.rules if r.runtime and not r.is_multi)
    runtime = compile_rules(subset, guards=guards) if subset else None
    if len(_RUNTIME) >= _CACHE_SIZE:
        _RUNTIME.pop(next(iter(_RUNTIME)))
    _RUNTIME[(id(program), guards)] = (program, runtime)
    return runtime


def backoff_for(scheduler: object) -> Backoff | None:
    """The :class:`Backoff` settings ``scheduler`` names (None: every match applied); anything
    but ``"simple"``, ``"backoff"`` or a :class:`Backoff` raises
    :class:`~relsat.errors.SettingsError`."""
    if isinstance(scheduler, Backoff):
        return scheduler
    check_choice("scheduler", scheduler, SCHEDULERS)
    return Backoff() if scheduler == "backoff" else None


def find_matches(egraph: EGraph, rules: Iterable[Rule], *, multi: bool) -> pa.Table:
    """Every match of ``rules`` (the multi-pattern or the single-pattern ones) in ``egraph``
    whose ``where`` conditions hold, as the engine finds them: ``(rule name, root0, root1, v)``
    (named guards on shapes are not applied). Changes nothing but work tables (and the facts of
    values a condition reads, brought up to date)."""
    program = program_for(rules)
    runner = Phases(egraph, program, k_multi=0)
    runner.search(multi=multi, since=0)
    if program.cond_sql is not None:
        if program.value_rules:
            runner.refresh_facts()
        egraph.db.execute(program.cond_sql)
    return egraph.db.arrow(
        "SELECT r.name AS rule, m.root0, m.root1, m.v FROM match m "
        "JOIN rule_info r ON r.rule = m.rule WHERE m.ok ORDER BY m.mid"
    )
