"""The input values both sides of a rule's instance are compared on (:mod:`relsat.rewrite.check`,
:mod:`relsat.rewrite.ortcheck`).

Values are drawn by name (:func:`relsat.graph.execute.random_values`, seed 0): both sides read
one array per variable. A rule whose conditions require facts of values (equal halves or pairs of
the last axis, values >= 0) gets values that have them (:func:`drawn`); a rule that fuses an
additive mask into a softmax is compared again with a row of -inf in the mask (:func:`masked`).

>>> from relsat.rewrite.rulefile import parse_rules
>>> rule = parse_rules("# name: r\\n(relu ?x) => (relu (relu ?x))\\nwhere nonneg(?x)\\n")["r"]
>>> from relsat.rewrite.check import sides
>>> lhs, _, conds = sides(rule, {"x": (2, 3)})
>>> bool((drawn(lhs, conds)["x"] >= 0).all())
True
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from relsat.graph.execute import random_values
from relsat.graph.graph import Graph
from relsat.rewrite.exprs import VALUE_FACTS, Expr, subexprs
from relsat.rewrite.rules import Pattern, Rule, Var

__all__ = ["drawn", "masked"]


def drawn(g: Graph, conds: Sequence[Expr]) -> dict[str, np.ndarray] | None:
    """Random values for ``g``'s inputs with the facts of values the conditions require (equal
    halves or pairs of the last axis, values >= 0; drawn values are finite), or None when the
    conditions require none. (A fact under ``not`` or ``or`` is drawn as if required.)"""
    wanted = [
        (t.op, str(getattr(t.args[0], "name", "")))
        for c in conds
        for t in subexprs(c)
        if t.op in VALUE_FACTS
    ]
    if not wanted:
        return None
    values = random_values(g, seed=0)
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
