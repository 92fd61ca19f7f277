"""Values in rules: parameter variables, arithmetic, and conditions over variables and facts.

A rule's left-hand side may bind an operator's parameter to a typed variable instead of a literal
(``(scalar ?eps:float)``, ``(repeatkv ?n:int ?kv)``, ``(slice 3 ?h:int ?d:int 1 ?x)``): a
:class:`Param`. The right-hand side may use it at a parameter position, as it is or in arithmetic
(``(repeatkv (* ?n 2) ?kv)``, an :class:`Expr` in s-expression form). A ``where`` line may be a
:class:`Cond`: a boolean expression over parameter variables, literals and **facts** of the
tensors bound (:data:`FACTS`: ``rank(?x)``, ``dim(?x, -1)``, ``weights(?x)``), written infix::

    where 0 < ?eps < 1e-3
    where ?h % ?hkv == 0 and rank(?x) == 4
    where dim(?x, -1) == 2 * ?d

Types: ``int`` and ``float`` parameters (a float parameter is stored as its float32 bits, as every
float parameter of an e-node is), and ``ints``, a list of integers: a transpose's permutation, a
reshape's shape (``(transpose ?x ?p:ints ?s:int)``), written ``[0 2 1 3]`` as a literal and read
with the list functions of :data:`FUNCS` (``len(?p)``, ``at(?p, -1)``, ``compose(?p, ?q)``,
``iota(n)``, ``take(?p, -1)``, ``drop(?p, 1)``, ``append(?p, n)``, ``prod(?p)``, ``ones(n)``,
``broadcast(shape(?a), shape(?b))``: the shape an element-wise operator of ``?a`` and ``?b``
writes) and the fact
``shape(?x)``; a list of computed items is written ``[dim(?x, 0) * dim(?x, 1), dim(?x, 2)]``
(commas between items; ``(list …)`` on a right-hand side); lists compare with ``==`` and ``!=``
and join with ``+`` (``[dim(?x, 1)] + ones(rank(?x) - 2)``: a channel vector as it broadcasts).
The facts of values are conditions (``finite(?m)``, ``nonneg(?x)``, ``halves(?c)``,
``pairs(?c)``) and bounds (``lo(?s)``, ``hi(?s)``, floats: ``lo(?s) == 1 and hi(?s) == 1`` says
every value of ``?s`` is 1).
Arithmetic on ints gives an int (``/`` must divide exactly: a
right-hand side that divides adds the condition that it does), on a float a float; comparisons,
``and``, ``or`` and ``not`` give a boolean. A fact's first argument is a tensor variable; a negative
axis counts from the last (``dim(?x, -1)`` is the last dim whatever the rank).

The engine compiles conditions and right-hand-side arithmetic into SQL (relsat.engine.compile);
:func:`evaluate` computes them in Python for the rule checker.

>>> e = Expr("*", (2, Param("d", "int")))
>>> str(e), evaluate(e, {"d": 32}, {})
('2 * ?d', 64)
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

from relsat.errors import RuleError

__all__ = [
    "ARITH",
    "BOUNDS",
    "COMPARE",
    "FACTS",
    "FUNCS",
    "INDEX_FACTS",
    "LIST",
    "LOGIC",
    "VALUE_FACTS",
    "Cond",
    "Expr",
    "Fact",
    "Num",
    "Param",
    "Value",
    "evaluate",
    "expr_type",
    "params_of",
    "sexpr",
    "subexprs",
    "tensors_of",
]

#: Parameter types a variable can be declared with.
PARAM_TYPES = ("int", "float", "ints")
ARITH = ("+", "-", "*", "/", "%")
COMPARE = ("<", "<=", "==", "!=", ">", ">=")
LOGIC = ("and", "or", "not")


@dataclass(frozen=True)
class Param:
    """A parameter variable, ``?name:type`` (type ``int``, ``float`` or ``ints``). A name that
    starts with ``_`` (``?_``, ``?_shuffle``) is a wildcard: it matches any value and binds
    nothing, so that a pattern says "any" without spending a slot."""

    name: str
    type: str

    @property
    def wild(self) -> bool:
        return self.name.startswith("_")

    def __post_init__(self) -> None:
        if self.type not in PARAM_TYPES:
            raise RuleError(f"?{self.name}: unknown type {self.type!r} (known: int, float, ints)")

    def __str__(self) -> str:  # the type is written once per rule (relsat.rewrite.rules)
        return f"?{self.name}"


@dataclass(frozen=True)
class Fact:
    """A fact of a tensor: its SQL over the e-class row ``e`` (``$a`` the second argument) and
    its value in Python from a shape."""

    params: tuple[str, ...]  # 'tensor' or 'int' per argument
    type: str
    doc: str


#: Facts a condition can read of a bound tensor (e-class analyses kept by the engine).
FACTS: dict[str, Fact] = {
    "rank": Fact(("tensor",), "int", "the number of dims of ?x"),
    "dim": Fact(("tensor", "int"), "int", "dim i of ?x (a negative i counts from the last)"),
    "size": Fact(("tensor",), "int", "the number of elements of ?x"),
    "weights": Fact(("tensor",), "bool", "?x is computed from weights alone (a constant)"),
    "shape": Fact(("tensor",), "ints", "the dims of ?x, as a list"),
    # facts of values (relsat.graph.facts: the e-graph's table `fact`)
    "finite": Fact(("tensor",), "bool", "every value of ?x is a finite float32 (no inf, no NaN)"),
    "nonneg": Fact(("tensor",), "bool", "every value of ?x is >= 0"),
    "halves": Fact(("tensor",), "bool", "the two halves of ?x's last axis are equal"),
    "pairs": Fact(("tensor",), "bool", "entries 2i and 2i+1 of ?x's last axis are equal"),
    "lo": Fact(("tensor",), "float", "a bound below every value of ?x (a constant's least)"),
    "hi": Fact(("tensor",), "float", "a bound above every value of ?x (a constant's greatest)"),
    "grid": Fact(
        ("tensor",),
        "ints",
        "the lengths along which a GatherND at index ?i reads its data, one per component of "
        "its last axis (each the position along one axis of the others, in order; a data dim "
        "longer than its length is read in its first rows): undefined where ?i is no such "
        "index grid",
    ),
    "rows": Fact(
        ("tensor",),
        "ints",
        "the dims of the data a row index ?i into that data flattened reads in row-major "
        "order, one per axis > 1 of ?i (a dim longer than the axis is read in its first "
        "rows): undefined where ?i is no such index",
    ),
}
#: The facts of values: what the rule checker makes hold of the values it draws.
VALUE_FACTS = ("finite", "nonneg", "halves", "pairs")
#: The bounds of values, numbers a condition compares (``lo(?s) == 1 and hi(?s) == 1``: every
#: value 1); where nothing bounds a tensor they have no value, and a condition reading them
#: fails. The rule checker draws values within bounds that make the conditions hold.
BOUNDS = ("lo", "hi")
#: The index facts (lists; undefined where unknown): what a gather at the index reads whole.
INDEX_FACTS = ("grid", "rows")

#: Functions of lists (``ints``): argument types and the result's type.
FUNCS: dict[str, Fact] = {
    "len": Fact(("ints",), "int", "the length of a list"),
    "at": Fact(("ints", "int"), "int", "item i of a list (a negative i counts from the last)"),
    "compose": Fact(
        ("ints", "ints"), "ints", "compose(p, q)[i] = p[q[i]]: a transpose by p, then by q"
    ),
    "iota": Fact(("int",), "ints", "[0, 1, …, n - 1]: the identity permutation of n dims"),
    "take": Fact(
        ("ints", "int"), "ints", "the first n items of a list (a negative n: all but the last -n)"
    ),
    "drop": Fact(
        ("ints", "int"), "ints", "the list without its first n items (a negative n: the last -n)"
    ),
    "append": Fact(("ints", "int"), "ints", "the list with one more item at its end"),
    "prod": Fact(("ints",), "int", "the product of a list's items (1 for an empty list)"),
    "ones": Fact(("int",), "ints", "[1, 1, …, 1]: n ones (the unit dims of a broadcast operand)"),
    "squeeze": Fact(("ints",), "ints", "the items other than 1 (a shape's dims longer than 1)"),
    "broadcast": Fact(
        ("ints", "ints"),
        "ints",
        "the shape two shapes broadcast to (NumPy's rule; undefined where they do not)",
    ),
}
#: A list written with computed items, ``[dim(?x, 0) * dim(?x, 1), dim(?x, 2)]``: the
#: expression ``Expr(LIST, items)`` (a literal's items are plain integers: a tuple).
LIST = "list"


Num: TypeAlias = "int | float"
#: A value a rule computes: a number, a condition's truth, a list; None where undefined.
Value: TypeAlias = "int | float | bool | tuple[int, ...] | None"


@dataclass(frozen=True)
class Expr:
    """An operation on values: arithmetic (:data:`ARITH`, ``neg``), a comparison
    (:data:`COMPARE`), ``and``/``or``/``not``, or a fact (:data:`FACTS`) of a tensor variable."""

    op: str
    args: tuple[Expr | Param | Num | object, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))

    def __str__(self) -> str:
        return _infix(self, 0)


@dataclass(frozen=True)
class Cond:
    """A ``where`` line that is an expression (not a guard of the closed vocabulary)."""

    expr: Expr

    def __str__(self) -> str:
        return str(self.expr)


# ---------------------------------------------------------------------------------------------
# Printing

_PREC = {"or": 1, "and": 2, "not": 3, **dict.fromkeys(COMPARE, 4), "+": 5, "-": 5}
_PREC.update({"*": 6, "/": 6, "%": 6, "neg": 7})


def _num(value: object) -> str:
    if isinstance(value, tuple):  # an ints literal
        return "[" + " ".join(map(str, value)) + "]"
    if isinstance(value, float):
        text = repr(value)
        return text if any(c in text for c in ".en") else text + ".0"
    return str(value)


def _infix(term: object, outer: int) -> str:
    if not isinstance(term, Expr):
        return _num(term) if isinstance(term, int | float | tuple) else str(term)
    op, args = term.op, term.args
    if op in FACTS or op in FUNCS:
        return f"{op}({', '.join(_infix(a, 0) for a in args)})"
    if op == LIST:
        return f"[{', '.join(_infix(a, 0) for a in args)}]"
    if op == "chain":  # a < b < c: the two comparisons share b, printed once
        first, second = args
        assert isinstance(first, Expr) and isinstance(second, Expr)
        prec = _PREC["<"]
        text = " ".join(
            [
                _infix(first.args[0], prec + 1),
                first.op,
                _infix(first.args[1], prec + 1),
                second.op,
                _infix(second.args[1], prec + 1),
            ]
        )
        prec = _PREC["and"]
    elif op in ("neg", "not"):
        prec = _PREC[op]
        text = ("-" if op == "neg" else "not ") + _infix(args[0], prec)
    else:
        prec = _PREC[op]
        left, right = args
        text = f"{_infix(left, prec)} {op} {_infix(right, prec + 1)}"
    return f"({text})" if prec < outer else text


def sexpr(term: object) -> str:
    """A right-hand side's value in s-expression form: ``(* ?n 2)``."""
    if isinstance(term, Expr):
        return "(" + " ".join([term.op, *(sexpr(a) for a in term.args)]) + ")"
    return _num(term) if isinstance(term, int | float | tuple) else str(term)


