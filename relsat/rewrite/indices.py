"""Instances of a rule over a gather's index facts (``grid``, ``rows``): drawn, not solved.

The shape solver (:mod:`relsat.rewrite.shapes`) models the element-wise ONNX operators only; a
rule whose conditions read an index fact (``rules/masks.rules``' grid rules) is tried on a data
tensor and an index drawn together (:func:`draw`): the data's shape, the index's leading axes
(the data's dims in order, unit axes among them) and the index itself, an index grid over the
data, one over its first rows along an axis, or a near miss of one (components swapped, a
position off by one, row strides of another order). Each drawn index's facts are what the
importer computes of a constant index (:func:`relsat.onnx.affine.index_facts`), so the check
covers that analysis too: a near miss it took for a grid would show as sides that differ. A
right-hand side that reads an index fact (the rows a cut keeps) reads the drawn index's
(:func:`with_facts`).

>>> from relsat.rewrite.rulefile import parse_rules
>>> rule = parse_rules(
...     "# name: r\\n(onnx.GatherND 0 ?m ?i) => (reshape ?m (take (shape ?i) -1))\\n"
...     "where grid(?i) == shape(?m)\\n"
... )["r"]
>>> import random
>>> d = draw(rule, random.Random(3).choice)
>>> d.shapes["i"][-1] == len(d.shapes["m"]), set(d.facts) == {"i"}
(True, True)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from relsat.rewrite.exprs import INDEX_FACTS, Cond, Expr, Num, Param, evaluate, subexprs
from relsat.rewrite.params import draw_params
from relsat.rewrite.pins import equations
from relsat.rewrite.rules import Pattern, Rule, Term
from relsat.rewrite.shapes import DIMS, Choose, Unsolvable

__all__ = ["IndexDraw", "draw", "reads_index", "with_facts"]

#: Ranks of the data (2, a mask's, twice as often), and how many unit axes the index's leading
#: axes insert among its dims.
RANKS = (1, 2, 2, 3)
UNITS = (0, 1, 2)
#: The indices drawn: a grid (three times in nine), a grid shorter than its data along one
#: axis (its first rows: three times in nine) or one of its near misses.
VARIANTS = ("grid", "grid", "grid", "short", "short", "short", "swapped", "shifted", "other-order")


@dataclass(frozen=True)
class IndexDraw:
    """One drawn instance: each variable's shape, the index's values (float64, as the executor
    holds them), its facts (``grid`` / ``rows`` → the list, or None where it is none) and the
    rule's parameter values (an attribute the rule names: drawn, or set by an equation of the
    conditions over the shapes, ``?f == rank(?m)``, ``?s == [size(?m), 1]``)."""

    shapes: dict[str, tuple[int, ...]]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    facts: dict[str, Mapping[str, tuple[int, ...] | None]] = field(default_factory=dict)
    values: dict[str, Num | tuple[int, ...]] = field(default_factory=dict)


def _read(rule: Rule) -> dict[str, str]:
    """Each variable an index fact of the rule's conditions reads, with that fact."""
    out: dict[str, str] = {}
    for guard in rule.guards:
        if not isinstance(guard, Cond):
            continue
        for t in subexprs(guard.expr):
            if t.op in INDEX_FACTS:
                out.setdefault(str(getattr(t.args[0], "name", "")), t.op)
    return out


def reads_index(rule: Rule) -> bool:
    """Whether the rule's conditions read an index fact (its instances come from :func:`draw`)."""
    return bool(_read(rule))


def draw(rule: Rule, choose: Choose[object]) -> IndexDraw:
    """Shapes, the index and its facts for ``rule``, whose conditions read one index fact of
    one variable and whose other variable is the data. Raises
    :class:`~relsat.rewrite.shapes.Unsolvable` for any other rule."""
    read = _read(rule)
    names = [v.name for v in rule.bound]
    data = [n for n in names if n not in read]
    if len(read) != 1 or len(data) != 1:
        raise Unsolvable("an index fact is drawn for rules over one index and one data tensor only")
    ((index, fact),) = read.items()
    rank = int(choose(RANKS))  # type: ignore[call-overload]
    shape = tuple(int(choose(DIMS)) for _ in range(rank))  # type: ignore[call-overload]
    lead = list(shape)
    axes = list(range(rank))  # where each data dim is among the leading axes
    for _ in range(int(choose(UNITS))):  # type: ignore[call-overload]
        at = int(choose(range(len(lead) + 1)))  # type: ignore[call-overload]
        lead.insert(at, 1)
        axes = [a + (a >= at) for a in axes]
    variant = choose(VARIANTS)
    if variant == "short":  # the grid reads the first rows of one data dim, made longer
        j = int(choose(range(rank)))  # type: ignore[call-overload]
        more = int(choose((1, 2)))  # type: ignore[call-overload]
        shape = tuple(n + more * (k == j) for k, n in enumerate(shape))
    positions = np.indices(lead, dtype=np.int64)
    parts = [positions[a] for a in axes]
    if fact == "grid":
        if variant == "swapped":
            parts.reverse()
        elif variant == "shifted":
            parts[-1] = (parts[-1] + 1) % shape[-1]
        array = np.stack(parts, axis=-1)
    else:
        strides = [math.prod(shape[j + 1 :]) for j in range(rank)]
        if variant == "other-order":
            strides = [math.prod(shape[:j]) for j in range(rank)]  # column-major
        array = sum((s * p for s, p in zip(strides, parts, strict=True)), np.zeros(lead, np.int64))
        if variant == "shifted":
            array = (array + 1) % math.prod(shape)
    from relsat.onnx.affine import index_facts  # the importer's analysis of a constant index

    grid, rows = index_facts(array)
    shapes = {data[0]: shape, index: tuple(array.shape)}
    values = draw_params(rule, choose) if rule.params else {}
    for target, other in equations(g.expr for g in rule.guards if isinstance(g, Cond)):
        if isinstance(target, Param) and target.type in ("int", "ints"):
            v = evaluate(other, values, shapes)
            if (isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, tuple):
                values[target.name] = v
    facts: dict[str, Mapping[str, tuple[int, ...] | None]] = {index: {"grid": grid, "rows": rows}}
    return IndexDraw(shapes, {index: array.astype(np.float64)}, facts, values)


def with_facts(patterns: tuple[Pattern, ...], drawn: IndexDraw) -> tuple[Pattern, ...]:
    """``patterns`` (a right-hand side) with each parameter that reads an index fact computed at
    the drawn index (``(slice 0 0 (at (grid ?i) 0) 1 ?m)``: the engine reads the fact from table
    ``fact``; the checker knows it of the index it drew). A parameter without a value here is
    left as it is (building the side then says so)."""

    def sub(term: Term) -> Term:
        if isinstance(term, Pattern):
            return Pattern(term.op, tuple(sub(a) for a in term.args))
        if isinstance(term, Expr) and any(t.op in INDEX_FACTS for t in subexprs(term)):
            v = evaluate(term, drawn.values, drawn.shapes, None, drawn.facts)
            if isinstance(v, int | tuple) and not isinstance(v, bool):
                return v
        return term

    return tuple(sub(p) for p in patterns)  # type: ignore[misc]
