"""Derivability by saturation: do these rules put both sides of an equation in one e-class?

All equations go into **one** e-graph (a graph whose outputs are every side, over shared
inputs), which relsat's engine explores with the given rules within :class:`Limits`; after
each phase the outputs' classes are read, so each equation gets the first iteration at which
its sides met. One exploration serves every equation: the cost of a statement is paid once.
Sides over shared inputs do not weaken the answer: inputs are opaque leaves, so whatever the
rules derive holds for every value of them.

>>> from relsat.rewrite.rulefile import parse_rules
>>> from relsat.rewrite.rules import Pattern, Var
>>> comm = parse_rules("# name: c\\n(ewmul ?a ?b) => (ewmul ?b ?a)\\n")
>>> ab, ba = Pattern("ewmul", (Var("a"), Var("b"))), Pattern("ewmul", (Var("b"), Var("a")))
>>> [d.iteration for d in derive([[(ab, ba)]], {"a": (2,), "b": (2,)}, comm).derivations]
[1]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from relsat.engine.egraph import EGraph
from relsat.engine.explore import Exploration, Limits, Schedule, explore
from relsat.errors import GraphError
from relsat.graph.builder import GraphBuilder, Tensor
from relsat.rewrite.instantiate import Memo, instantiate
from relsat.rewrite.rules import Pattern, Rule, Var

__all__ = ["DERIVE_LIMITS", "Derivation", "Derived", "derive", "derive_rules"]

#: Limits of a derivation: small e-graphs, a few iterations (Ruler's minimization runs short).
#: Small on purpose: one iteration of a few hundred rules can take an e-graph far past its node
#: limit (which is looked at between iterations), and its time and memory with it.
DERIVE_LIMITS = Limits(nodes=5_000, iterations=8, seconds=20.0)

#: Iterations that run the multi-pattern rules: two, so that a single-pattern rewrite can make a
#: pair match first (``relu(conv(x, w))`` into the fused conv); not all of them, since a rule
#: that merges any two convs of one input also merges its own output, and grows the e-graph by
#: the square of its matches in every iteration that runs it.
K_MULTI = 2

Side = Pattern | Var


@dataclass(frozen=True)
class Derivation:
    """One equation's answer: ``iteration`` at which its sides first shared an e-class (0: on
    loading), None when they never did; ``note`` says why it was not tried."""

    iteration: int | None
    note: str = ""

    @property
    def derived(self) -> bool:
        return self.iteration is not None


@dataclass(frozen=True)
class Derived:
    """What :func:`derive` found: one :class:`Derivation` per equation and the exploration
    (None when there was nothing to explore)."""

    derivations: tuple[Derivation, ...]
    exploration: Exploration | None


def derive(
    equations: Sequence[Sequence[tuple[Side, Side]]],
    shapes: Mapping[str, tuple[int, ...]],
    rules: Iterable[Rule],
    limits: Limits = DERIVE_LIMITS,
) -> Derived:
    """For each equation (one or more ``(lhs, rhs)`` pairs, all over the variables ``shapes``
    names), whether ``rules`` derive every pair of it within ``limits`` (in one e-graph)."""
    b = GraphBuilder()
    env = {n: b.input(s, name=n) for n, s in shapes.items()}
    memo: Memo = {}
    outputs: list[Tensor] = []
    spans: list[tuple[int, int] | str] = []  # each equation's output positions, or why not
    for pairs in equations:
        try:
            sides = [instantiate(b, side, env, memo) for pair in pairs for side in pair]
        except GraphError as err:
            spans.append(f"cannot be built on these shapes: {err}")
            continue
        spans.append((len(outputs), len(outputs) + len(sides)))
        outputs += sides
    rules = list(rules)
    if not outputs:
        return Derived(tuple(Derivation(None, s) for s in spans if isinstance(s, str)), None)
    egraph = EGraph.from_graph(b.build(*outputs))
    met: dict[int, int] = {}  # equation -> first iteration its pairs all met

    def look(iteration: int) -> None:
        roots = [int(r) for _, r in egraph.db.run("synth/output_roots")]
        for k, span in enumerate(spans):
            if isinstance(span, tuple) and k not in met:
                lo, hi = span
                if all(roots[i] == roots[i + 1] for i in range(lo, hi, 2)):
                    met[k] = iteration

    look(0)
    exploration = None
    if rules and len(met) < sum(isinstance(s, tuple) for s in spans):
        schedule = Schedule(k_multi=min(K_MULTI, limits.iterations))
        exploration = explore(
            egraph, rules, limits, schedule, on_phase=lambda s: look(s.iteration + 1)
        )
    egraph.close()
    out = [
        Derivation(None, span) if isinstance(span, str) else Derivation(met.get(k))
        for k, span in enumerate(spans)
    ]
    return Derived(tuple(out), exploration)


def derive_rules(
    rules: Iterable[Rule],
    using: Iterable[Rule],
    limits: Limits = DERIVE_LIMITS,
    *,
    seed: int = 0,
    tries: int = 40,
    chunk: int | None = None,
) -> Derived:
    """For each of ``rules``, whether ``using`` derives it (``relsat rules derive``): the rule
    at shapes (and parameter values) drawn where both its sides build and its guards hold, its
    variables renamed apart from the other rules'; every pair of a multi-pattern rule must meet.
    A rule with no such instance in ``tries`` draws is not tried (its note says so). ``chunk``:
    at most that many rules per e-graph (each within ``limits``: one rule whose e-graph grows
    fast does not stop the others'); None: one e-graph. The exploration reported is the last
    one that stopped at a limit, else the last."""
    rules = list(rules)
    using = list(using)
    if chunk is not None and len(rules) > chunk:
        parts = [
            derive_rules(rules[i : i + chunk], using, limits, seed=seed + i, tries=tries)
            for i in range(0, len(rules), chunk)
        ]
        limited = [
            p.exploration
            for p in parts
            if p.exploration and p.exploration.stop.value != "saturated"
        ]
        last = (
            limited[-1]
            if limited
            else next((p.exploration for p in reversed(parts) if p.exploration), None)
        )
        return Derived(tuple(d for p in parts for d in p.derivations), last)
    equations: list[list[tuple[Side, Side]]] = []
    shapes: dict[str, tuple[int, ...]] = {}
    notes: dict[int, str] = {}
    for k, rule in enumerate(rules):
        inst = _instance(rule, seed + k, tries)
        if inst is None:
            notes[k] = f"no instance where both sides build in {tries} draws"
            equations.append([])
            continue
        concrete, at = inst
        prefix = f"r{k}_"
        shapes.update({prefix + n: s for n, s in at.items()})
        equations.append(
            [
                (_renamed(a, prefix), _renamed(b, prefix))
                for a, b in zip(concrete.lhs, concrete.rhs, strict=True)
            ]
        )
    tried = [eq for eq in equations if eq]
    result = derive(tried, shapes, using, limits)
    answers = iter(result.derivations)
    out = [Derivation(None, notes[k]) if k in notes else next(answers) for k in range(len(rules))]
    return Derived(tuple(out), result.exploration)


def _instance(rule: Rule, seed: int, tries: int) -> tuple[Rule, dict[str, tuple[int, ...]]] | None:
    """``rule`` specialized at drawn parameter values and shapes where it type-checks."""
    import random

    from relsat.rewrite.check import draw
    from relsat.rewrite.params import specialize
    from relsat.rewrite.shapes import Unsolvable

    rng = random.Random(f"derive/{seed}/{rule.name}")
    for _ in range(tries):
        try:
            inst = draw(rule, rng.choice, numeric=False)
        except Unsolvable:
            return None
        if inst.kind == "typed":
            concrete = specialize(rule, inst.values)[0] if rule.params else rule
            return concrete, dict(inst.shapes)
    return None


def _renamed(term: Side, prefix: str) -> Side:
    if isinstance(term, Var):
        return Var(prefix + term.name)
    return Pattern(
        term.op,
        tuple(_renamed(a, prefix) if isinstance(a, Pattern | Var) else a for a in term.args),
    )
