"""Checking rules on random instances: types, then numbers (``relsat rules check``).

A rule is tried on shapes drawn for its variables (:mod:`relsat.rewrite.shapes`). On each instance
whose left-hand side builds and whose guards hold:

* **types**: the right-hand side must build and compute, root by root, the left-hand side's
  type: shape and split history (relsat has one dtype, float32, so there is no dtype to differ);
* **numbers**: both sides run in the NumPy executor on the same random values and must agree
  (:data:`RTOL`, :data:`ATOL`: float64-tight, far below what a wrong rewrite gives); the values
  have the facts the rule's conditions require (:mod:`relsat.rewrite.inputs`). An ONNX operator
  a left-hand side names (``onnx.Where``) runs as an opaque node with its NumPy kernel
  (:mod:`relsat.graph.onnx_kernels`; one it has none for leaves the rule ``untested``), its
  boolean inputs drawn as 0 and 1, and NaN and infinities under an ``IsNaN`` or ``IsInf``.

A rule holding an operator the exporter writes as a fused onnxruntime kernel is checked in
onnxruntime too, at the instances compared here (:mod:`relsat.rewrite.ortcheck`: its result is
the verdict's ``ort``); :func:`sides` builds an instance's two graphs again for it.

:func:`check_rule` gives a :class:`Verdict` per rule (``ok``, ``type-mismatch``,
``numeric-mismatch`` or ``untested`` with the reason), the same check the shipped rules pass in
the test suite. :func:`check_types` is the cheap part the rule loader runs on a user's rule
file: it raises a :class:`~relsat.errors.RuleError` for a rule whose sides can be shown to have
different types. :func:`find_counterexample` searches for an instance where the sides differ
with only some of a rule's guards kept (``guards=()``: none), which shows a guard is needed.

>>> from relsat.rewrite.rulefile import parse_rules
>>> bad = parse_rules("# name: bad\\n(ewadd ?a ?b) => (concat 0 2 ?a ?b)\\n")["bad"]
>>> check_rule(bad).status
'type-mismatch'
>>> check_rule(parse_rules("# name: r\\n(relu (relu ?x)) => (relu ?x)\\n")["r"]).status
'ok'
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from relsat.errors import ExecutionError, GraphError, RuleError
from relsat.graph.builder import GraphBuilder
from relsat.graph.execute import compare, compare_outputs, random_values, run
from relsat.graph.graph import Graph
from relsat.graph.ops import TensorType
from relsat.rewrite import indices, inputs
from relsat.rewrite.exprs import Cond, Expr, Num
from relsat.rewrite.exprs import evaluate as value_of
from relsat.rewrite.indices import IndexDraw
from relsat.rewrite.instantiate import InvalidInstance, Memo, guard_holds, instantiate
from relsat.rewrite.params import Undefined, draw_params, specialize
from relsat.rewrite.pins import divisors, pins
from relsat.rewrite.pins import ranks as fixed_ranks
from relsat.rewrite.pins import shapes as pinned_shapes
from relsat.rewrite.rules import Guard, Pattern, Rule, canonical
from relsat.rewrite.shapes import NEAR_MISSES, Choose, NoInstance, Unsolvable, draw_shapes

__all__ = [
    "ATOL",
    "MAX_SIZE",
    "MIN_INSTANCES",
    "ORT_STATUSES",
    "RTOL",
    "SEARCH_NEAR_MISSES",
    "STATUSES",
    "Instance",
    "OrtCheck",
    "Verdict",
    "check_rule",
    "check_rules",
    "check_types",
    "draw",
    "evaluate",
    "find_counterexample",
    "guards_alone",
    "sides",
]

RTOL, ATOL = 1e-6, 1e-9
#: Largest variable (elements) an instance may have: products of drawn factors can grow.
MAX_SIZE = 1024
#: Instances compared numerically before a rule is ``ok``.
MIN_INSTANCES = 5
#: A verdict's status, in the order a summary lists them.
STATUSES = ("ok", "type-mismatch", "numeric-mismatch", "untested")
#: Near misses of the counterexample search: more dims redrawn than in the soundness check.
SEARCH_NEAR_MISSES = (0, 1, 2, 2, 3)
#: The solver modes :func:`check_rule` cycles through: joint draws give instances where the rule
#: should hold; left-hand-side-only draws give what an e-graph may offer, where a rule that
#: changes a type shows.
_CYCLE = ("joint", "lhs", "joint", "both")
_TYPE_CYCLE = ("lhs", "both", "lhs", "joint")

Shapes = Mapping[str, tuple[int, ...]]

#: An :class:`OrtCheck`'s status.
ORT_STATUSES = ("ok", "mismatch", "skipped")


@dataclass(frozen=True)
class OrtCheck:
    """What the onnxruntime check found: ``status`` one of :data:`ORT_STATUSES`; ``detail`` what
    differed where, or why it was skipped (for ``ok``: instances skipped, if any);
    ``instances`` compared; ``kernels`` the fused ONNX operators that ran."""

    status: str
    detail: str = ""
    instances: int = 0
    kernels: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def text(self) -> str:
        """A few words: ``onnxruntime: 4 instances equal (QuickGelu)``, ``onnxruntime skipped:
        why``, ``onnxruntime: what differed``."""
        if self.status == "skipped":
            return f"onnxruntime skipped: {self.detail}"
        if self.status == "mismatch":
            return f"onnxruntime: {self.detail}"
        note = f"; {self.detail}" if self.detail else ""
        return f"onnxruntime: {self.instances} instances equal ({', '.join(self.kernels)}){note}"


def _shapes_text(shapes: Shapes, values: Mapping[str, Num | tuple[int, ...]] | None = None) -> str:
    text = ", ".join(f"?{n} {list(s)}" for n, s in shapes.items())
    if values:
        text += ", " + ", ".join(f"?{n} = {_value_text(v)}" for n, v in values.items())
    return text


def _value_text(v: object) -> str:
    if isinstance(v, tuple):  # a list
        return "[" + " ".join(map(str, v)) + "]"
    return f"{v:g}"


def _type_text(t: TensorType) -> str:
    splits = [list(s) for s in t.splits]
    return f"{list(t.shape)}" + (f" (splits {splits})" if any(t.splits) else "")


# ---------------------------------------------------------------------------------------------
# One instance


@dataclass(frozen=True)
class Instance:
    """A rule at one set of variable shapes.

    ``kind``: ``too-big``, ``guards-fail``, ``lhs-invalid`` (the rule does not match here),
    ``rhs-invalid`` (it matches but its right-hand side cannot be built), ``type-mismatch``,
    ``typed`` (types agree; numbers not compared), ``equal`` or ``different`` (numbers),
    ``not-run`` (the executor cannot run a side).
    ``detail`` says why; ``grouped``: the left-hand side has a grouped conv.
    """

    shapes: dict[str, tuple[int, ...]]
    kind: str
    detail: str = ""
    grouped: bool = False
    # the parameter variables' values
    values: dict[str, Num | tuple[int, ...]] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        """The left-hand side builds and the guards hold: the engine would try the rule here."""
        return self.kind not in ("too-big", "guards-fail", "lhs-invalid")

    @property
    def where(self) -> str:
        """Its shapes and parameter values, as a counterexample names them."""
        return _shapes_text(self.shapes, self.values)

    @property
    def equal(self) -> bool | None:
        """Whether both sides agree (types and, if compared, numbers); None: not comparable."""
        if self.kind in ("type-mismatch", "different"):
            return False
        return True if self.kind in ("equal", "typed") else None


def _side(rule: Rule, patterns: Sequence[Pattern], shapes: Shapes) -> Graph:
    """One side as a graph: one input per bound variable (named after it), one output per root."""
    b = GraphBuilder()
    env = {v.name: b.input(shapes[v.name], name=v.name) for v in rule.bound}
    memo: Memo = {}
    return b.build(*(instantiate(b, p, env, memo) for p in patterns))


def sides(
    rule: Rule, shapes: Shapes, values: Mapping[str, Num | tuple[int, ...]] | None = None
) -> tuple[Graph, Graph, list[Expr]]:
    """Both sides of ``rule`` as graphs at these variable shapes and parameter ``values`` (one
    input per variable, named after it) and its conditions (what the input values are drawn
    for: :mod:`relsat.rewrite.inputs`): an instance that :func:`evaluate` found valid, built
    again. Raises what building a side raises where it is not valid."""
    concrete = specialize(rule, values or {})[0] if rule.params else rule
    conds = [g.expr for g in rule.guards if isinstance(g, Cond)]
    shapes = {n: tuple(s) for n, s in shapes.items()}
    return _side(concrete, concrete.lhs, shapes), _side(concrete, concrete.rhs, shapes), conds


def _grouped(g: Graph) -> bool:
    return any(
        n.op == "conv2d" and g.shape(n.inputs[0])[1] != g.shape(n.inputs[1])[1] for n in g.nodes
    )


def evaluate(
    rule: Rule,
    shapes: Shapes,
    *,
    guards: Sequence[Guard | Cond] | None = None,
    numeric: bool = True,
    values: Mapping[str, Num | tuple[int, ...]] | None = None,
    index: IndexDraw | None = None,
) -> Instance:
    """``rule`` at these variable shapes (and, for a rule with parameter variables, these
    parameter ``values``): build both sides, compare types, then (``numeric``) values.
    ``guards``: the guards and conditions that must hold (default: the rule's own); ``index``:
    a drawn index's values and facts (:mod:`relsat.rewrite.indices`)."""
    shapes = {n: tuple(s) for n, s in shapes.items()}
    values = dict(values or {})
    chosen = rule.guards if guards is None else guards
    if rule.params:
        try:
            rule, _ = specialize(rule, values)
        except Undefined as err:
            return Instance(shapes, "guards-fail", str(err), values=values)
    conds = [g.expr for g in chosen if isinstance(g, Cond)]
    named = [g for g in chosen if isinstance(g, Guard)]
    with np.errstate(all="ignore"):  # a NaN both sides compute (sqrt of a negative) is compared
        inst = _evaluate(rule, shapes, named, conds, values, numeric, index)
    return replace(inst, values=values) if values else inst


def _drawn_constants(term: object) -> object:
    """A condition as the checker reads it: every variable's value is drawn, a constant, so
    ``weights(?x)`` holds (the sides must agree on any value, a weight's or not)."""
    if not isinstance(term, Expr):
        return term
    if term.op == "weights":
        return True
    return Expr(term.op, tuple(_drawn_constants(a) for a in term.args))


def _evaluate(
    rule: Rule,
    shapes: dict[str, tuple[int, ...]],
    guards: Sequence[Guard],
    conds: Sequence[Expr],
    values: Mapping[str, Num | tuple[int, ...]],
    numeric: bool,
    index: IndexDraw | None = None,
) -> Instance:
    if any(math.prod(s) > MAX_SIZE for s in shapes.values()):
        return Instance(shapes, "too-big")
    failed = [g for g in guards if not guard_holds(g, shapes)]
    if failed:
        return Instance(shapes, "guards-fail", f"{failed[0]} does not hold")
    bounds = inputs.bounds(conds, values, shapes)
    facts = index.facts if index is not None else None
    false = [
        c for c in conds if value_of(_drawn_constants(c), values, shapes, bounds, facts) is not True
    ]
    if false:
        return Instance(shapes, "guards-fail", f"{false[0]} does not hold")
    try:
        lhs = _side(rule, rule.lhs, shapes)
    except (InvalidInstance, GraphError) as err:
        return Instance(shapes, "lhs-invalid", str(err))
    grouped = _grouped(lhs)
    try:
        built = rule.rhs if index is None else indices.with_facts(rule.rhs, index)
        rhs = _side(rule, built, shapes)
    except (InvalidInstance, GraphError) as err:
        return Instance(shapes, "rhs-invalid", str(err), grouped)
    for i, (a, b) in enumerate(zip(lhs.outputs, rhs.outputs, strict=True)):
        left, right = lhs.type(a), rhs.type(b)
        if left != right:
            which = f"right-hand side {i + 1}" if rule.is_multi else "the right-hand side"
            detail = f"{which} computes {_type_text(right)}, the left-hand side {_type_text(left)}"
            return Instance(shapes, "type-mismatch", detail, grouped)
    if not numeric:
        return Instance(shapes, "typed", grouped=grouped)
    try:
        drawn = inputs.onnx_values(rule, lhs, inputs.drawn(lhs, conds, bounds))
        if index is not None:  # the drawn index, its facts those the conditions read
            drawn = {**(drawn or random_values(lhs, seed=0)), **index.arrays}
        if drawn is None:
            result = compare(lhs, rhs, rtol=RTOL, atol=ATOL)
        else:
            result = compare_outputs(run(lhs, drawn), run(rhs, drawn), rtol=RTOL, atol=ATOL)
        edge_cases = (  # IsNaN's and IsInf's: NaN and infinities; an additive mask's: -inf rows
            (lambda: inputs.special(rule, lhs, drawn), "with NaN and infinities in"),
            (lambda: inputs.masked(rule, lhs, conds, drawn), "with a row of -inf in"),
        )
        for case, words in edge_cases:
            found = case() if result.ok else None
            if found is None:
                continue
            names, feeds = found
            result = compare_outputs(run(lhs, feeds), run(rhs, feeds), rtol=RTOL, atol=ATOL)
            if not result.ok:
                which = ", ".join(f"?{n}" for n in names)
                detail = f"{words} {which}: {result.report()}"
                return Instance(shapes, "different", detail, grouped)
    except ExecutionError as err:  # an op the NumPy executor cannot run: say so, go on
        return Instance(shapes, "not-run", str(err), grouped)
    return Instance(shapes, "equal" if result.ok else "different", result.report(), grouped)


def draw(
    rule: Rule,
    choose: Choose[Any],
    *,
    guards: Sequence[Guard | Cond] | None = None,
    sides: str = "joint",
    near_misses: Sequence[int] = NEAR_MISSES,
    numeric: bool = True,
    even_kernels: bool = False,
) -> Instance:
    """Draw shapes (:func:`relsat.rewrite.shapes.draw_shapes`) and :func:`evaluate` the rule
    there. Raises :class:`~relsat.rewrite.shapes.Unsolvable` when no shapes can be drawn. (The
    keyword options are the draw's knobs, each with the default the checks use.) A rule whose
    conditions read an index fact is drawn by :func:`relsat.rewrite.indices.draw` instead."""
    if indices.reads_index(rule):
        drawn = indices.draw(rule, choose)
        return evaluate(
            rule, drawn.shapes, guards=guards, numeric=numeric, values=drawn.values, index=drawn
        )
    values = draw_params(rule, choose) if rule.params else {}
    try:
        concrete = specialize(rule, values)[0] if rule.params else rule
    except Undefined as err:
        return Instance({}, "guards-fail", str(err), values=values)
    lists: dict[str, tuple[int, ...]] = {}  # lists pinned by conditions: drawn with the shapes
    try:
        shapes = draw_shapes(
            concrete,
            choose,
            near_misses,
            sides=sides,
            even_kernels=even_kernels,
            pinned=pins(rule),
            params=values,
            lists=lists,
            ranks=fixed_ranks(rule),
            shaped=pinned_shapes(rule),
            divides=divisors(rule),
        )
    except ZeroDivisionError:  # a parameter no operator takes (a stride of 0): no instance
        return Instance({}, "lhs-invalid", f"no shapes at {values}", values=values)
    except NoInstance as err:
        return Instance({}, "lhs-invalid", str(err), values=values)
    return evaluate(rule, shapes, guards=guards, numeric=numeric, values=values | lists)


def _rng(rule: Rule, seed: int) -> random.Random:
    """Draws that depend on the rule's equations and guards, not on its name or place."""
    c = canonical(rule)
    return random.Random(f"{seed}|{'|'.join(map(str, (*c.lhs, *c.rhs, *c.guards)))}")


# ---------------------------------------------------------------------------------------------
# Verdicts


@dataclass(frozen=True)
class Verdict:
    """What :func:`check_rule` found: ``status`` one of :data:`STATUSES`; ``detail`` says why
    (the counterexample's shapes and what differed, or why the rule went untested);
    ``instances`` how many instances were compared numerically, ``examples`` those instances;
    ``ort``: what the check in onnxruntime found (:func:`relsat.rewrite.ortcheck.with_ort`),
    None where it did not run."""

    rule: Rule
    status: str
    detail: str = ""
    instances: int = 0
    shapes: dict[str, tuple[int, ...]] | None = None
    examples: tuple[Instance, ...] = field(default=(), repr=False)
    ort: OrtCheck | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def line(self) -> str:
        """One line: status, rule name, place, detail (and the onnxruntime check's)."""
        where = f" ({self.rule.location})" if self.rule.location else ""
        detail = self.detail or f"{self.instances} instances equal"
        if self.ort is not None and self.ort.status != "mismatch":  # a mismatch is the detail
            detail += f"; {self.ort.text()}"
        return f"{self.status:<16} {self.rule.name}{where}: {detail}"


def check_rule(
    rule: Rule,
    *,
    seed: int = 0,
    instances: int = 12,
    tries: int = 160,
) -> Verdict:
    """Types and numbers of ``rule`` on up to ``tries`` drawn instances (stops once
    ``instances`` were compared numerically, at least 24 draws in). Deterministic for a seed.

    ``type-mismatch``: on some instance the right-hand side computes another type, or it never
    builds where the left-hand side does; ``numeric-mismatch``: the sides compute different
    values; ``untested``: fewer than :data:`MIN_INSTANCES` instances could be compared (the
    detail says why); else ``ok``.
    """
    mismatch = _type_mismatch(rule, seed, tries=24, enough=8)
    if mismatch is not None:
        detail = f"{mismatch.detail}, at {mismatch.where}"
        return Verdict(rule, "type-mismatch", detail, 0, mismatch.shapes)
    rng = _rng(rule, seed + 1)
    compared = valid = 0
    equal: list[Instance] = []
    rhs_invalid: Instance | None = None
    not_run: Instance | None = None
    unsolvable: dict[str, str] = {}  # solver mode -> why it cannot draw shapes
    for i in range(tries):
        if compared >= instances and i >= 24:
            break
        sides = _CYCLE[i % len(_CYCLE)]
        if sides in unsolvable:
            continue
        try:
            inst = draw(rule, rng.choice, sides=sides)
        except Unsolvable as err:
            unsolvable[sides] = err.reason
            continue
        valid += inst.valid
        if inst.kind == "type-mismatch":
            detail = f"{inst.detail}, at {inst.where}"
            return Verdict(rule, "type-mismatch", detail, compared, inst.shapes)
        if inst.kind == "different":
            detail = f"sides differ at {inst.where}: {inst.detail.splitlines()[0]}"
            return Verdict(rule, "numeric-mismatch", detail, compared, inst.shapes)
        if inst.kind == "rhs-invalid" and rhs_invalid is None:
            rhs_invalid = inst
        if inst.kind == "not-run" and not_run is None:
            not_run = inst
        if inst.kind == "equal":
            compared += 1
            equal.append(inst)
    if compared >= MIN_INSTANCES:
        return Verdict(rule, "ok", instances=compared, examples=tuple(equal))
    if compared == 0 and rhs_invalid is not None:
        detail = (
            f"the right-hand side never builds where the left-hand side does ({valid} "
            f"instances), e.g. at {rhs_invalid.where}: {rhs_invalid.detail}"
        )
        return Verdict(rule, "type-mismatch", detail, 0, rhs_invalid.shapes)
    if valid == 0:
        why = "; ".join(sorted(set(unsolvable.values())))
        detail = f"no instance of the left-hand side (guards holding) in {tries} draws"
        return Verdict(rule, "untested", detail + (f": {why}" if why else ""))
    detail = f"only {compared} instances compared in {tries} draws ({valid} matched)"
    if not_run is not None:
        detail += f": the executor cannot run it ({not_run.detail})"
    return Verdict(rule, "untested", detail, compared)


def check_rules(rules: Iterable[Rule], *, seed: int = 0) -> list[Verdict]:
    """:func:`check_rule` for each rule, in order."""
    return [check_rule(r, seed=seed) for r in rules]


def _type_mismatch(rule: Rule, seed: int, tries: int, enough: int) -> Instance | None:
    """The first drawn instance where the sides' types differ, or None after ``tries`` draws or
    ``enough`` instances typed alike (types only, no values: cheap)."""
    rng = _rng(rule, seed)
    typed = 0
    for i in range(tries):
        try:
            inst = draw(rule, rng.choice, sides=_TYPE_CYCLE[i % len(_TYPE_CYCLE)], numeric=False)
        except Unsolvable:
            continue
        if inst.kind == "type-mismatch":
            return inst
        typed += inst.kind == "typed"
        if typed >= enough:
            break
    return None


def check_types(rules: Iterable[Rule], *, seed: int = 0) -> None:
    """The loader's check: raise :class:`~relsat.errors.RuleError` (at the rule's file and line)
    for the first rule whose right-hand side computes another type than its left-hand side on
    a drawn instance (types only: about 5 ms a rule)."""
    for rule in rules:
        inst = _type_mismatch(rule, seed, tries=24, enough=8)
        if inst is not None:
            loc = rule.location
            raise RuleError(
                f"{inst.detail}, at {inst.where} ('relsat rules check' checks a rule file)",
                path=loc.path if loc else None,
                line=loc.line if loc else None,
                rule=rule.name,
            )


def find_counterexample(
    rule: Rule,
    *,
    guards: Sequence[Guard | Cond] = (),
    tries: int = 5000,
    seed: int = 0,
    even_kernels: bool = False,
) -> Instance | None:
    """An instance where the sides differ (types or values) and ``guards`` hold (default: none
    of the rule's guards), by a seeded search of ``tries`` joint draws; None if none was found.

    With all but one of a rule's guards kept, a counterexample shows that guard is needed;
    finding none (after many tries) suggests it is redundant given the others.
    ``even_kernels`` draws even conv kernels too (where the ``odd-kernels`` guard acts).
    """
    rng = random.Random(f"{rule.name}/{seed}")
    for _ in range(tries):
        inst = draw(
            rule,
            rng.choice,
            guards=guards,
            near_misses=SEARCH_NEAR_MISSES,
            even_kernels=even_kernels,
        )
        if inst.equal is False:
            return inst
    return None


def guards_alone(
    rule: Rule, *, tries: int = 5000, seed: int = 0
) -> dict[Guard | Cond, Instance | None]:
    """Each guard of ``rule`` dropped alone (the others kept): a counterexample, or None when
    ``tries`` draws found none (the guard looks redundant given the others and the engine's
    shape and type checks). Dropping ``odd-kernels`` draws even kernels (where it acts)."""
    return {
        g: find_counterexample(
            rule,
            guards=[h for h in rule.guards if h != g],
            tries=tries,
            seed=seed,
            even_kernels=isinstance(g, Guard) and g.name == "odd-kernels",
        )
        for g in rule.guards
    }
