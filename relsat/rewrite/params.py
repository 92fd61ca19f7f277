"""Parameter variables on trial: values drawn for a rule's ``?x:int`` / ``?x:float`` and the rule
written out at those values, for the rule checker (relsat.rewrite.check).

Values are drawn from small pools that hold the edge cases (1, odd sizes, powers of two; the
epsilons in use and one no rule names), plus every literal a condition compares with and its
neighbours (the largest epsilon a guard allows and just past it); a condition ``?a == <expr>``
whose right side the other values give sets ``?a`` instead (``?d == 2 * ?h``), so that rules
tied by equalities are tried often. :func:`specialize` then substitutes the values: parameter
variables become literals, right-hand-side arithmetic its value, and the conditions are left to
check against the drawn shapes.

>>> from relsat.rewrite.rulefile import parse_rules
>>> r = parse_rules("# name: r\\n(repeatkv ?n:int ?x) => (repeatkv (* ?n 1) ?x)\\n")["r"]
>>> concrete, conds = specialize(r, {"n": 3})
>>> str(concrete.rhs[0]), conds
('(repeatkv 3 ?x)', [])
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from relsat.graph.ops import ACTIVATIONS, PADDINGS, f32_bits, from_f32_bits
from relsat.rewrite.exprs import Cond, Expr, Num, Param, evaluate, params_of, tensors_of
from relsat.rewrite.pins import equations, pins
from relsat.rewrite.rules import Guard, Pattern, Rule, Term, param_type, signature
from relsat.rewrite.shapes import Choose

__all__ = ["FLOAT_POOL", "INT_POOL", "Undefined", "draw_params", "specialize"]

INT_POOL = (0, 1, 2, 3, 4, 5, 6, 8, 16)
FLOAT_POOL = (1e-12, 1e-6, 3e-6, 1e-5, 1e-3, 0.125, 0.5, 1.0, 2.0)
#: The values an operator's parameter can take (relsat.graph.ops: TASO's codes), by name: a
#: variable bound there is drawn from these.
DOMAINS: dict[str, tuple[int, ...]] = {
    "stride_h": (1, 2, 3),
    "stride_w": (1, 2, 3),
    "padding": tuple(range(len(PADDINGS))),
    "activation": tuple(range(len(ACTIVATIONS))),
    "kernel_h": (1, 2, 3),
    "kernel_w": (1, 2, 3),
    "interleaved": (0, 1),
    "shuffle": (0, 1),
    "axis": (0, 1, 2, 3),
    "ndim": (1, 2, 3, 4),
    "start": (0, 1, 2, 3),
    "end": (1, 2, 3, 4, 6),
    "step": (1, 2),
}


#: Lists a list variable is drawn from: every permutation of 2 and 3 dims and some of 4 (a
#: transpose's), shapes of 24 elements (a reshape's: any two of them reshape into each other).
LIST_DOMAINS: dict[str, tuple[tuple[int, ...], ...]] = {
    "perm": (
        *itertools.permutations(range(2)),
        *itertools.permutations(range(3)),
        (0, 1, 2, 3),
        (0, 2, 1, 3),
        (0, 2, 3, 1),
        (0, 1, 3, 2),
        (3, 2, 1, 0),
    ),
    "shape": ((24,), (4, 6), (6, 4), (2, 12), (2, 3, 4), (1, 24), (2, 2, 6), (1, 2, 3, 4)),
}


def _domain(rule: Rule, param: Param) -> tuple[Any, ...] | None:
    """The domain of the first operator parameter ``param`` is bound at, if it has one."""
    stack: list[object] = list(rule.lhs)
    while stack:
        p = stack.pop()
        if isinstance(p, Pattern):
            for arg, (name, kind) in zip(p.args, signature(p.op, len(p.args)).params, strict=True):
                if isinstance(arg, Param) and arg == param:
                    if kind == "ints":
                        return LIST_DOMAINS.get(name)
                    if kind == "int":
                        return DOMAINS.get(name)
            stack.extend(p.args)
    return None


class Undefined(ValueError):
    """A right-hand side's arithmetic has no value at the drawn parameters (a division that
    leaves a remainder): the rule does not apply there."""


def _literals(term: object) -> list[Num]:
    if isinstance(term, bool):
        return []
    if isinstance(term, int | float):
        return [term]
    if isinstance(term, Expr):
        return [x for a in term.args for x in _literals(a)]
    return []


def _pool(param: Param, conds: list[Expr]) -> tuple[Num, ...]:
    """What ``param`` is drawn from: its type's pool and the literals of the conditions that
    mention it, with their neighbours (the edge of what a guard allows)."""
    near: list[Num] = []
    for c in conds:
        if any(p.name == param.name for p in params_of(c)):
            for x in _literals(c):
                if param.type == "int" and isinstance(x, int):
                    near += [x - 1, x, x + 1]
                elif param.type == "float":
                    near += [float(x) * 0.999, float(x), float(x) * 1.001]
    base: tuple[Num, ...] = INT_POOL if param.type == "int" else FLOAT_POOL
    return tuple(dict.fromkeys([*base, *near]))


def draw_params(rule: Rule, choose: Choose[Any]) -> dict[str, Num | tuple[int, ...]]:
    """A value for each of ``rule``'s parameter variables (floats rounded to float32, as an
    e-node stores them)."""
    conds = [g.expr for g in rule.guards if isinstance(g, Cond)]
    values: dict[str, Num | tuple[int, ...]] = {}
    pinned = pins(rule)  # drawn with the shapes (relsat.rewrite.pins)
    lists = any(p.type == "ints" for p in rule.params)
    rank = choose((2, 3, 4)) if lists else 0  # one rank for a draw's permutations: they compose
    for p in rule.params:
        if p.name in pinned:
            continue
        if p.type == "ints":
            pool = _domain(rule, p) or LIST_DOMAINS["perm"]
            if pool is LIST_DOMAINS["perm"]:
                n = _length_of(p, conds) or rank  # len(?p) == 4 in a condition
                pool = tuple(q for q in pool if len(q) == n)
            values[_key(p)] = tuple(choose(pool))
            continue
        v = choose(_domain(rule, p) or _pool(p, conds))
        values[_key(p)] = from_f32_bits(f32_bits(float(v))) if p.type == "float" else int(v)
    for _ in range(2):  # ?a == <expr of the others>: set ?a (twice: chains of equalities)
        for target, other in equations(conds):
            if not isinstance(target, Param) or target.name in pinned:
                continue
            if any(p.name == target.name or _key(p) not in values for p in params_of(other)):
                continue  # ?a == <expr of ?a>, or of a list drawn with the shapes
            v = evaluate(other, values, {})
            if isinstance(v, int | float) and not isinstance(v, bool):
                if target.type == "int" and isinstance(v, int):
                    values[target.name] = v
                elif target.type == "float":
                    values[target.name] = from_f32_bits(f32_bits(float(v)))
    return values


def _length_of(param: Param, conds: list[Expr]) -> int | None:
    """The length a condition gives the list ``param`` (``len(?p) == 4``), if one does."""
    for target, other in equations(conds):
        is_len = isinstance(target, Expr) and target.op == "len" and target.args == (param,)
        if is_len and isinstance(other, int):
            return other
    return None


def _key(p: Param) -> str:
    """Where a parameter's value is kept: its name; a wildcard's with its type (``?_`` may sit
    at an integer and at a list place of one rule, each drawn on its own)."""
    return f"{p.name}:{p.type}" if p.wild else p.name


def _bound(term: object, values: Mapping[str, Num | tuple[int, ...]]) -> object:
    """``term`` with the parameters ``values`` gives as literals (the rest as they are)."""
    if isinstance(term, Param) and _key(term) in values:
        return values[_key(term)]
    if isinstance(term, Expr):
        return Expr(term.op, tuple(_bound(a, values) for a in term.args))
    return term


def specialize(rule: Rule, values: Mapping[str, Num | tuple[int, ...]]) -> tuple[Rule, list[Expr]]:
    """``rule`` at these parameter values: parameters and arithmetic as literals, named guards
    kept; the conditions (to evaluate with shapes and ``values``) returned beside it. Raises
    :class:`Undefined` where a right-hand side's arithmetic has no value."""

    def lit(op: str, index: int, term: object) -> Any:
        if isinstance(term, Expr) and any(True for _ in tensors_of(term)):
            return _bound(term, values)  # reads a tensor's shape: computed as the side is built
        if isinstance(term, Param) and term.type == "ints" and _key(term) not in values:
            return term  # a list pinned to the shapes: the shape solver draws it
        if any(p.type == "ints" and _key(p) not in values for p in params_of(term)):
            return 1  # computed from a pinned list: known once the shapes are drawn
        v = values.get(_key(term)) if isinstance(term, Param) else evaluate(term, values, {})
        if v is None or isinstance(v, bool):
            raise Undefined(f"{term} has no value at {dict(values)}")
        if isinstance(v, tuple):  # a list
            return v
        if param_type(op, index) == "float":
            return f32_bits(float(v))
        return int(v)

    def sub(term: Term) -> Term:
        if not isinstance(term, Pattern):
            return term
        args: list[Term] = []
        index = 0
        for a, (_, kind) in zip(term.args, signature(term.op, len(term.args)).params, strict=True):
            if kind == "tensor":
                args.append(sub(a))
            elif isinstance(a, Param | Expr):
                args.append(lit(term.op, index, a))
            else:
                args.append(a)
            index += kind == "int"
        return Pattern(term.op, tuple(args))

    named = tuple(g for g in rule.guards if isinstance(g, Guard))
    conds = [g.expr for g in rule.guards if isinstance(g, Cond)]
    concrete = replace(
        rule,
        lhs=tuple(sub(p) for p in rule.lhs),  # type: ignore[misc]
        rhs=tuple(sub(p) for p in rule.rhs),  # type: ignore[misc]
        guards=named,
    )
    return concrete, conds