# ---------------------------------------------------------------------------------------------
# Types and walking


def params_of(term: object) -> Iterator[Param]:
    """The parameter variables of ``term``, in order, repeats included."""
    if isinstance(term, Param):
        yield term
    elif isinstance(term, Expr):
        for a in term.args:
            yield from params_of(a)


def subexprs(term: object) -> Iterator[Expr]:
    """Every operation of ``term``, outermost first."""
    if isinstance(term, Expr):
        yield term
        for a in term.args:
            yield from subexprs(a)


def tensors_of(term: object) -> Iterator[object]:
    """The tensor variables (facts' first arguments) of ``term``."""
    if isinstance(term, Expr):
        if term.op in FACTS:
            yield term.args[0]
        for a in term.args:
            yield from tensors_of(a)


def expr_type(term: object) -> str:
    """``int``, ``float``, ``ints`` or ``bool``; raises :class:`RuleError` for an ill-typed
    expression."""
    if isinstance(term, bool):
        return "bool"
    if isinstance(term, int):
        return "int"
    if isinstance(term, tuple):
        return "ints"
    if isinstance(term, float):
        return "float"
    if isinstance(term, Param):
        return term.type
    if not isinstance(term, Expr):
        raise RuleError(f"{term} is a tensor, not a number (use a fact: rank({term}), …)")
    op, args = term.op, term.args
    if op in FACTS:
        fact = FACTS[op]
        if len(args) != len(fact.params):
            raise RuleError(f"{op} takes {len(fact.params)} arguments, got {len(args)}")
        for kind, a in zip(fact.params, args, strict=True):
            if kind == "tensor" and isinstance(a, Param | Expr | int | float):
                raise RuleError(f"{op}'s first argument must be a tensor variable, got {a}")
            if kind == "int" and expr_type(a) != "int":
                raise RuleError(f"{op}'s axis must be an integer, got {a}")
        return fact.type
    if op == LIST:
        if any(expr_type(a) != "int" for a in args):
            raise RuleError(f"a list holds integers, got {_infix(term, 0)}")
        return "ints"
    if op in FUNCS:
        fn = FUNCS[op]
        if len(args) != len(fn.params):
            raise RuleError(f"{op} takes {len(fn.params)} arguments, got {len(args)}")
        for want, a in zip(fn.params, args, strict=True):
            if expr_type(a) != want:
                raise RuleError(f"{op} takes {', '.join(fn.params)}, got {_infix(term, 0)}")
        return fn.type
    types = [expr_type(a) for a in args]
    if "ints" in types:
        if op == "+" and types == ["ints", "ints"]:  # one list after the other
            return "ints"
        if op not in ("==", "!=") or types != ["ints", "ints"]:
            raise RuleError(
                f"lists compare with == and != and join with + only, got {_infix(term, 0)}"
            )
        return "bool"
    if op in ("and", "or", "not", "chain"):
        if any(t != "bool" for t in types):
            raise RuleError(f"'{op}' takes conditions, got {_infix(term, 0)}")
        return "bool"
    if "bool" in types:
        raise RuleError(f"'{op}' takes numbers, got a condition in {_infix(term, 0)}")
    if op in COMPARE:
        return "bool"
    if op == "%" and "float" in types:
        raise RuleError(f"'%' takes integers, got {_infix(term, 0)}")
    if op in ("/", "%") and isinstance(args[1], int | float) and args[1] == 0:
        raise RuleError(f"division by zero in {_infix(term, 0)}")
    return "float" if "float" in types else "int"


