"""List variables pinned by a rule's conditions: drawn from the shapes, not from a pool.

A reshape's list in a rule is usually a function of the tensors around it, and the rule says
which (``where ?f == [prod(take(shape(?x), -1)), dim(?x, -1)]``: the flatten of ``?x``'s leading
dims; ``where len(?h) == 4 and at(?h, 0) == dim(?x, 0)``: a head split that keeps the batch).
Drawn from a pool of shapes, such a list almost never fits, so the rule checker finds no
instance. A **pin** is what the conditions say of one list variable: its whole value, its
length, some of its items, as expressions over the tensors' facts. The shape solver
(:mod:`relsat.rewrite.shapes`) evaluates a pin symbolically over the dims it is solving for (a
reshape's target is then ``[x0 * x1, x2]``, which unifies with what reads it), gives the items
no condition names fresh dims, and after drawing fixes those so that the reshape keeps its
element count; the list's value is read off the drawn dims.

>>> from relsat.rewrite.rulefile import parse_rules
>>> rule = parse_rules('''# name: r
... (reshape ?x ?f:ints) => (reshape ?x ?f)
... where ?f == [prod(take(shape(?x), -1)), dim(?x, -1)]
... ''')["r"]
>>> pin = pins(rule)["f"]
>>> str(pin.whole), pin.length
('[prod(take(shape(?x), -1)), dim(?x, -1)]', None)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from relsat.rewrite.exprs import (
    BOUNDS,
    FACTS,
    INDEX_FACTS,
    LIST,
    VALUE_FACTS,
    Cond,
    Expr,
    Param,
    params_of,
    tensors_of,
)
from relsat.rewrite.rules import Rule, Var

__all__ = [
    "UNIT",
    "NotSymbolic",
    "OutOfRange",
    "Pin",
    "divisors",
    "equations",
    "length",
    "one",
    "pins",
    "ranks",
    "shapes",
    "symbolic",
]

#: A dim as the shape solver writes it: ("sym", i), ("const", n), ("sum", a, b), ("mul", a, b).
Dim = tuple[Any, ...]


class NotSymbolic(ValueError):
    """A pin the solver cannot evaluate over symbolic dims (a division, a comparison)."""


class OutOfRange(NotSymbolic):
    """A pin reads past the drawn rank (``dim(?x, 2)`` of a 2-D ``?x``): no instance there."""


@dataclass
class Pin:
    """What the conditions say of one list variable: ``whole`` (``?f == E``), ``length``
    (``len(?f) == n``), ``items`` (``at(?f, i) == E``, by index)."""

    whole: object | None = None
    length: int | None = None
    items: dict[int, object] = field(default_factory=dict)


def _conjuncts(e: object) -> Iterator[Expr]:
    if isinstance(e, Expr) and e.op in ("and", "chain"):
        for a in e.args:
            yield from _conjuncts(a)
    elif isinstance(e, Expr):
        yield e


def equations(conds: Iterable[Expr]) -> Iterator[tuple[object, object]]:
    """Both sides of every ``a == b`` conjunct of ``conds``, each way round: ``(a, b)`` and
    ``(b, a)``."""
    for e in conds:
        for c in _conjuncts(e):
            if c.op == "==":
                a, b = c.args
                yield a, b
                yield b, a


def _conds(rule: Rule) -> list[Expr]:
    return [g.expr for g in rule.guards if isinstance(g, Cond)]


def _reads_shapes(e: object) -> bool:
    return any(True for _ in tensors_of(e))


def pins(rule: Rule) -> dict[str, Pin]:
    """The list variables of ``rule`` that its conditions pin to its tensors' shapes (a
    condition ``?f == E`` where ``E`` reads a fact of a tensor, or ``at(?f, i) == E``), by name;
    ``len(?f) == n`` adds the length of a pinned list."""
    lists = {p.name for p in rule.params if p.type == "ints" and not p.wild}
    found: dict[str, Pin] = {}
    lengths: dict[str, int] = {}
    for target, other in equations(_conds(rule)):
        if isinstance(target, Param) and target.name in lists and _reads_shapes(other):
            if target.name not in {p.name for p in params_of(other)}:
                found.setdefault(target.name, Pin()).whole = other
        elif isinstance(target, Expr) and target.op == "len":
            (arg,) = target.args
            if isinstance(arg, Param) and arg.name in lists and isinstance(other, int):
                lengths[arg.name] = other
        elif isinstance(target, Expr) and target.op == "at" and _reads_shapes(other):
            arg, index = target.args
            if isinstance(arg, Param) and arg.name in lists and isinstance(index, int):
                found.setdefault(arg.name, Pin()).items[index] = other
    for name, n in lengths.items():
        if name in found:
            found[name].length = n
    return {n: p for n, p in found.items() if p.whole is not None or p.length is not None}


#: What :func:`shapes` gives a tensor of one element (``where size(?z) == 1``): every dim 1, at a
#: rank of its own.
UNIT = "unit"


def shapes(rule: Rule) -> dict[str, object]:
    """The tensor variables of ``rule`` whose shape its conditions pin to other tensors' (``where
    shape(?w) == [dim(?x, 1)] + ones(rank(?x) - 2)``: a channel vector of ``?x``), by name: the
    shape solver draws them so (a broadcast operand, which the solver would otherwise give the
    dims of what it broadcasts against). A tensor of one element (``size(?z) == 1``) is
    :data:`UNIT`."""
    found: dict[str, object] = {}
    for target, other in equations(_conds(rule)):
        if isinstance(target, Expr) and target.op == "size" and other == 1:
            if isinstance(target.args[0], Var):
                found.setdefault(target.args[0].name, UNIT)
            continue
        if isinstance(target, Expr) and target.op == "shape" and isinstance(target.args[0], Var):
            name = target.args[0].name
            reads = {_name(t) for t in tensors_of(other) if isinstance(t, Var)}
            if reads and name not in reads:
                found.setdefault(name, other)
    return found


def divisors(rule: Rule) -> list[tuple[object, object]]:
    """The pairs ``(a, b)`` of ``rule``'s conditions ``a % b == 0`` over tensors' dims and pinned
    lists (``dim(?x, 1) % at(?u, 1) == 0``: groups that divide the channels): the shape solver
    draws ``a`` as ``b`` times a dim of its own."""
    lists = {p.name for p in rule.params if p.type == "ints"}
    found = []
    for target, other in equations(_conds(rule)):
        if isinstance(target, Expr) and target.op == "%" and other == 0:
            a, b = target.args
            reads = [*tensors_of(target), *(p for p in params_of(target) if p.name in lists)]
            if reads and all(p.name in lists for p in params_of(target)):
                found.append((a, b))
    return found


def ranks(rule: Rule) -> dict[str, int]:
    """The ranks ``rule``'s conditions fix (``rank(?x) == 3``), by tensor variable."""
    return {
        _name(target.args[0]): other
        for target, other in equations(_conds(rule))
        if isinstance(target, Expr) and target.op == "rank" and isinstance(other, int)
    }


