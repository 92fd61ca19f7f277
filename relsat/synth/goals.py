"""Goals: fused kernels (and identities) whose spelled-out forms the synthesizer looks for
(``relsat rules synthesize --goals``).

A goal is a term over fresh variables (a tensor ``?x``, a scale ``?g`` and bias ``?b`` of its
last dimension, an epsilon or alpha as a float variable) and the vocabulary its spellings are
sought in: operators and the float32 constants exporters write (sqrt 2 = 1.4142135, 1/sqrt 2 =
0.70710677, sqrt(2/pi) = 0.7978846, 0.044715, ...). A float variable is a rank-0 tensor in the
search, at a fixed value; in a rule it is ``(scalar ?eps:float)``, the fused kernel's parameter
on the right. Per goal: the terms over its table variables are enumerated bottom-up to ``table``
operators, one per value (:class:`~relsat.synth.terms.Terms`, element-wise operators
broadcasting), then :class:`~relsat.synth.search.Search` puts spellings together top-down (the
goal's scale and bias vectors only there: ``outer``). Each spelling becomes ``spelling => goal``,
checked as every synthesized rule is (:func:`~relsat.synth.verify.verify`; the edge cases at the
search's parameter values) and, the goal being a fused kernel, in onnxruntime too
(:mod:`relsat.rewrite.ortcheck`: the rule's ``checked:`` comment says what onnxruntime gave), and
is kept if it passes.

>>> s = spell(GoalSettings(goals=("quickgelu",)))
>>> [str(r.rhs[0]) for r in s.rules]  # x * sigmoid(x * alpha), in either operand order
['(quickgelu ?alpha ?x)']
>>> sorted(str(s.rules[0].lhs[0]).replace("(", " ").replace(")", " ").split())
['?alpha', '?x', '?x', 'ewmul', 'ewmul', 'scalar', 'sigmoid']
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from relsat.errors import RuleError, SettingsError, check_number
from relsat.graph.ops import f32_bits
from relsat.rewrite.exprs import Param
from relsat.rewrite.params import specialize
from relsat.rewrite.rulefile import format_rules, parse_rules
from relsat.rewrite.rules import Pattern, Rule, Term, Var
from relsat.synth.candidates import size_of
from relsat.synth.search import Search, canonical_text
from relsat.synth.terms import Terms
from relsat.synth.values import Evaluator
from relsat.synth.verify import edge_case, verify

__all__ = ["GOALS", "Goal", "GoalSettings", "GoalStats", "Spellings", "spell"]


@dataclass(frozen=True)
class Goal:
    """One goal: ``term`` (a rule side), its ``tensors`` (name, shape; ``positive`` ones drawn
    in (0.25, 2), the others in (-2, 2)), ``floats`` (name, the value the search uses), the
    ``ops`` and ``constants`` of its vocabulary, the ``table`` size enumerated bottom-up and the
    largest ``siblings`` by default, the variables kept out of the table (``outer``), the
    ``shared`` subterms (name, term over the other variables: let-bound, each a table variable at
    the values of its term, spelled out in the rules found), and a line of ``doc``."""

    term: str
    tensors: tuple[tuple[str, tuple[int, ...]], ...]
    ops: tuple[str, ...]
    constants: tuple[float, ...] = ()
    floats: tuple[tuple[str, float], ...] = ()
    table: int = 3
    siblings: int = 1
    outer: tuple[str, ...] = ()
    positive: tuple[str, ...] = ()
    shared: tuple[tuple[str, str], ...] = ()
    doc: str = ""

    @property
    def pattern(self) -> Pattern:
        """``term`` as a pattern (float variables as typed parameters)."""
        return _parse(self.term)

    @property
    def lets(self) -> dict[str, Pattern]:
        """The ``shared`` subterms by name, as patterns."""
        return {name: _parse(text) for name, text in self.shared}


def _parse(text: str) -> Pattern:
    """A term's text as a pattern."""
    return parse_rules(f"# name: t\n{text} => {text}\n")["t"].lhs[0]