# ---------------------------------------------------------------------------------------------
# Evaluation (the rule checker's)


def evaluate(
    term: object,
    values: Mapping[str, Num | tuple[int, ...]],
    shapes: Mapping[str, Sequence[int]],
    bounds: Mapping[str, tuple[float, float]] | None = None,
    indices: Mapping[str, Mapping[str, Value]] | None = None,
) -> Value:
    """``term``'s value with parameters from ``values``, tensor shapes from ``shapes``, the
    bounds of tensors' values from ``bounds`` (``lo``, ``hi``) and the index facts of drawn
    indices from ``indices`` (tensor → ``grid`` / ``rows`` → its list or None); None where it is
    undefined (an integer division that leaves a remainder, a dim past the rank, a division by
    zero, a bound or index fact not given). Floats are computed in float64, parameters as
    given."""
    if isinstance(term, int | float | tuple):
        return term
    if isinstance(term, Param):
        return values[term.name]
    if not isinstance(term, Expr):
        raise RuleError(f"{term} is a tensor, not a number")
    op, args = term.op, term.args
    if op in BOUNDS:
        known = (bounds or {}).get(str(getattr(args[0], "name", "")))
        return None if known is None else known[BOUNDS.index(op)]
    if op in INDEX_FACTS:  # known only of an index the checker drew
        return (indices or {}).get(str(getattr(args[0], "name", "")), {}).get(op)
    if op in FACTS:
        name = getattr(args[0], "name", None)
        shape = tuple(shapes[name]) if isinstance(name, str) and name in shapes else None
        if op == "weights":
            return None
        if shape is None:
            return None
        if op in ("halves", "pairs"):  # the checker draws such values where the shape allows
            return bool(shape) and shape[-1] >= 2 and shape[-1] % 2 == 0
        if op in VALUE_FACTS:
            return True
        if op == "rank":
            return len(shape)
        if op == "size":
            return math.prod(shape)
        if op == "shape":
            return shape
        axis = evaluate(args[1], values, shapes, bounds, indices)
        if not isinstance(axis, int):
            return None
        axis = axis + len(shape) if axis < 0 else axis
        return shape[axis] if 0 <= axis < len(shape) else None
    if op == "chain":
        a, b = (evaluate(x, values, shapes, bounds, indices) for x in args)
        return None if a is None or b is None else bool(a and b)
    vals = [evaluate(a, values, shapes, bounds, indices) for a in args]
    if any(v is None for v in vals):
        return None
    if op == LIST:
        return tuple(vals)  # type: ignore[arg-type]
    if op in FUNCS:
        return _function(op, vals)
    if op == "not":
        return not vals[0]
    if op == "neg":
        return -vals[0]  # type: ignore[operator]
    a, b = vals
    if op == "and":
        return bool(a and b)
    if op == "or":
        return bool(a or b)
    if op in COMPARE:
        return {
            "<": a < b,  # type: ignore[operator]
            "<=": a <= b,  # type: ignore[operator]
            "==": a == b,
            "!=": a != b,
            ">": a > b,  # type: ignore[operator]
            ">=": a >= b,  # type: ignore[operator]
        }[op]
    if op in ("/", "%") and b == 0:
        return None
    if op == "+":
        return a + b  # type: ignore[operator]
    if op == "-":
        return a - b  # type: ignore[operator]
    if op == "*":
        return a * b  # type: ignore[operator]
    if op == "%":
        return a % b  # type: ignore[operator]
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
        return a // b if a % b == 0 else None
    return a / b  # type: ignore[operator]