def length(term: object, rank: Callable[[str], int]) -> int:
    """How many items the list ``term`` has, given each tensor variable's ``rank``."""
    if isinstance(term, tuple):
        return len(term)
    if not isinstance(term, Expr):
        raise NotSymbolic(f"{term} is no list")
    op, args = term.op, term.args
    if op == "shape":
        return rank(_name(args[0]))
    if op == LIST:
        return len(args)
    if op == "append":
        return length(args[0], rank) + 1
    if op == "iota" and isinstance(args[0], int):
        return args[0]
    if op == "ones":
        return _count(args[0], rank)
    if op == "+":
        return length(args[0], rank) + length(args[1], rank)
    if op == "take" and isinstance(args[1], int):
        n, whole = args[1], length(args[0], rank)
        return n if n >= 0 else whole + n
    if op == "drop" and isinstance(args[1], int):
        n, whole = args[1], length(args[0], rank)
        return whole - n if n >= 0 else -n
    if op == "compose":
        return length(args[1], rank)
    raise NotSymbolic(f"the length of {term} is not known before the shapes are")


def _count(term: object, rank: Callable[[str], int]) -> int:
    """An integer the ranks give (``rank(?x) - 2``): a list's length before the shapes."""
    if isinstance(term, int) and not isinstance(term, bool):
        return term
    if isinstance(term, Expr) and term.op == "rank":
        return rank(_name(term.args[0]))
    if isinstance(term, Expr) and term.op == "len":
        return length(term.args[0], rank)
    if isinstance(term, Expr) and term.op in ("+", "-", "*"):
        a, b = (_count(x, rank) for x in term.args)
        return a + b if term.op == "+" else a - b if term.op == "-" else a * b
    raise NotSymbolic(f"{term} is not known before the shapes are")