_X = ("x", (3, 4))
_NORM = "ewadd", "ewmul", "ewdiv", "ewpow", "reducemean", "sqrt"
#: The goals (``--goals`` names).
GOALS: dict[str, Goal] = {
    "gelu": Goal(
        "(gelu ?x)",
        (_X,),
        ("ewadd", "ewmul", "ewdiv", "erf"),
        (0.5, 1.0, 1.4142135, 0.70710677),
        doc="x * (1 + erf(x / sqrt 2)) / 2 (com.microsoft Gelu)",
    ),
    "gelu_tanh": Goal(
        "(gelu_tanh ?x)",
        (_X,),
        ("ewadd", "ewmul", "ewpow", "tanh"),
        (0.5, 1.0, 3.0, 0.044715, 0.7978846),
        table=4,
        doc="x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) / 2 (FastGelu)",
    ),
    "quickgelu": Goal(
        "(quickgelu ?alpha:float ?x)",
        (_X,),
        ("ewmul", "sigmoid"),
        floats=(("alpha", 1.702),),
        table=2,
        doc="x * sigmoid(alpha * x) (com.microsoft QuickGelu)",
    ),
    "silu": Goal(
        "(quickgelu 1.0 ?x)",
        (_X,),
        ("ewmul", "sigmoid"),
        table=2,
        doc="x * sigmoid(x) (SiLU, swish: com.microsoft QuickGelu at alpha 1)",
    ),
    "rmsnorm": Goal(
        "(rmsnorm ?eps:float ?x ?g)",
        (_X, ("g", (4,))),
        (*_NORM, "reciprocal"),
        (1.0, 2.0, -0.5),
        floats=(("eps", 0.2837),),
        outer=("g",),
        doc="x / sqrt(mean(x^2) + eps) * g over the last axis (RMSNormalization)",
    ),
    "layernorm": Goal(
        "(layernorm ?eps:float ?x ?g ?b)",
        (_X, ("g", (4,)), ("b", (4,))),
        (*_NORM, "ewsub"),
        (2.0,),
        floats=(("eps", 0.2837),),
        siblings=0,  # every step down takes a variable: b, g, d, eps
        outer=("g", "b", "x"),
        shared=(("d", "(ewsub ?x (reducemean ?x))"),),
        doc="(x - mean x) / sqrt(var x + eps) * g + b over the last axis (LayerNormalization); "
        "d = x - mean x used twice, let-bound: the table is over d (rmsnorm-shaped), not x",
    ),
    "rsqrt": Goal(
        "(reciprocal (sqrt ?y))",
        (("y", (3, 4)),),
        ("ewadd", "ewmul", "ewsub", "ewdiv", "reciprocal", "neg", "sqrt", "ewpow"),
        (1.0, 2.0, 0.5, -0.5),
        table=2,
        positive=("y",),
        doc="1 / sqrt(y) (the element-wise set's vocabulary)",
    ),
}


def unknown_goals(names: tuple[str, ...]) -> list[str]:
    """The names in ``names`` that are no goal of :data:`GOALS`."""
    return [n for n in names if n not in GOALS]


