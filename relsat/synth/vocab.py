"""What the synthesizer enumerates: operator templates (an operator with its parameter values
fixed) and typed variables (names with small concrete shapes), chosen from an operator list.

A template's ``kind`` tells the enumeration query (``sql/synth/enumerate.sql``) which children
can fit: ``leaf`` (a constant, no children), ``unary``, ``same`` (element-wise: equal shapes or a
rank-0 scalar), ``broadcast`` (element-wise: shapes that broadcast, not two scalars), ``matmul``,
``conv`` (4-D input and weight), ``concat`` (equal but for the axis),
``split`` (a piece of a split of a term with a concat boundary on the axis), ``enlarge`` (two
4-D weights), ``merge`` (a 4-D weight: TASO's ``merge_gconv``, the weight of a conv with half as
many groups). The graph builder
has the last word on validity: a combination it refuses is dropped.

``exact``: the operator is a polynomial or rational map (or a piece of data movement), so terms
built only from exact operators are fingerprinted modulo a prime as well as in floating point.

>>> [t.op for t in templates(("ewadd", "relu"))]
['ewadd', 'relu']
>>> default_vars(("ewadd",))[0]
('a', (3, 3))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from relsat.graph.ops import f32_bits
from relsat.rewrite.rules import OPERATORS

__all__ = [
    "CONSTANTS",
    "ENUMERABLE",
    "EXACT",
    "KINDS",
    "TENSAT_OPS",
    "Template",
    "default_counts",
    "default_vars",
    "default_weights",
    "environment",
    "parse_counts",
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
ENUMERABLE = (
    *_ELEMENTWISE, *_UNARY, "matmul", "conv2d", "concat", "split", "enlarge", "merge", "scalar",
)  # fmt: skip
#: TENSAT's operators, the default ``--ops`` (transpose and reshape are not enumerable).
TENSAT_OPS = ("ewadd", "ewmul", "matmul", "conv2d", "relu", "concat", "split", "enlarge", "merge")
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


def templates(
    ops: Sequence[str],
    strides: Sequence[int] = (1,),
    *,
    constants: Sequence[float] = CONSTANTS,
    broadcast: bool = False,
) -> list[Template]:
    """The templates of ``ops``, in the order given; parameter values as in TENSAT's rules
    (convolutions of each of ``strides``, SAME padding, no or a fused ReLU activation; concat and
    split on axes 0, 1); ``scalar`` brings in each of ``constants``. With ``broadcast`` the
    element-wise operators take operands of any shapes that broadcast (kind ``broadcast``: a
    row's mean beside its row, a scale vector beside a matrix), else equal shapes or a scalar."""
    out: list[Template] = []
    for op in dict.fromkeys(ops):
        if op in _ELEMENTWISE:
            out.append(Template(op, "broadcast" if broadcast else "same", 2))
        elif op in _UNARY:
            out.append(Template(op, "unary", 1))
        elif op == "matmul":
            out.append(Template(op, "matmul", 2, (0,)))
        elif op == "conv2d":
            out += [Template(op, "conv", 2, (s, s, 0, act)) for s in strides for act in (0, 2)]
        elif op == "concat":
            out += [Template(op, "concat", 2, (axis, nd)) for nd in (2, 4) for axis in (0, 1)]
        elif op == "split":
            out += [Template(f"split_{i}", "split", 1, (axis,)) for axis in (0, 1) for i in (0, 1)]
        elif op == "enlarge":
            out.append(Template(op, "enlarge", 2))
        elif op == "merge":
            out.append(Template(op, "merge", 1, (2,)))
        elif op == "scalar":
            out += [Template(op, "leaf", 0, (f32_bits(v),)) for v in constants]
        else:
            raise ValueError(f"not enumerable: {op}")
    assert all(t.op in OPERATORS for t in out)
    return out


#: The kinds of variable an environment holds: (shape, names in order, weight?). Square
#: matrices, so element-wise ops, matmul and concat all compose; images are a convolution's
#: input; weights its 3x3 kernel (``enlarge`` pads a 1x1 ``kernel`` to one); a ``gimage`` and a
#: ``gweight`` make a conv of two groups (what ``merge`` turns into one group).
KINDS: dict[str, tuple[tuple[int, ...], tuple[str, ...], bool]] = {
    "matrix": ((3, 3), tuple("abcdefgh"), False),
    "image": ((1, 3, 4, 4), tuple("xyzstu"), False),
    "weight": ((3, 3, 3, 3), tuple("wvqp"), True),
    "kernel": ((3, 3, 1, 1), tuple("kjm"), True),
    "gimage": ((1, 4, 4, 4), ("xg", "yg"), False),
    "gweight": ((4, 2, 3, 3), ("wg", "vg"), True),
}


def default_counts(ops: Sequence[str]) -> dict[str, int]:
    """How many variables of each kind ``ops`` get by default: three matrices, four with
    ``concat`` (``concat(a+b, c+d)`` has four); with ``conv2d`` or ``enlarge`` also four images
    (a batch concat of two sums), two weights; with ``enlarge`` one 1x1 kernel; with ``merge``
    one grouped image and weight."""
    out = {"matrix": 4 if "concat" in ops else 3}
    if "conv2d" in ops or "enlarge" in ops:
        out |= {"image": 4, "weight": 2}
    if "enlarge" in ops:
        out["kernel"] = 1
    if "merge" in ops:
        out |= {"gimage": 1, "gweight": 1}
    return out


def environment(
    counts: Mapping[str, int],
) -> tuple[list[tuple[str, tuple[int, ...]]], tuple[str, ...]]:
    """The variables (name, shape) and the weight names of ``counts`` (kind -> how many, at
    most as many as :data:`KINDS` has names); ValueError for an unknown kind or a bad count."""
    vars: list[tuple[str, tuple[int, ...]]] = []
    weights: list[str] = []
    for kind, n in counts.items():
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r} (kinds: {', '.join(KINDS)})")
        shape, names, weight = KINDS[kind]
        if not 0 <= n <= len(names):
            raise ValueError(f"{kind}: between 0 and {len(names)} variables, got {n}")
        vars += [(name, shape) for name in names[:n]]
        weights += list(names[:n]) if weight else []
    return vars, tuple(weights)


def parse_counts(text: str) -> dict[str, int]:
    """``matrix=4,image=2`` as counts; ValueError naming what is wrong."""
    out: dict[str, int] = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        kind, eq, n = item.partition("=")
        if not eq or not n.strip().lstrip("-").isdigit():
            raise ValueError(f"{item!r} is not KIND=COUNT")
        out[kind.strip()] = int(n)
    environment(out)  # the kinds and counts are checked there
    return out


def default_vars(ops: Sequence[str]) -> list[tuple[str, tuple[int, ...]]]:
    """The typed variables for ``ops`` (:func:`default_counts`)."""
    return environment(default_counts(ops))[0]


def default_weights(ops: Sequence[str]) -> tuple[str, ...]:
    """The weight variables of :func:`default_vars`."""
    return environment(default_counts(ops))[1]
