"""Dims spelled as expressions of other dims: ``past + 1``, ``s0 + s1``, ``2*s0``.

torch's dynamo exporter names a dim it derives from others by the expression (a KV-cache
decoder's attention mask is ``[batch, past + 1]`` beside a past of ``[batch, 2, past, 32]``);
:func:`parse` reads such a ``dim_param`` into a polynomial over dim names, and :class:`Sum`
is one of them kept as a dim of its own: its value follows the dims it is made of, so a model
priced, checked or run at other values of ``past`` gets ``past + 1`` with them.

>>> parse("past + 1", {"past"})
(((), 1), (('past',), 1))
>>> spell_poly(parse("2*s0 - 1", set()))  # spaces around + and -, or a *: an expression
'2*s0 - 1'
>>> parse("sequence-length", set()) is None  # a name with a hyphen, not a difference
True
>>> Sum("past + 1", parse("past + 1", {"past"}), ()).at({"past": 128})
129
"""

from __future__ import annotations

import ast
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

__all__ = [
    "SUM_CONSTANT",
    "Poly",
    "Sum",
    "add",
    "constant",
    "linear",
    "multiply",
    "parse",
    "sign",
    "spell_poly",
    "spell_quotient",
    "value",
]

#: A polynomial over dim names: ((monomial: sorted names, repeated for powers), coefficient),
#: the constant's monomial ``()``; canonical (sorted, no zero coefficients).
Poly = tuple[tuple[tuple[str, ...], int], ...]

#: The largest constant a dim plus a constant is guessed with, where a model's sums are worked
#: out rather than spelled (:func:`relsat.onnx.marked.summed_dims`,
#: :func:`relsat.onnx.shapefold.fold`).
SUM_CONSTANT = 2


@dataclass(frozen=True)
class Sum:
    """A dim that is a polynomial of other dims and not a product of them (``past + 1``): its
    ``name`` (the ``dim_param`` the model spells it with), its ``terms`` and the ``(input,
    axis)`` places it occurs. With a ``divisor`` above 1 it is the polynomial floor-divided by
    it: an image side after a strided convolution or pooling, ``(H + 1)//2`` (its terms may
    name such dims in turn: ``((H + 1)//2 + 1)//2``).

    >>> Sum("(H + 1)//2", parse("H + 1", {"H"}), (), 2).at({"H": 224})
    112
    """

    name: str
    terms: Poly
    axes: tuple[tuple[str, int], ...]
    divisor: int = 1

    @property
    def is_atom(self) -> bool:
        """Is it no product of other dims (several terms, or divided)?"""
        return len(self.terms) > 1 or self.divisor > 1

    @property
    def names(self) -> tuple[str, ...]:
        """The dims it is made of, in order of first occurrence."""
        return tuple(dict.fromkeys(n for mono, _ in self.terms for n in mono))

    def at(self, values: Mapping[str, int]) -> int:
        """Its value with the dims at ``values``."""
        return value(self.terms, values) // self.divisor

    def solve(self, value: int, known: Mapping[str, int]) -> tuple[str, int] | None:
        """The one dim of it not in ``known`` and its value when the sum is ``value`` (a dim
        that occurs once, to the first power, and divides out), else None."""
        unknown = [n for n in self.names if n not in known]
        if len(unknown) != 1 or self.divisor != 1:
            return None
        (name,) = unknown
        linear = [c for mono, c in self.terms if mono == (name,)]
        if len(linear) != 1 or any(name in mono for mono, _ in self.terms if mono != (name,)):
            return None
        rest = sum(
            c * math.prod(known[n] for n in mono) for mono, c in self.terms if mono != (name,)
        )
        q, r = divmod(value - rest, linear[0])
        return (name, q) if r == 0 and q > 0 else None


def linear(names: tuple[str, ...], constant: int) -> Poly:
    """The sum of ``names`` and ``constant``."""
    terms: list[tuple[tuple[str, ...], int]] = [((n,), 1) for n in names]
    return _canonical(terms + ([((), constant)] if constant else []))


def value(poly: Poly, values: Mapping[str, int]) -> int:
    """``poly`` with the dims at ``values`` (``KeyError`` for a dim without one).

    >>> value(parse("2*past + 1", {"past"}), {"past": 4})
    9
    """
    return sum(c * math.prod(values[n] for n in mono) for mono, c in poly)