@dataclass(frozen=True)
class GoalSettings:
    """What to look for: ``goals`` (names in :data:`GOALS`), spellings of at most ``size``
    operators, ``slack`` operators beyond the smallest (other spellings), the ``table`` size
    (None: each goal's own), ``siblings`` (the largest table term a top-down step takes as an
    operand; None: each goal's own), ``max_targets`` per goal, ``time_limit`` (seconds, shared by
    the goals), ``seed``."""

    goals: tuple[str, ...] = tuple(GOALS)
    size: int = 11
    slack: int = 1
    table: int | None = None
    siblings: int | None = None
    max_targets: int = 2_000_000
    time_limit: float = 600.0
    seed: int = 0

    def __post_init__(self) -> None:
        bad = unknown_goals(self.goals)
        if bad or not self.goals:
            raise SettingsError("goals", ",".join(bad), f"goal names ({', '.join(GOALS)})")
        for name in ("size", "slack", "max_targets"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SettingsError(name, value, "an integer >= 0")
        for name in ("table", "siblings"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise SettingsError(name, value, "an integer >= 0 or None")
        check_number("time_limit", self.time_limit, 0)
        if self.time_limit <= 0:
            raise SettingsError("time_limit", self.time_limit, "a number > 0")


@dataclass
class GoalStats:
    """One goal's counts: table terms and classes per size, targets made and looked up, hits,
    the smallest spelling's size (None: none found), spellings, rules kept and dropped, the
    stop reason, seconds."""

    goal: str
    table: list[tuple[int, int]] = field(default_factory=list)
    targets: int = 0
    looked: int = 0
    hits: int = 0
    smallest: int | None = None
    spellings: int = 0
    kept: int = 0
    dropped: int = 0
    stop: str = ""
    seconds: float = 0.0

    def line(self) -> str:
        table = ", ".join(f"{t}/{c}" for t, c in self.table)
        found = f"smallest {self.smallest} operators" if self.smallest is not None else "none"
        return (
            f"goal {self.goal}: table (terms/classes per size) {table}; {self.targets} targets, "
            f"{self.hits} hits; {found}; {self.spellings} spellings, {self.kept} kept, "
            f"{self.dropped} dropped; {self.stop}; {self.seconds:.1f} s"
        )


@dataclass(frozen=True)
class Spellings:
    """The result: the rules kept (each verified), per-goal stats, the rules dropped (why)."""

    settings: GoalSettings
    rules: tuple[Rule, ...]
    goals: tuple[GoalStats, ...]
    seconds: float
    dropped: tuple[tuple[Rule, str], ...] = ()

    def text(self) -> str:
        """The rule file: a header (settings, per-goal lines, the drops), then the rules."""
        s = self.settings
        header = [
            f"Synthesized by relsat rules synthesize --goals {','.join(s.goals)}: size "
            f"{s.size}, slack {s.slack}, siblings {_or_own(s.siblings)}, table {_or_own(s.table)}, "
            f"seed {s.seed}",
            *(g.line() for g in self.goals),
            f"{len(self.rules)} rules",
            *(f"dropped: {r.lhs[0]} => {r.rhs[0]}: {why}" for r, why in self.dropped),
        ]
        return format_rules(self.rules, header="\n".join(header))

    def write(self, path: str | Path) -> None:
        """Write :meth:`text` to ``path`` atomically."""
        from relsat.pipeline.save import write_atomic

        write_atomic(Path(path), self.text().encode())


def spell(settings: GoalSettings, *, progress: Callable[[str], None] | None = None) -> Spellings:
    """Look for each goal's spellings (the module docstring); ``progress`` gets a line per
    step."""
    say = progress or (lambda _: None)
    start = time.perf_counter()
    rules: list[Rule] = []
    dropped: list[tuple[Rule, str]] = []
    stats: list[GoalStats] = []
    for k, name in enumerate(settings.goals):
        left = start + settings.time_limit - time.perf_counter()
        deadline = time.perf_counter() + left / (len(settings.goals) - k)
        st = _one(name, GOALS[name], settings, deadline, rules, dropped, say)
        stats.append(st)
        say(st.line())
    return Spellings(
        settings, tuple(rules), tuple(stats), time.perf_counter() - start, tuple(dropped)
    )


def _values(goal: Goal, seed: int) -> dict[str, np.ndarray]:
    """The variables' values given: float variables at their value (float32), positive
    tensors drawn in (0.25, 2)."""
    rng = np.random.default_rng(seed + 1)
    out = {n: np.array(float(np.float32(v))) for n, v in goal.floats}
    out |= {n: rng.uniform(0.25, 2.0, size=s) for n, s in goal.tensors if n in goal.positive}
    return out


def _let(
    goal: Goal,
    shapes: tuple[tuple[str, tuple[int, ...]], ...],
    values: dict[str, np.ndarray],
    seed: int,
) -> dict[str, np.ndarray]:
    """The values of ``goal``'s shared subterms, from the variables' values the table's
    evaluator draws (the same seed and order: the shared variables come last, so they change
    no other draw); added to ``values``."""
    if not goal.shared:
        return {}
    ev = Evaluator(shapes, seed, values=values)
    floats = {n: float(np.float32(v)) for n, v in goal.floats}
    out = {}
    for name, term in goal.lets.items():
        bound = _bind(term, floats)
        assert isinstance(bound, Pattern)
        value = ev.floats_of(bound)
        assert value is not None, f"shared subterm {name} = {term} cannot be evaluated"
        out[name] = np.array(value)
    values |= out
    return out


def _unlet(term: Term, lets: dict[str, Pattern]) -> Term:
    """``term`` with its shared variables spelled out."""
    if isinstance(term, Var) and term.name in lets:
        return lets[term.name]
    if isinstance(term, Pattern):
        return Pattern(term.op, tuple(_unlet(a, lets) for a in term.args))
    return term


def _bind(term: Term, values: dict[str, float]) -> Term:
    """``term`` with its float parameters as literals (float32 bits)."""
    if isinstance(term, Param):
        return f32_bits(values[term.name])
    if isinstance(term, Pattern):
        return Pattern(term.op, tuple(_bind(a, values) for a in term.args))
    return term


def _typed(term: Term, floats: set[str]) -> Term:
    """A spelling's float variables as ``(scalar ?name:float)``."""
    if isinstance(term, Var) and term.name in floats:
        return Pattern("scalar", (Param(term.name, "float"),))
    if isinstance(term, Pattern):
        return Pattern(term.op, tuple(_typed(a, floats) for a in term.args))
    return term


def _one(
    name: str,
    goal: Goal,
    settings: GoalSettings,
    deadline: float,
    rules: list[Rule],
    dropped: list[tuple[Rule, str]],
    say: Callable[[str], None],
) -> GoalStats:
    st = GoalStats(name)
    t0 = time.perf_counter()
    floats = {n: float(np.float32(v)) for n, v in goal.floats}
    shapes = (*goal.tensors, *((n, ()) for n in floats))
    ops = goal.ops + (("scalar",) if goal.constants else ())
    values = _values(goal, settings.seed)
    lets = _let(goal, shapes, values, settings.seed)
    terms = Terms(
        (*shapes, *((n, v.shape) for n, v in lets.items())),
        ops,
        settings.seed,
        constants=goal.constants,
        broadcast=True,
        values=values,
        hidden=goal.outer,
    )
    try:
        target = _bind(goal.pattern, floats)
        assert isinstance(target, Pattern)
        value = terms.evaluator.floats_of(target)
        assert value is not None, f"goal {name} cannot be evaluated"
        table = settings.table if settings.table is not None else goal.table
        st.table.append(terms.counts(0))
        for n in range(1, table + 1):
            if not terms.grow(n, deadline):
                st.stop = f"time limit: enumerating the table at size {n}"
                break
            st.table.append(terms.counts(n))
            say(f"goal {name}: table size {n}: {st.table[-1][0]} terms")
        else:
            search = Search(
                terms,
                value,
                ops,
                table=table,
                siblings=goal.siblings if settings.siblings is None else settings.siblings,
                slack=settings.slack,
                extra=goal.outer,
                seed=settings.seed,
            )
            st.stop = search.run(settings.size, deadline, settings.max_targets)
            st.targets, st.looked, st.hits = search.targets, search.looked, len(search.hits)
            if search.top <= settings.size:
                st.smallest = int(search.top)
                limit = min(settings.size, st.smallest + settings.slack)
                _rules(goal, name, search, limit, floats, shapes, settings, st, rules, dropped)
    finally:
        terms.close()
    st.seconds = time.perf_counter() - t0
    return st


#: The most spellings of one goal turned into rules and checked.
_MAX_SPELLINGS = 48


def _rules(
    goal: Goal,
    name: str,
    search: Search,
    limit: int,
    floats: dict[str, float],
    shapes: tuple[tuple[str, tuple[int, ...]], ...],
    settings: GoalSettings,
    st: GoalStats,
    rules: list[Rule],
    dropped: list[tuple[Rule, str]],
) -> None:
    """Turn the spellings of at most ``limit`` operators into checked rules."""
    seen = {canonical_text(goal.pattern)}
    found: list[Pattern] = []
    for term, _ in search.spellings(limit):
        if _nested_quotient(term):
            continue
        typed = _typed(_unlet(term, goal.lets), set(floats))
        text = canonical_text(typed) if isinstance(typed, Pattern) else ""
        if isinstance(typed, Pattern) and text not in seen:
            seen.add(text)
            found.append(typed)
    found.sort(key=lambda p: (size_of(p), canonical_text(p)))
    st.spellings = len(found)
    for k, lhs in enumerate(found[:_MAX_SPELLINGS]):
        try:
            rule = Rule(
                f"syn-{name}-{k + 1:02d}", (lhs,), (goal.pattern,), sources=("synthesized",)
            )
        except RuleError:  # a spelling without one of the goal's variables: no rule
            st.dropped += 1
            continue
        concrete = specialize(rule, floats)[0] if rule.params else rule
        why = edge_case(concrete, dict(shapes), settings.seed)
        outcome = verify(rule, seed=settings.seed, ort=True)
        if why is None and outcome.kept:
            st.kept += 1
            rules.append(outcome.rule)
        else:
            st.dropped += 1
            dropped.append((rule, why or outcome.detail))


def _nested_quotient(term: Term) -> bool:
    """Whether ``term`` divides by a quotient or a product, or takes the reciprocal of one
    (``g / (sqrt(v) / x)``, ``reciprocal(a / b)``): no exporter writes those, and the slack
    fills with them (the element-wise identities that relate them are the element-wise set's)."""
    if not isinstance(term, Pattern):
        return False
    inner = term.args[-1] if term.op in ("ewdiv", "reciprocal") else None
    if isinstance(inner, Pattern) and inner.op in ("ewdiv", "ewmul", "reciprocal"):
        return True
    return any(_nested_quotient(a) for a in term.args)


def _or_own(value: int | None) -> str:
    """A per-goal setting in the header: its value, or each goal's own."""
    return "each goal's own" if value is None else str(value)
