"""One exploration phase over a rule program, set-at-a-time in SQL: semi-naive search, the
backoff scheduler, guards, the cycle pre-filter, right-hand sides instantiated and shape-checked a
chunk of matches at a time, the e-node cap, insertion, rebuild and the cycle post-pass
(:class:`Phases`), and the stats row each phase leaves (:class:`IterationStats`).
:mod:`relsat.engine.explore` runs the phases in TENSAT's schedule and holds the limits.

**Backoff** (:class:`Backoff`, egg's ``BackoffScheduler``, which TENSAT runs with its defaults:
``reference/ALGORITHMS.md`` §1.4). It applies to the single-pattern rules only, as in TENSAT. A
rule whose matches in one phase exceed its threshold (``match_limit``, doubled for every earlier
ban of the rule) has them discarded and is not searched for ``ban_length`` iterations (also
doubled per earlier ban); the first single-pattern phase of an e-graph is never limited. egg
searches the whole e-graph every iteration and counts every match; relsat's search is
semi-naive and counts the matches that are new, so a rule is banned on its new matches, and when
its ban ends its search starts from where the banned search started (``rule_sched.since``): the
discarded matches are found again. An e-graph is not saturated while rules are banned: every ban
is moved forward so that the first ends (egg's ``can_stop``). The state is stored
(``rule_sched``), so a continued exploration goes on with it.

**Continuing with other rules.** The semi-naive search of an e-graph explored before goes on from
where it stopped, which is right only for the rules that were searched up to there. A rule the
last exploration did not run (none of its rules had the same name and key,
:func:`relsat.engine.compile.rule_key`: a rule added, renamed, edited, or with its guards now
ignored)
gets a start of its own at 0, the same mechanism as after a ban, so its first search sees the
whole e-graph.

**Runtime phases.** Given a second program (``runtime``: the single-pattern rules marked
``runtime``, the fusions onnxruntime makes when it loads a model), the e-graph's first iteration
opens with phases of that program alone, repeated while they change the e-graph
(:data:`RUNTIME_ROUNDS` at most), before its multi-pattern phase: an ONNX import writes one
operator per node (a Conv and its Relu apart), and the multi-pattern rules, searched in the first
``k_multi`` iterations only, should see the fused units TENSAT's input format writes. A runtime
phase is a phase like the others (same statements, its own semi-naive start, stats row
``'runtime'``, limits), with the runtime program loaded in the pattern tables in its place; the
backoff scheduler does not count it.

**Phases that cannot match.** A rule matches only where the e-graph has every operator of its
left-hand side (an opaque ONNX one with its type). A phase none of whose rules finds them all
(the runtime or multi-pattern phase of a graph without convs or matmuls) is not searched, and
its program is not loaded: it finds nothing, as its search would, in 4 statements instead of
~22; the scheduler's state moves on as after a search that found nothing."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from relsat.engine.compile import Program
from relsat.engine.cycles import prefilter, ranks, remove_cycles
from relsat.engine.egraph import EGraph
from relsat.engine.facts import propagate
from relsat.engine.rebuild import Rebuilt, rebuild
from relsat.engine.relevance import neutral_rules
from relsat.engine.shapecheck import check_new
from relsat.errors import check_int


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
    banned: int = 0  # matches discarded because the backoff scheduler banned their rule

    @property
    def changed(self) -> bool:
        return self.new_enodes > 0 or self.unions > 0 or self.filtered > 0

    @property
    def net(self) -> int:
        """The change of the e-node count over the phase: added minus merged away."""
        return self.new_enodes - self.merged


@dataclass(frozen=True)
class Backoff:
    """egg's backoff scheduler with egg's defaults (those TENSAT ran with): a single-pattern rule
    with more than ``match_limit`` new matches in a phase (doubled per earlier ban) is banned for
    ``ban_length`` iterations (doubled per earlier ban) and those matches are discarded. Both
    are integers >= 1; anything else raises :class:`~relsat.errors.SettingsError`."""

    match_limit: int = 1000
    ban_length: int = 5

    def __post_init__(self) -> None:
        check_int("match_limit", self.match_limit, 1)
        check_int("ban_length", self.ban_length, 1)


#: ``until`` of a search that sees every e-node (and ``iteration`` of one that bans no rule).
NEVER = 2**31 - 1
#: Below this many e-nodes a search matches all pattern heights in one recursive statement
#: (``sql/search/match.sql``); from it on, one statement per height (``match_leaves.sql``,
#: ``match_level.sql``). The recursion saves the planning of one statement per height (~5-9 ms
#: each), but it copies every partial match found so far at each height, which grows with the
#: e-graph (measured: 35 % less search time on the k_multi = 1 benchmarks, 1.5k-6.7k e-nodes;
#: 30 % more on NasRNN and BERT at k_multi = 2, 20k-33k e-nodes).
RECURSIVE_BELOW = 10_000
#: Matches applied at a time (see :meth:`Phases._apply`): bounds the right-hand sides a phase holds
#: at once (a cross-product rule finds millions of matches) without splitting the phases of the
#: TENSAT benchmarks at k_multi <= 2 (at most 6,740 matches), whose results stay as they were.
CHUNK = 50_000
#: The phases, in the order an iteration runs them (``'runtime'`` only in the first iteration,
#: ``'multi'`` only in the first ``k_multi``).
KINDS = ("runtime", "multi", "single")
#: At most this many runtime phases (each a round of fusions: a batch norm folded into its conv,
#: then the ReLU after it; three suffice for every chain of the shipped rules, the last changing
#: nothing): a rule set whose runtime rules keep building stops there and goes on.
RUNTIME_ROUNDS = 6


class Phases:
    """Runs the phases of one exploration over one rule program."""

    def __init__(
        self,
        egraph: EGraph,
        program: Program,
        k_multi: int,
        cycle_filter: str = "off",
        chunk: int | None = None,
        backoff: Backoff | None = None,
        k_neutral: int | None = None,
        runtime: Program | None = None,
    ) -> None:
        self.eg, self.db, self.program = egraph, egraph.db, program
        self.main, self.runtime = program, runtime  # the program a phase loads, by its kind
        self._loaded: Program | None = None
        self.chunk = chunk or CHUNK
        self.backoff = backoff
        self.k_multi = k_multi
        # The neutral rules (relsat.engine.relevance) are searched in iterations < k_neutral only
        # (None: in every iteration).
        self.k_neutral = k_neutral
        self._neutral = neutral_rules(program.rules) if k_neutral is not None else []
        self._retired = False  # whether the loaded pattern nodes hold the neutral rules' retirement
        self.cycle_filter = cycle_filter
        # Where the stored e-graph's exploration stopped: the last phase's epoch per kind (the
        # semi-naive search goes on from there; a phase capped by the e-node limit does not
        # count, so that its matches not applied are found again) and the next iteration and
        # phase to run.
        ((stamp, epoch, runtime_since, multi_since, single_since, last),) = self.db.run(
            "stats/resume_point"
        )
        self.epoch = max(int(stamp), int(epoch))
        # facts of values: whether any is known, and the epoch from which e-nodes' facts are
        # still to be computed (brought up to date only before a guard reads them)
        self.facts = bool(self.db.scalar("SELECT EXISTS (SELECT 1 FROM fact)"))
        self.facts_since = self.epoch + 1
        self.until: dict[str, int] = {}
        self.since = {
            "runtime": int(runtime_since),
            "multi": int(multi_since),
            "single": int(single_since),
        }
        # the next iteration, and the first of its phases to run (KINDS order)
        self.next_iteration, self._start = 0, KINDS[0]
        if last is None:
            pass
        elif last["capped"]:  # the e-node limit cut the last phase short: run it again over
            # the e-nodes it saw (those born before it, or before the first run of it if it was
            # capped more than once: not its own additions), from the same semi-naive start
            self.next_iteration, self._start = int(last["iteration"]), last["phase"]
            self.until[last["phase"]] = int(last["first"])
        elif last["phase"] == "runtime":  # the runtime phases go on until one changes nothing
            self._start = "runtime" if last["changed"] else "multi"
        elif last["phase"] == "multi":  # stopped between the two phases of an iteration
            self.next_iteration, self._start = int(last["iteration"]), "single"
        else:
            self.next_iteration = int(last["iteration"]) + 1
        self._whole = True
        self.enodes = egraph.counts()[0]  # kept up to date by phase(): how to search
        # the e-graph's operators (search/operators.sql), read again after e-nodes were added,
        # and the (runtime program?, multi) known to have a rule they let match (_may_match)
        self._ops: set[tuple[str, int | None]] | None = None
        self._matchable: set[tuple[bool, bool]] = set()
        if last is not None:  # rules the last exploration did not run search everything
            with self.db.registered("relsat_rules", program.rule_info):
                self.db.run("search/new_rules")
        self._load(program)

    def _load(self, program: Program) -> None:
        """Load ``program`` into the pattern tables (unless it is loaded), with the scheduler's
        stored state: rules with their own semi-naive start are searched from it whatever the
        scheduler; bans hold only under the backoff scheduler."""
        if program is self._loaded:
            return
        self._loaded = None  # until the statements below have all run
        for table in ("rule_info", "pnode", "tnode", "rguard"):
            self.db.execute(f"DELETE FROM {table}")
            self.db.insert_arrow(table, getattr(program, table))
        self.db.run("apply/template_children")  # (tkid: the template children, from tnode)
        self._sync()
        self.program, self.heights, self._loaded = program, _heights(program), program

    def phases(self, iteration: int) -> list[str]:
        """The phases of ``iteration`` still to run, in order (:data:`KINDS`)."""
        kinds = ["single"]
        if iteration < self.k_multi:
            kinds.insert(0, "multi")
            if iteration == 0 and self.runtime is not None:
                kinds.insert(0, "runtime")
        if iteration == self.next_iteration:  # a continued exploration: where it stopped
            kinds = [k for k in kinds if KINDS.index(k) >= KINDS.index(self._start)]
        return kinds

    def _may_match(self, program: Program, *, multi: bool) -> bool:
        """Whether some rule of ``program`` of the kind ``multi`` finds every operator of its
        left-hand side among the e-graph's (:attr:`Program.lhs_ops`); if none does, the phase has no
        match, and its search (and, for a program not loaded, the loading) is skipped: on a
        small e-graph these statements are most of a phase's time, whatever they find. Once
        true, true for good (the e-graph's operators only grow): not asked again."""
        known = (program is self.runtime, multi)
        if known in self._matchable:
            return True
        if self._ops is None:  # an opaque e-node also as (opaque, None): its key not matched
            rows = self.db.run("search/operators")
            self._ops = {(str(op), key) for op, key in rows} | {(str(op), None) for op, _ in rows}
        if not any(need <= self._ops for need in program.lhs_ops[multi]):
            return False
        self._matchable.add(known)
        return True

    def search(
        self, *, multi: bool, since: int, until: int = NEVER, iteration: int = NEVER
    ) -> None:
        """Fill ``match`` with the phase's matches that involve an e-node stamped >= ``since``
        (or the rule's own start after a ban), among the e-nodes born before ``until``, of the
        rules not banned at ``iteration``."""
        self.db.run("search/reset")
        if (
            self._neutral
            and not self._retired
            and iteration >= (self.k_neutral or 0)
            and self.program is self.main  # (rule ids of the main program)
        ):
            self.db.run("search/retire_rules", rules=self._neutral, never=NEVER)
            self._retired = True
        args: dict[str, Any] = {
            "multi": multi,
            "since": since,
            "until": until,
            "iteration": iteration,
        }
        if self.enodes < RECURSIVE_BELOW:
            self.db.run("search/match", **args)
        else:
            ((found,),) = self.db.run("search/match_leaves", **args)
            for h in range(1, self.heights[multi] + 1):
                if not found:  # every node of height h needs a match of height h - 1
                    break
                ((found,),) = self.db.run("search/match_level", h=h, **args)
        self.db.run("search/collect_multi" if multi else "search/collect_single")

    def phase(self, iteration: int, kind: str, *, budget: int) -> IterationStats:
        """Run one phase of ``kind`` (:data:`KINDS`), adding at most ``budget`` e-nodes; its
        stats row is stored. Run it in a transaction: an exception leaves the program to load
        again (a rollback may have undone a load)."""
        try:
            return self._phase(iteration, kind, budget)
        except BaseException:
            self._loaded = None
            raise

    def _phase(self, iteration: int, kind: str, budget: int) -> IterationStats:
        db = self.db
        before = db.counters.snapshot()
        self.epoch += 1
        t0 = time.perf_counter()
        multi = kind == "multi"
        program = self.runtime if kind == "runtime" else self.main
        assert program is not None, "a runtime phase needs a runtime program"
        since, until = self.since[kind], self.until.pop(kind, NEVER)
        banned, pending, guarded, conditioned, deriving = 0, 0, False, None, None
        searched = self._may_match(program, multi=multi)
        if searched:
            self._load(program)
            self.search(multi=multi, since=since, until=until, iteration=iteration)
        else:  # no match: the statements that would find none are not run
            db.run("search/reset")
        if program is self.main:  # the scheduler counts the phases of the main program only
            self._load(program)
            banned = self._schedule(iteration, since, multi=multi)
        t1 = time.perf_counter()
        if searched:
            ((pending, guarded, conditioned, deriving),) = db.run("apply/pending")
        cycle_s = 0.0
        if pending:
            if multi and self.cycle_filter != "off":
                ranks(db)
                cycle_s = time.perf_counter() - t1
            if guarded:
                db.run("apply/check_guards")
            # the generated statements, with the cases of the rules matched only
            valued = [r for r in conditioned or () if r in self.program.value_rules]
            if valued and db.scalar(
                "SELECT EXISTS (SELECT 1 FROM match WHERE ok AND list_contains($r, rule))",
                {"r": valued},
            ):
                self.refresh_facts()  # the facts these matches' guards read
            if conditioned and (sql := self.program.cond_for(conditioned)) is not None:
                db.execute(sql)  # 'where' conditions
            if deriving and (sql := self.program.derive_for(deriving)) is not None:
                db.execute(sql)  # values right-hand sides compute
            cycle_s += self._apply(pending, multi=multi, budget=budget)
        t2 = time.perf_counter()
        t1b = t1 + cycle_s
        matches = applied = rejected_cycle = capped = new_enodes = 0
        rebuilt = Rebuilt(0, 0)
        if pending:  # nothing matched: nothing to count, rebuild or check for cycles
            per_rule = db.run("stats/rule_counts", iteration=iteration)
            matches, applied, _, rejected_cycle, new_enodes, capped = (
                sum(r[i] for r in per_rule) for i in range(2, 8)
            )
            rebuilt = rebuild(db, self.epoch, facts=self.facts)
        matches += banned
        t3 = time.perf_counter()
        # The first post-pass of a run looks at everything (the stored e-graph may come from a
        # run with another cycle filter); later ones only where the phase changed something.
        filtered = 0
        if self.cycle_filter == "efficient" and (new_enodes or rebuilt.unions):
            filtered = remove_cycles(db, None if self._whole else self.epoch)
            self._whole = False
        cycle_s += time.perf_counter() - t3
        enodes, eclasses = self.eg.counts()
        self.enodes = enodes
        if new_enodes:
            self._ops = None
        used = db.counters.since(before)
        stats = IterationStats(
            iteration,
            kind,
            matches,
            applied,
            matches - applied - rejected_cycle - capped - banned,
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
            banned,
        )
        if capped:  # to be run again, here or in a continued run: over the e-nodes its first
            # run saw, from the same semi-naive start (as resume_point.sql finds it stored)
            self.until[kind] = min(until, self.epoch)
        else:  # the next search of this kind starts here; after re-running a capped phase,
            # which saw only the e-nodes born before it, at the capped phase (its additions)
            self.since[kind] = min(self.epoch, until)
        fields = asdict(stats)
        db.execute(
            "INSERT INTO iteration_stats VALUES (" + ", ".join(f"${k}" for k in fields) + ")",
            fields,
        )
        return stats

    def refresh_facts(self) -> None:
        """Bring table ``fact`` up to date: the facts of the e-nodes built or re-canonicalized
        since it last was (:func:`relsat.engine.facts.propagate`)."""
        self.facts = propagate(self.db, self.facts_since, known=self.facts)
        # called within a phase (before its guards are checked), the e-nodes that phase then
        # builds or re-canonicalizes are stamped with its epoch: they are still to be computed
        self.facts_since = self.epoch

    def _schedule(self, iteration: int, since: int, *, multi: bool) -> int:
        """The scheduler after a search (see the module docstring): after a single-pattern one,
        under backoff, ban the rules over their threshold and discard their matches; the rules
        searched go on from the phase's start, not their own. Returns the matches discarded."""
        db, backoff = self.db, self.backoff
        banned = 0
        if backoff is not None and not multi and since > 0:  # the first search is never limited
            over = db.run("search/over_limit", limit=backoff.match_limit, since=since)
            if over:
                banned = sum(int(r[1]) for r in over)
                db.run(
                    "search/ban",
                    names=[r[0] for r in over],
                    sinces=[int(r[2]) for r in over],
                    # doubled per earlier ban; never past NEVER
                    untils=[
                        min(iteration + (backoff.ban_length << min(int(r[3]), 30)), NEVER)
                        for r in over
                    ],
                    times=[int(r[3]) + 1 for r in over],
                    iteration=iteration,
                )
        if self._own_since or banned:
            db.run("search/searched", iteration=iteration, multi=multi)
            self._sync()
        return banned

    def lift_bans(self, iteration: int) -> bool:
        """At saturation: move every ban forward so that the first ends now (the rules it held
        are searched in the next iteration). Returns whether any rule was banned."""
        if self.backoff is None:
            return False
        ((moved,),) = self.db.run("search/lift_bans", iteration=iteration)
        if moved:
            self._sync()
        return bool(moved)

    def _sync(self) -> None:
        """Copy the scheduler's stored state into the loaded pattern nodes."""
        ((own,),) = self.db.run("search/sync_schedule", enforce=self.backoff is not None)
        self._own_since = bool(own)
        self._retired = False  # the sync rewrote every banned rule's ``banned_until``

    def _apply(self, pending: int, *, multi: bool, budget: int) -> float:
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
            db.run("apply/instantiate", lo=lo, hi=hi)
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


def _heights(program: Program) -> dict[bool, int]:
    """The tallest left-hand-side pattern of ``program``'s multi-pattern (True) and
    single-pattern (False) rules."""
    pnode = program.pnode.to_pydict()
    return {
        kind: max(
            (h for h, m in zip(pnode["height"], pnode["multi"], strict=True) if m == kind),
            default=0,
        )
        for kind in (True, False)
    }