def constant(k: int) -> Poly:
    """The number ``k`` as a polynomial."""
    return (((), int(k)),) if k else ()


def add(*polys: Poly) -> Poly:
    """The sum of ``polys``."""
    return _canonical([t for p in polys for t in p])


def multiply(a: Poly, b: Poly) -> Poly:
    """The product of ``a`` and ``b``."""
    return _canonical([(tuple(sorted(ma + mb)), ca * cb) for ma, ca in a for mb, cb in b])


def sign(poly: Poly) -> int | None:
    """The sign ``poly`` has at every value of its dims (each >= 0): 0 for the zero polynomial,
    1 when no coefficient is negative (>= 0 throughout), -1 when none is positive (<= 0), None
    when its coefficients differ in sign.

    >>> sign(parse("past + 1", {"past"})), sign(parse("past - 1", {"past"}))
    (1, None)
    >>> past = ((("past",), 1),)
    >>> sign(add(parse("past + 1", {"past"}), constant(-1), multiply(constant(-1), past)))
    0
    """
    if not poly:
        return 0
    if all(c > 0 for _, c in poly):
        return 1
    if all(c < 0 for _, c in poly):
        return -1
    return None


def parse(text: str, names: Collection[str]) -> Poly | None:
    """``text`` (a ``dim_param``) as a polynomial over dim names when it spells an expression:
    it parses as integers and names with ``+``, ``-`` and ``*``, and either every name in it is
    a dim of ``names`` or it is written as exporters write one (spaces around ``+`` and ``-``,
    or a ``*``). None for a plain name or anything else (``sequence-length`` is a name)."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        return None
    if isinstance(tree, ast.Name):
        return None
    try:
        poly = _poly(tree)
    except ValueError:
        return None
    used = {n for mono, _ in poly for n in mono}
    if not used:
        return None  # a number spelled as a name: not a dim
    spelled = " + " in text or " - " in text or "*" in text
    return poly if spelled or used <= set(names) else None


def spell_quotient(poly: Poly, divisor: int) -> str:
    """``poly`` floor-divided by ``divisor`` in words: ``(H + 1)//2``, ``H//4``.

    >>> spell_quotient(parse("H + 1", {"H"}), 2), spell_quotient(((("H",), 1),), 4)
    ('(H + 1)//2', 'H//4')
    """
    body = spell_poly(poly)
    if divisor == 1:
        return body
    simple = len(poly) == 1 and poly[0][1] == 1 and len(poly[0][0]) == 1
    return f"{body if simple else f'({body})'}//{divisor}"


def spell_poly(poly: Poly) -> str:
    """``poly`` in words, as dynamo writes it: ``past + 1``, ``2*s0 - 1``; a dim that is an
    expression is parenthesized in a product, ``(height//16)*(width//16) + 1``."""
    out = ""
    for mono, c in sorted(poly, key=lambda t: (t[0] == (), t[0])):
        alone = len(mono) == 1 and c == 1
        body = "*".join(n if alone or not _compound(n) else f"({n})" for n in mono)
        text = str(abs(c)) if not mono else (body if abs(c) == 1 else f"{abs(c)}*{body}")
        if not out:
            out = text if c > 0 else f"-{text}"
        else:
            out += f" + {text}" if c > 0 else f" - {text}"
    return out or "0"


def _compound(name: str) -> bool:
    """Is ``name`` an expression (``height//16``), parenthesized inside a product?"""
    return any(ch in name for ch in " +-*/")


def _poly(node: ast.AST) -> Poly:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return constant(node.value)
    if isinstance(node, ast.Name):
        return (((node.id,), 1),)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _scaled(_poly(node.operand), -1)
    if isinstance(node, ast.BinOp):
        left, right = _poly(node.left), _poly(node.right)
        if isinstance(node.op, ast.Add):
            return add(left, right)
        if isinstance(node.op, ast.Sub):
            return add(left, _scaled(right, -1))
        if isinstance(node.op, ast.Mult):
            return multiply(left, right)
    raise ValueError(ast.dump(node))


def _scaled(poly: Poly, k: int) -> Poly:
    return tuple((mono, c * k) for mono, c in poly)


def _canonical(terms: list[tuple[tuple[str, ...], int]]) -> Poly:
    out: dict[tuple[str, ...], int] = {}
    for mono, c in terms:
        out[mono] = out.get(mono, 0) + c
    return tuple(sorted((m, c) for m, c in out.items() if c))
