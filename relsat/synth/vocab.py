"""What the synthesizer enumerates: operator templates (an operator with its parameter values
fixed) and typed variables (names with small concrete shapes), chosen from an operator list.

A template's ``kind`` tells the enumeration query (``sql/synth/enumerate.sql``) which children
can fit: ``leaf`` (a constant, no children), ``unary``, ``same`` (element-wise: equal shapes or a
rank-0 scalar), ``matmul``, ``conv`` (4-D input and weight), ``concat`` (equal but for the axis),
``split`` (a piece of a split of a concat), ``enlarge`` (two 4-D weights). The graph builder
has the last word on validity: a combination it refuses is dropped.

``exact``: the operator is a polynomial or rational map (or a piece of data movement), so terms
built only from exact operators are fingerprinted modulo a prime as well as in floating point.

>>> [t.op for t in templates(("ewadd", "relu"))]
['ewadd', 'relu']
>>> default_vars(("ewadd",))[0]
('a', (3, 3))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from relsat.graph.ops import f32_bits
from relsat.rewrite.rules import OPERATORS

__all__ = [
    "CONSTANTS",
    "ENUMERABLE",
    "EXACT",
    "TENSAT_OPS",
    "Template",
    "default_vars",
    "default_weights",
    "templates",
    "unknown_ops",
]


@dataclass(frozen=True)
class Template:
    """An operator with its integer parameters fixed: ``(op p0 p1 … children…)``."""

    op: str
    kind: str
    arity: int
    params: tuple[int, ...] = ()


_ELEMENTWISE = ("ewadd", "ewmul", "ewsub", "ewdiv", "ewpow")
_UNARY = (
    "relu", "relu6", "tanh", "sigmoid", "sqrt", "erf", "reciprocal", "neg", "cos", "sin",
    "gelu", "gelu_tanh", "softmax", "reducemean",
)  # fmt: skip
#: Operators the synthesizer can enumerate (the others take string, float or 3+ tensor
#: arguments: not yet).
ENUMERABLE = (*_ELEMENTWISE, *_UNARY, "matmul", "conv2d", "concat", "split", "enlarge", "scalar")
#: TENSAT's operators, the default ``--ops`` (transpose, reshape and merge are not enumerable).
TENSAT_OPS = ("ewadd", "ewmul", "matmul", "conv2d", "relu", "concat", "split", "enlarge")
#: Exact operators: fingerprinted modulo a prime too (see the module docstring).
EXACT = frozenset(
    {"ewadd", "ewmul", "ewsub", "ewdiv", "neg", "reciprocal", "matmul", "conv2d", "concat"}
    | {"split", "split_0", "split_1", "enlarge", "scalar"}
)
#: The constants ``scalar`` brings in (float values; rank-0 tensors).
CONSTANTS = (1.0, 2.0, 0.5, -0.5)


def unknown_ops(ops: Sequence[str]) -> list[str]:
    """The names in ``ops`` that the synthesizer cannot enumerate (unknown or unsupported)."""
    return [op for op in ops if op not in ENUMERABLE]


def templates(ops: Sequence[str]) -> list[Template]:
    """The templates of ``ops``, in the order given; parameter values as in TENSAT's rules
    (stride 1, SAME padding, no or a fused ReLU activation; concat and split on axes 0, 1)."""
    out: list[Template] = []
    for op in dict.fromkeys(ops):
        if op in _ELEMENTWISE:
            out.append(Template(op, "same", 2))
        elif op in _UNARY:
            out.append(Template(op, "unary", 1))
        elif op == "matmul":
            out.append(Template(op, "matmul", 2, (0,)))
        elif op == "conv2d":
            out += [Template(op, "conv", 2, (1, 1, 0, act)) for act in (0, 2)]
        elif op == "concat":
            out += [Template(op, "concat", 2, (axis, nd)) for nd in (2, 4) for axis in (0, 1)]
        elif op == "split":
            out += [Template(f"split_{i}", "split", 1, (axis,)) for axis in (0, 1) for i in (0, 1)]
        elif op == "enlarge":
            out.append(Template(op, "enlarge", 2))
        elif op == "scalar":
            out += [Template(op, "leaf", 0, (f32_bits(v),)) for v in CONSTANTS]
        else:
            raise ValueError(f"not enumerable: {op}")
    assert all(t.op in OPERATORS for t in out)
    return out


def default_vars(ops: Sequence[str]) -> list[tuple[str, tuple[int, ...]]]:
    """The typed variables for ``ops``: three 3x3 matrices ``a b c`` (square, so element-wise
    ops, matmul and concat all compose); with ``conv2d`` or ``enlarge`` also an image
    ``x [1,3,4,4]`` and weights ``w v [3,3,3,3]`` (``enlarge``: a 1x1 weight ``k``)."""
    out: list[tuple[str, tuple[int, ...]]] = [(n, (3, 3)) for n in "abc"]
    if "conv2d" in ops or "enlarge" in ops:
        out += [("x", (1, 3, 4, 4)), ("w", (3, 3, 3, 3)), ("v", (3, 3, 3, 3))]
    if "enlarge" in ops:
        out.append(("k", (3, 3, 1, 1)))
    return out


def default_weights(ops: Sequence[str]) -> tuple[str, ...]:
    """The weight variables of :func:`default_vars`."""
    return tuple(n for n, _ in default_vars(ops) if n in ("w", "v", "k"))
