"""The synthesis loop: enumerate, fingerprint, prune, minimize, verify, one depth at a time.

Per depth ``n`` (operators per side): the terms of size ``n`` are enumerated
(:class:`~relsat.synth.terms.Terms`), each candidate equation is pruned or turned into rules
(:mod:`relsat.synth.candidates`), smallest first. Then, Ruler's loop: one e-graph holding every
remaining equation is saturated with the rules kept so far and the equations it derives are
dropped (:func:`~relsat.synth.derive.derive`); the next ``batch`` equations are checked
(:func:`~relsat.synth.verify.verify`) and their rules kept; until no equation remains. Then the
two-output candidates of depth ``n`` (two terms equal to the split pieces of one term, TASO's
multi-output graphs) become multi-pattern rules (:func:`~relsat.synth.candidates.merge_rule`),
each checked. They are not minimized by derivation: the single-pattern rules ``piece => term``
found beside them put both sides of every such pair in one e-class, so a derivation says nothing
about the merging direction; they stay out of the derivations of later depths too (a rule that
merges any two matches grows those e-graphs quadratically). Every rule kept has passed
``relsat rules check``. Hitting the time limit is no error: the rules kept so
far are the result, and :attr:`Synthesis.stop` says where it stopped.

>>> s = synthesize(Settings(ops=("ewadd",), depth=2))
>>> [f"{r.lhs[0]} => {r.rhs[0]}" for r in s.rules[:2]]
['(ewadd ?b ?a) => (ewadd ?a ?b)', '(ewadd (ewadd ?a ?b) ?c) => (ewadd ?a (ewadd ?b ?c))']
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from relsat.engine.explore import Limits
from relsat.errors import SettingsError, check_number
from relsat.rewrite.rulefile import format_rules
from relsat.rewrite.rules import Pattern, Rule, Var
from relsat.synth.candidates import PRUNE_REASONS, Seen, key, merge_rule, orient, size_of
from relsat.synth.derive import DERIVE_LIMITS, derive
from relsat.synth.terms import Terms
from relsat.synth.verify import verify
from relsat.synth.vocab import TENSAT_OPS, default_vars, default_weights, unknown_ops

__all__ = ["DepthStats", "Settings", "Synthesis", "synthesize"]


@dataclass(frozen=True)
class Settings:
    """What to synthesize: ``ops`` (enumerable operators), ``depth`` (operators per side, >= 1),
    ``time_limit`` (seconds, > 0), ``vars`` (name, shape) pairs (default: chosen from the ops,
    :func:`~relsat.synth.vocab.default_vars`), ``weights`` (the variables that are weights,
    default: those of the default variables), ``strides`` (of the convolutions enumerated:
    stride 2 for TENSAT's strided merge rules), ``batch`` (equations checked between two
    derivations), ``seed`` (random inputs and check draws), ``limits`` (of each derivation)."""

    ops: tuple[str, ...] = TENSAT_OPS
    depth: int = 2
    time_limit: float = 600.0
    vars: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    weights: tuple[str, ...] | None = None
    strides: tuple[int, ...] = (1, 2)
    batch: int = 2
    seed: int = 0
    limits: Limits = DERIVE_LIMITS

    def __post_init__(self) -> None:
        bad = unknown_ops(self.ops)
        if bad or not self.ops:
            raise SettingsError("ops", ",".join(bad) or "", "a list of enumerable operators")
        if not isinstance(self.depth, int) or isinstance(self.depth, bool) or self.depth < 1:
            raise SettingsError("depth", self.depth, "an integer >= 1")
        check_number("time_limit", self.time_limit, 0)
        if self.time_limit <= 0:
            raise SettingsError("time_limit", self.time_limit, "a number > 0")
        if not self.strides or any(
            not isinstance(s, int) or isinstance(s, bool) or s < 1 for s in self.strides
        ):
            raise SettingsError("strides", self.strides, "integers >= 1")

    @property
    def variables(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        return self.vars if self.vars is not None else tuple(default_vars(self.ops))

    @property
    def weight_vars(self) -> tuple[str, ...]:
        return self.weights if self.weights is not None else default_weights(self.ops)


@dataclass
class DepthStats:
    """One depth's counts: terms and classes enumerated, candidate equations, two-output
    candidates (``merges``: multi-pattern rules to check), collisions (float fingerprints equal,
    exact ones not), pruned by reason, rules from the rest, equations derived by the rules kept,
    rules checked, passed (``ok``, ``guarded``), dropped, kept (``merges_kept`` of them
    multi-pattern); seconds."""

    depth: int
    terms: int = 0
    classes: int = 0
    equations: int = 0
    merges: int = 0
    collisions: int = 0
    pruned: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PRUNE_REASONS, 0))
    rules: int = 0
    derived: int = 0
    checked: int = 0
    ok: int = 0
    guarded: int = 0
    dropped: int = 0
    kept: int = 0
    merges_kept: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        pruned = ", ".join(f"{n} {r}" for r, n in self.pruned.items() if n)
        return (
            f"depth {self.depth}: {self.terms} terms, {self.classes} classes, {self.equations} "
            f"equations ({pruned or 'none pruned'}; {self.collisions} collisions), "
            f"{self.derived} derived, {self.checked} rules checked: {self.ok} ok, "
            f"{self.guarded} guarded, {self.dropped} dropped; {self.kept} kept "
            f"({self.merges_kept} of {self.merges} multi-pattern), {self.seconds:.1f} s"
        )


@dataclass(frozen=True)
class Synthesis:
    """The result: the rules kept (each verified), per-depth stats, why it stopped, the drops."""

    settings: Settings
    rules: tuple[Rule, ...]
    depths: tuple[DepthStats, ...]
    stop: str
    seconds: float
    dropped: tuple[tuple[Rule, str], ...] = ()

    def text(self) -> str:
        """The rule file: a header (settings, stop reason, counts), then the rules."""
        s = self.settings
        header = (
            f"Synthesized by relsat rules synthesize: ops {','.join(s.ops)}, depth {s.depth}, "
            f"strides {','.join(map(str, s.strides))}, seed {s.seed}\nvariables: "
            + ", ".join(f"?{n} {list(sh)}" for n, sh in s.variables)
            + f"\n{len(self.rules)} rules; stop: {self.stop}"
        )
        return format_rules(self.rules, header=header)

    def write(self, path: str | Path) -> None:
        """Write :meth:`text` to ``path`` atomically (a complete file or none)."""
        from relsat.pipeline.save import write_atomic

        write_atomic(Path(path), self.text().encode())


#: Equations (in batches) in one derivation's e-graph: the next ones only.
_WINDOW = 16


@dataclass
class _Equation:
    t: Pattern
    r: Pattern
    rules: list[Rule]


def synthesize(
    settings: Settings,
    *,
    progress: Callable[[str], None] | None = None,
    on_depth: Callable[[Synthesis], None] | None = None,
) -> Synthesis:
    """Run the loop of the module docstring; ``progress`` gets a line per step, ``on_depth``
    the result so far after each finished depth."""
    say = progress or (lambda _: None)
    start = time.perf_counter()
    deadline = start + settings.time_limit
    terms = Terms(
        settings.variables, settings.ops, settings.seed, settings.weight_vars, settings.strides
    )
    kept: list[Rule] = []
    merges: list[Rule] = []  # multi-pattern rules kept: not used in derivations
    dropped: list[tuple[Rule, str]] = []
    depths: list[DepthStats] = []
    stop = f"done: depth {settings.depth} complete"
    seen = Seen()
    try:
        for n in range(1, settings.depth + 1):
            stats = DepthStats(n)
            depths.append(stats)
            t0 = time.perf_counter()
            if not terms.grow(n, deadline):
                stop = f"time limit: during the enumeration of depth {n}"
                break
            stats.terms, stats.classes = terms.counts(n)
            say(f"depth {n}: {stats.terms} terms, {stats.classes} classes")
            eqs = _equations(terms, n, seen, stats)
            say(f"depth {n}: {stats.equations} equations, {len(eqs)} left after pruning")
            finished = _minimize(eqs, kept, dropped, settings, deadline, stats, say)
            if finished:
                found = _merges(terms, n, seen, stats)
                finished = _check(found, merges, dropped, settings, deadline, stats)
            stats.seconds = time.perf_counter() - t0
            say(stats.line())
            if not finished:
                stop = f"time limit: depth {n}, {len(eqs)} equations not yet decided"
                if not eqs:
                    stop = f"time limit: depth {n}, checking the multi-pattern rules"
                break
            if on_depth is not None:
                on_depth(
                    _result(settings, kept + merges, depths, f"after depth {n}", start, dropped)
                )
    finally:
        terms.close()
    return _result(settings, kept + merges, depths, stop, start, dropped)


def _result(
    settings: Settings,
    kept: Sequence[Rule],
    depths: Sequence[DepthStats],
    stop: str,
    start: float,
    dropped: Sequence[tuple[Rule, str]],
) -> Synthesis:
    seconds = time.perf_counter() - start
    return Synthesis(settings, tuple(kept), tuple(depths), stop, seconds, tuple(dropped))


def _equations(terms: Terms, n: int, seen: Seen, stats: DepthStats) -> list[_Equation]:
    """The candidate equations of depth ``n`` that survive pruning, smallest first."""
    eqs: list[_Equation] = []
    for t_id, r_id, collision in terms.candidates(n):
        stats.equations += 1
        if collision:
            stats.collisions += 1
            continue
        t, r = terms.pattern[t_id], terms.pattern[r_id]
        why = seen.prune(t, r)
        if why is not None:
            stats.pruned[why] += 1
            continue
        assert isinstance(t, Pattern) and isinstance(r, Pattern)
        eqs.append(_Equation(t, r, []))
    eqs.sort(key=lambda e: (size_of(e.t) + size_of(e.r), -len(set(e.t.vars())), key(e.t, e.r)))
    for i, e in enumerate(eqs):
        e.rules = orient(e.t, e.r, f"syn-d{n}-{i + 1:03d}")
        stats.rules += len(e.rules)
    return [e for e in eqs if e.rules]


def _merges(terms: Terms, n: int, seen: Seen, stats: DepthStats) -> list[Rule]:
    """The multi-pattern rules of depth ``n``'s two-output candidates, not seen before: split
    pieces each equal to a smaller term, and equations ``concat_k(t0, t1) = u`` (``u``'s pieces
    are ``t0`` and ``t1``; ``u`` need not be its class's representative, which the pieces'
    enumeration needs)."""
    out: list[Rule] = []

    def add(t: tuple[Pattern | Var, Pattern | Var], pieces: tuple[Pattern, Pattern]) -> None:
        rule = merge_rule(t, pieces, f"syn-d{n}-m{len(out) + 1:03d}", seen)
        if rule is not None:
            out.append(rule)

    for p0, p1, r0, r1 in terms.split_pairs(n):
        piece0, piece1 = terms.pattern[p0], terms.pattern[p1]
        assert isinstance(piece0, Pattern) and isinstance(piece1, Pattern)
        add((terms.pattern[r0], terms.pattern[r1]), (piece0, piece1))
    for c, u, axis in terms.concat_pairs(n):
        cat = terms.pattern[c]
        assert isinstance(cat, Pattern)
        *_, t0, t1 = cat.args
        assert isinstance(t0, Pattern | Var) and isinstance(t1, Pattern | Var)
        cut = Pattern("split", (axis, terms.pattern[u]))
        if _merging(t0, t1):
            add((t0, t1), (Pattern("split_0", (cut,)), Pattern("split_1", (cut,))))
    stats.merges = len(out)
    return out


def _merging(t0: object, t1: object) -> bool:
    """Whether a concat's operands ``t0``, ``t1`` make a merge worth a rule: the same operator
    on a shared variable (two convs of one input, two matmuls of one weight). Others are the
    concat's own identities (``concat(relu(x), y*y) = relu(concat(x, y*y))``) or merge any two
    convolutions of a graph, which squares its e-graph (measured: NasNet-A 15.5 % instead of
    18.2 % with them)."""
    return (
        isinstance(t0, Pattern)
        and isinstance(t1, Pattern)
        and t0.op == t1.op
        and bool(set(t0.vars()) & set(t1.vars()))
    )


def _check(
    rules: Sequence[Rule],
    kept: list[Rule],
    dropped: list[tuple[Rule, str]],
    settings: Settings,
    deadline: float,
    stats: DepthStats,
) -> bool:
    """Verify each of ``rules`` and keep what passes; False when the deadline came first."""
    for rule in rules:
        if time.perf_counter() > deadline:
            return False
        outcome = verify(rule, seed=settings.seed, shapes=dict(settings.variables))
        stats.checked += 1
        if outcome.kept:
            setattr(stats, outcome.status, getattr(stats, outcome.status) + 1)
            stats.kept += 1
            stats.merges_kept += rule.is_multi
            kept.append(outcome.rule)
        else:
            stats.dropped += 1
            dropped.append((rule, outcome.detail))
    return True


def _minimize(
    eqs: list[_Equation],
    kept: list[Rule],
    dropped: list[tuple[Rule, str]],
    settings: Settings,
    deadline: float,
    stats: DepthStats,
    say: Callable[[str], None],
) -> bool:
    """Ruler's loop over ``eqs`` (consumed): drop what ``kept`` derives, check a batch, keep
    what passes; False when the deadline came first."""
    shapes = dict(settings.variables)
    while eqs:
        left = deadline - time.perf_counter()
        if left <= 0:
            return False
        if kept:  # the next window of equations, not all: the e-graph stays small
            window, rest = eqs[: _WINDOW * settings.batch], eqs[_WINDOW * settings.batch :]
            limits = replace(settings.limits, seconds=min(settings.limits.seconds, left))
            found = derive([[(e.t, e.r)] for e in window], shapes, kept, limits).derivations
            stats.derived += sum(d.derived for d in found)
            eqs[:] = [e for e, d in zip(window, found, strict=True) if not d.derived] + rest
        batch, eqs[:] = eqs[: settings.batch], eqs[settings.batch :]
        if not _check(
            [r for e in batch for r in e.rules], kept, dropped, settings, deadline, stats
        ):
            return False
        say(f"depth {stats.depth}: {stats.kept} kept, {len(eqs)} equations left")
    return True
