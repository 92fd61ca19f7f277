"""The input values both sides of a rule's instance are compared on (:mod:`relsat.rewrite.check`,
:mod:`relsat.rewrite.ortcheck`).

Values are drawn by name (:func:`relsat.graph.execute.random_values`, seed 0): both sides read
one array per variable. A rule whose conditions require facts of values (equal halves or pairs of
the last axis, values >= 0, bounds: :func:`bounds`) gets values that have them (:func:`drawn`);
a rule that fuses an additive mask into a softmax is compared again with a row of -inf in the
mask (:func:`masked`). A variable an ONNX operator reads as a boolean (Where's condition) holds
0 and 1 (:func:`onnx_values`); one under an ONNX ``IsNaN`` or ``IsInf`` is compared again with
NaN and infinities among its values (:func:`special`).

>>> from relsat.rewrite.rulefile import parse_rules
>>> rule = parse_rules("# name: r\\n(relu ?x) => (relu (relu ?x))\\nwhere nonneg(?x)\\n")["r"]
>>> from relsat.rewrite.check import sides
>>> lhs, _, conds = sides(rule, {"x": (2, 3)})
>>> bool((drawn(lhs, conds)["x"] >= 0).all())
True
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np

from relsat.graph.execute import random_values
from relsat.graph.graph import Graph
from relsat.graph.onnx_kernels import BOOLEAN_INPUTS
from relsat.rewrite.exprs import BOUNDS, COMPARE, VALUE_FACTS, Expr, Num, evaluate, subexprs
from relsat.rewrite.rules import Pattern, Rule, Var, onnx_type

__all__ = ["MAX_BOUNDS", "bounds", "drawn", "masked", "onnx_values", "special"]

#: Bound choices tried per instance for the tensors whose ``lo`` / ``hi`` conditions read.
MAX_BOUNDS = 4096


def bounds(
    conds: Sequence[Expr],
    values: Mapping[str, Num | tuple[int, ...]],
    shapes: Mapping[str, Sequence[int]],
) -> dict[str, tuple[float, float]]:
    """Bounds ``(lo, hi)`` for the values of each tensor whose ``lo`` or ``hi`` the conditions
    read, chosen so that those conditions hold where some can (at these parameter ``values`` and
    variable ``shapes``): each bound one of the numbers they compare with and its neighbours,
    the widest interval first (values are then drawn within it: :func:`drawn`); empty when none
    can, or the conditions read no bound.

    >>> from relsat.rewrite.rulefile import parse_rules
    >>> rule = parse_rules("# name: r\\n(relu ?x) => ?x\\nwhere lo(?x) >= 0\\n")["r"]
    >>> bounds([g.expr for g in rule.guards], {}, {"x": (2,)})
    {'x': (0.0, 1.0)}
    """
    reading = [c for c in _conjuncts(conds) if any(t.op in BOUNDS for t in subexprs(c))]
    bounded = (t for c in reading for t in subexprs(c) if t.op in BOUNDS)
    names = sorted({str(getattr(t.args[0], "name", "")) for t in bounded})
    if not names:
        return {}
    numbers = {
        float(x) + d
        for c in reading
        for t in subexprs(c)
        if t.op in COMPARE and any(u.op in BOUNDS for u in subexprs(t))
        for x in t.args
        if isinstance(x, int | float) and not isinstance(x, bool)
        for d in (-1, 0, 1)
    } or {-1.0, 0.0, 1.0}
    near = sorted(numbers)
    intervals = sorted(((a, b) for a in near for b in near if a <= b), key=lambda p: p[0] - p[1])
    for choice in itertools.islice(itertools.product(intervals, repeat=len(names)), MAX_BOUNDS):
        found = dict(zip(names, choice, strict=True))
        if all(evaluate(c, values, shapes, found) is True for c in reading):
            return found
    return {}


def _conjuncts(conds: Sequence[Expr]) -> list[Expr]:
    """``conds`` cut at their top-level ``and`` s."""
    out: list[Expr] = []
    stack = list(reversed(conds))
    while stack:
        c = stack.pop()
        if c.op == "and":
            stack.extend(a for a in reversed(c.args) if isinstance(a, Expr))
        else:
            out.append(c)
    return out


def drawn(
    g: Graph, conds: Sequence[Expr], within: Mapping[str, tuple[float, float]] | None = None
) -> dict[str, np.ndarray] | None:
    """Random values for ``g``'s inputs with the facts of values the conditions require (equal
    halves or pairs of the last axis, values >= 0, ``within`` the :func:`bounds` drawn for
    them; drawn values are finite), or None when the conditions require none. (A fact under
    ``not`` or ``or`` is drawn as if required.)"""
    wanted = [
        (t.op, str(getattr(t.args[0], "name", "")))
        for c in conds
        for t in subexprs(c)
        if t.op in VALUE_FACTS
    ]
    if not wanted and not within:
        return None
    values = random_values(g, seed=0)
    for name, (lo, hi) in (within or {}).items():  # over the interval: one value where lo == hi
        v = values[name]
        v[...] = lo + (hi - lo) * (np.tanh(v) + 1) / 2
    for fact, name in wanted:
        v = values[name]
        d = v.shape[-1] if v.ndim else 0
        if fact == "halves" and d % 2 == 0:
            v[..., d // 2 :] = v[..., : d // 2]
        elif fact == "pairs" and d % 2 == 0:
            v[..., 1::2] = v[..., 0::2]
        elif fact == "nonneg":
            np.abs(v, out=v)
    return values


def _onnx_reads(rule: Rule) -> tuple[list[str], list[str]]:
    """The variables the left-hand sides' ONNX operators read at a boolean input (Where's
    condition) and those under an ``IsNaN`` or ``IsInf``, each in order of appearance."""
    booleans: dict[str, None] = {}
    special: dict[str, None] = {}
    stack: list[object] = list(reversed(rule.lhs))
    while stack:
        p = stack.pop()
        if not isinstance(p, Pattern):
            continue
        stack.extend(reversed(p.args))
        kind = onnx_type(p.op)
        if kind is None:
            continue
        for i, a in enumerate(p.args):
            if isinstance(a, Var) and i in BOOLEAN_INPUTS.get(kind, ()):
                booleans.setdefault(a.name)
        if kind in ("IsNaN", "IsInf"):
            special.update(dict.fromkeys(v.name for v in p.vars()))
    return list(booleans), list(special)


def onnx_values(
    rule: Rule, g: Graph, values: dict[str, np.ndarray] | None
) -> dict[str, np.ndarray] | None:
    """``values`` (None: random ones) with 0 and 1 drawn for each variable an ONNX operator of
    the left reads as a boolean (Where's condition, :data:`relsat.graph.onnx_kernels.
    BOOLEAN_INPUTS`); ``values`` as they were when there is none."""
    booleans, _ = _onnx_reads(rule)
    if not booleans:
        return values
    out = {k: v.copy() for k, v in (values or random_values(g, seed=0)).items()}
    for name in booleans:
        out[name] = (out[name] > 0).astype(out[name].dtype)
    return out


def special(
    rule: Rule, g: Graph, values: dict[str, np.ndarray] | None
) -> tuple[list[str], dict[str, np.ndarray]] | None:
    """``values`` (None: random ones) with NaN, +inf and -inf at three of every four elements of
    each variable under an ONNX ``IsNaN`` or ``IsInf`` on the left (random values are finite, so
    a rule about NaNs would prove nothing on them); None when the rule has none."""
    _, names = _onnx_reads(rule)
    if not names:
        return None
    out = {k: v.copy() for k, v in (values or random_values(g, seed=0)).items()}
    for name in names:
        flat = out[name].reshape(-1)  # a view: the array itself
        flat[0::4], flat[1::4], flat[2::4] = np.nan, np.inf, -np.inf
    return names, out


def masked(
    rule: Rule, g: Graph, conds: Sequence[Expr], values: dict[str, np.ndarray] | None
) -> tuple[list[str], dict[str, np.ndarray]] | None:
    """``values`` (None: random ones) with a row of -inf in each variable added to the scores of
    a softmax on the left (an attention's additive mask, which masks a row entirely there) that
    no condition requires finite; None when the rule has none. A row masked entirely is where
    an eager softmax gives NaN and a fused attention 0: a rule that fuses one into the other
    needs ``finite(?m)``."""
    finite = {
        str(getattr(t.args[0], "name", "")) for c in conds for t in subexprs(c) if t.op == "finite"
    }
    names: list[str] = []
    stack: list[object] = list(rule.lhs)
    while stack:
        p = stack.pop()
        if not isinstance(p, Pattern):
            continue
        stack.extend(p.args)
        if p.op == "softmax" and isinstance(p.args[0], Pattern) and p.args[0].op == "ewadd":
            names += [a.name for a in p.args[0].args if isinstance(a, Var) and a.name not in finite]
    if not names:
        return None
    out = {k: v.copy() for k, v in (values or random_values(g, seed=0)).items()}
    for name in names:
        v = out[name]
        if v.ndim:
            v[(0,) * (v.ndim - 1)] = -np.inf
    return names, out