def _function(op: str, vals: Sequence[object]) -> Value:
    """A list function (:data:`FUNCS`) of evaluated arguments; None where undefined."""
    if op == "len":
        return len(vals[0])  # type: ignore[arg-type]
    if op == "iota":
        n = vals[0]
        return tuple(range(n)) if isinstance(n, int) and n >= 0 else None
    if op == "at":
        items, i = vals
        assert isinstance(items, tuple) and isinstance(i, int)
        i = i + len(items) if i < 0 else i
        return items[i] if 0 <= i < len(items) else None
    if op == "take":
        items, n = vals
        assert isinstance(items, tuple) and isinstance(n, int)
        return items[:n] if -len(items) <= n <= len(items) else None
    if op == "drop":
        items, n = vals
        assert isinstance(items, tuple) and isinstance(n, int)
        return items[n:] if -len(items) <= n <= len(items) else None
    if op == "append":
        items, v = vals
        assert isinstance(items, tuple) and isinstance(v, int)
        return (*items, v)
    if op == "prod":
        assert isinstance(vals[0], tuple)
        return math.prod(vals[0])
    if op == "ones":
        n = vals[0]
        return (1,) * n if isinstance(n, int) and n >= 0 else None
    if op == "squeeze":
        assert isinstance(vals[0], tuple)
        return tuple(n for n in vals[0] if n != 1)
    if op == "broadcast":
        try:
            return tuple(int(n) for n in np.broadcast_shapes(*vals))  # type: ignore[arg-type]
        except ValueError:
            return None
    p, q = vals  # compose
    assert isinstance(p, tuple) and isinstance(q, tuple)
    if any(not 0 <= i < len(p) for i in q):
        return None
    return tuple(p[i] for i in q)