def symbolic(
    term: object, dims: Callable[[str], list[Dim]], values: dict[str, Any]
) -> Dim | list[Dim]:
    """``term`` over symbolic dims: a list's items or a number, as the solver's expressions;
    ``dims(name)`` gives a tensor variable's dims, ``values`` the parameters drawn so far."""
    if isinstance(term, bool):
        raise NotSymbolic("a condition is no dim")
    if isinstance(term, int):
        return ("const", term)
    if isinstance(term, tuple):
        return [("const", n) for n in term]
    if isinstance(term, Param):
        v = values.get(term.name)
        if isinstance(v, list):  # a list pinned before this one, over the solver's dims
            return v
        if isinstance(v, int):
            return ("const", v)
        if isinstance(v, tuple):
            return [("const", n) for n in v]
        raise NotSymbolic(f"{term} has no value yet")
    if not isinstance(term, Expr):
        raise NotSymbolic(f"{term} is a tensor")
    op, args = term.op, term.args
    if op in VALUE_FACTS or op in BOUNDS or op in INDEX_FACTS or op == "weights":
        raise NotSymbolic(f"{term} is a fact of values")
    if op in FACTS:
        shape = dims(_name(args[0]))
        if op == "shape":
            return list(shape)
        if op == "rank":
            return ("const", len(shape))
        if op == "size":
            return _product(shape)
        return _item(shape, _const(symbolic(args[1], dims, values)))
    sub = [symbolic(a, dims, values) for a in args]
    if op == LIST:
        return [one(s) for s in sub]
    if op == "take":
        items, n = _many(sub[0]), _const(sub[1])
        if abs(n) > len(items):
            raise OutOfRange(f"{term}: past the list")
        return items[:n]
    if op == "drop":
        items, n = _many(sub[0]), _const(sub[1])
        if abs(n) > len(items):
            raise OutOfRange(f"{term}: past the list")
        return items[n:]
    if op == "append":
        return [*_many(sub[0]), one(sub[1])]
    if op == "prod":
        return _product(_many(sub[0]))
    if op == "at":
        return _item(_many(sub[0]), _const(sub[1]))
    if op == "len":
        return ("const", len(_many(sub[0])))
    if op == "ones":
        n = _const(sub[0])
        if n < 0:
            raise OutOfRange(f"{term}: a negative count")
        return [("const", 1)] * n
    if op == "+" and isinstance(sub[0], list):  # one list after the other
        return [*sub[0], *_many(sub[1])]
    if op in ("+", "*"):
        a, b = one(sub[0]), one(sub[1])
        return ("sum" if op == "+" else "mul", a, b)
    if op == "-" and one(sub[0])[0] == "const" and one(sub[1])[0] == "const":
        return ("const", int(one(sub[0])[1]) - int(one(sub[1])[1]))
    raise NotSymbolic(f"{term} is not a product of dims")


def _name(term: object) -> str:
    if not isinstance(term, Var):
        raise NotSymbolic(f"{term} is not a tensor variable")
    return term.name


def one(v: Dim | list[Dim]) -> Dim:
    """``v`` as one dim; raises :class:`NotSymbolic` for a list."""
    if isinstance(v, list):
        raise NotSymbolic("a list where a number is needed")
    return v


def _many(v: Dim | list[Dim]) -> list[Dim]:
    if not isinstance(v, list):
        raise NotSymbolic("a number where a list is needed")
    return v


def _const(v: Dim | list[Dim]) -> int:
    v = one(v)
    if v[0] != "const":
        raise NotSymbolic("an index that depends on a dim")
    return int(v[1])


def _item(items: list[Dim], i: int) -> Dim:
    j = i + len(items) if i < 0 else i
    if not 0 <= j < len(items):
        raise OutOfRange(f"item {i} of a list of {len(items)}")
    return items[j]


def _product(items: list[Dim]) -> Dim:
    out: Dim = ("const", 1)
    for e in items:
        out = e if out == ("const", 1) else ("mul", out, e)
    return out
