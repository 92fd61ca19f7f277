"""Rule patterns as graphs: build a pattern with the graph builder, evaluate guards on shapes.

A rule's patterns speak TENSAT's operator language with integer literals (FORMAT.md §3); this
module maps each pattern node to one :class:`~relsat.graph.graph.GraphBuilder` call, so the
builder's
shape checks (TASO's) plus TENSAT's extra right-hand-side check (§5.1: a rule-built ``concat``
needs inputs of exactly ``ndim`` dims) decide whether a rule applies to given shapes. A pattern
that cannot be built for its shapes raises :class:`InvalidInstance`; anything else (an unbound
variable, a split pair used as a tensor) is a bug and raises a plain
:class:`~relsat.errors.GraphError`.

>>> from relsat.rewrite.rulefile import parse_rules
>>> rule = parse_rules("# name: r\\n(relu (relu ?x)) => (relu ?x)\\n")["r"]
>>> lhs, rhs = rule_instance(rule, {"x": (2, 3)})
>>> lhs.output_shapes, rhs.output_shapes
([(2, 3)], [(2, 3)])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np

from relsat.errors import GraphError
from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Graph
from relsat.graph.onnx_kernels import SHAPES as ONNX_SHAPES
from relsat.graph.ops import OPAQUE_INT_ATTRS, TensorType, from_f32_bits
from relsat.rewrite.exprs import Expr, evaluate, sexpr
from relsat.rewrite.rules import Guard, Pattern, Rule, Term, Var, onnx_type

__all__ = [
    "InvalidInstance",
    "Memo",
    "guard_holds",
    "guards_hold",
    "instantiate",
    "rule_instance",
]

#: What a pattern node builds to: a tensor, or (for ``split``) the pair of its pieces.
Value: TypeAlias = "Tensor | tuple[Tensor, Tensor]"
#: Built sub-patterns, shared between calls so equal sub-patterns (notably the ``split`` under
#: ``split_0`` and ``split_1``) become one node, as in an e-graph.
Memo: TypeAlias = "dict[Pattern, Value]"
#: What a guard reads per variable: a shape, a tensor type or a builder tensor.
Shaped: TypeAlias = "Sequence[int] | TensorType | Tensor"


class InvalidInstance(GraphError):
    """A pattern cannot be built for these shapes: the rule does not apply to them.

    The fields are those of the builder's :class:`~relsat.errors.GraphError` (``op``, ``node``,
    ``shapes``, ``reason``) plus ``pattern``, the sub-pattern whose node was rejected.
    """

    def __init__(self, message: str, *, pattern: Pattern | None = None, **fields: Any) -> None:
        self.pattern = pattern
        super().__init__(message, **fields)

    def _format(self) -> str:
        text = super()._format()
        return f"{text} in {self.pattern}" if self.pattern is not None else text


# ---------------------------------------------------------------------------------------------
# Building patterns


def instantiate(
    builder: GraphBuilder,
    pattern: Pattern | Var,
    env: Mapping[str, Tensor],
    memo: Memo | None = None,
) -> Tensor:
    """Build ``pattern`` bottom-up with ``builder``; ``env`` maps variable names to tensors.

    Integer literals become builder parameters (conv ``stride_h stride_w padding activation``,
    matmul ``activation``, concat ``axis ndim``, split ``axis``, merge ``count``; codes as in
    TASO). ``(split a X)`` is :meth:`~relsat.graph.graph.GraphBuilder.split_at_concat`; equal
    sub-patterns are built once per ``memo`` (pass one memo to several calls to share nodes).
    Raises :class:`InvalidInstance` when a node is invalid for its input shapes.
    """
    value = _build(builder, pattern, env, {} if memo is None else memo)
    if isinstance(value, tuple):
        raise GraphError(f"{pattern} is a split pair; select a piece with split_0 or split_1")
    return value


def _build(builder: GraphBuilder, term: Term, env: Mapping[str, Tensor], memo: Memo) -> Value:
    if isinstance(term, Var):
        if term.name not in env:
            raise GraphError(f"pattern variable {term} is not bound")
        return env[term.name]
    if not isinstance(term, Pattern):
        raise GraphError(f"integer {term} where a tensor is expected")
    if term in memo:
        return memo[term]
    kind = onnx_type(term.op)
    make = _MAKERS.get(term.op) if kind is None else _opaque(kind)
    if make is None:
        raise GraphError(f"operator {term.op!r} cannot be built from a rule", op=term.op)
    ints = tuple(  # a list: as one item; arithmetic over shapes: its value here
        _value(a, env, term) if isinstance(a, Expr) else a
        for a in term.args
        if isinstance(a, int | tuple | Expr)
    )
    if term.op == "reshape":
        _cut_for(builder, term, ints[0], env, memo)
    args = [
        _build(builder, a, env, memo) for a in term.args if not isinstance(a, int | tuple | Expr)
    ]
    if term.op in ("split_0", "split_1"):
        (pair,) = args
        if not isinstance(pair, tuple):
            raise GraphError(f"{term.op} of {term.args[0]}, which is not a split", op=term.op)
        value: Value = pair[int(term.op == "split_1")]
    else:
        tensors = [_tensor(a, term) for a in args]
        try:
            value = make(builder, ints, tensors)
        except InvalidInstance:
            raise
        except GraphError as err:
            raise InvalidInstance(
                err.reason, pattern=term, node=err.node, op=err.op, shapes=err.shapes
            ) from None
    memo[term] = value
    return value


def _cut_for(
    builder: GraphBuilder, term: Pattern, shape: Any, env: Mapping[str, Tensor], memo: Memo
) -> None:
    """A split read on the left of a rule (``(reshape (split_0 (split a X)) L)``: a packed
    projection cut into q, k, v) cuts where the reshape of its piece says, when ``X`` holds no
    concat boundary on ``a`` to cut at: the piece has ``prod(L)`` elements. The pair goes into
    ``memo`` for :func:`_build` to read; nothing is done for any other pattern."""
    piece = term.args[0]
    if not (isinstance(piece, Pattern) and piece.op in ("split_0", "split_1")):
        return
    pair = piece.args[0]
    if not isinstance(pair, Pattern) or pair.op != "split" or pair in memo:
        return
    axis = pair.args[0]
    if not isinstance(axis, int) or not isinstance(shape, tuple):
        return
    x = _tensor(_build(builder, pair.args[1], env, memo), pair)
    if not 0 <= axis < x.rank or x.type.splits[axis]:
        return  # a concat boundary to cut at, or no such axis: the builder decides
    across = int(np.prod(x.shape)) // x.shape[axis]
    size, rest = divmod(int(np.prod(shape)), across)
    if rest or not 0 < size < x.shape[axis]:
        raise InvalidInstance(
            f"no piece of {list(x.shape)} reshapes to {list(shape)}", pattern=term
        )
    sizes = [size, x.shape[axis] - size] if piece.op == "split_0" else [x.shape[axis] - size, size]
    memo[pair] = tuple(builder.split(x, axis, sizes))  # type: ignore[assignment]


def _opaque(kind: str) -> Callable[[GraphBuilder, tuple[Any, ...], list[Tensor]], Value] | None:
    """The maker of an ONNX operator a rule names (``onnx.Where``): an opaque node of that
    type, its output shaped as :data:`relsat.graph.onnx_kernels.SHAPES` says; None for one the
    checker does not model."""
    how = ONNX_SHAPES.get(kind)
    if how is None:
        return None

    def make(b: GraphBuilder, ints: tuple[Any, ...], xs: list[Tensor]) -> Value:
        if how == "unary" and len(xs) != 1:
            raise GraphError(f"{kind} takes one input, got {len(xs)}", op=kind)
        names = [name for name, _ in OPAQUE_INT_ATTRS.get(kind, ())]
        attrs = dict(zip(names, (int(i) for i in ints), strict=True))
        try:
            if how == "matmul":
                shape = _matmul_shape(kind, xs)
            elif how in _VIEWS:
                shape = _view_shape(kind, how, xs, attrs)
            else:
                shape = np.broadcast_shapes(*(x.shape for x in xs))
        except ValueError:
            raise GraphError(
                f"{kind}'s inputs do not broadcast", op=kind, shapes=[x.shape for x in xs]
            ) from None
        (out,) = b.opaque(kind, xs, [shape], attrs)
        return out

    return make


#: The gathers and views of :data:`relsat.graph.onnx_kernels.SHAPES`, with their inputs.
_VIEWS = {"gathernd": 2, "gather": 2, "flatten": 1, "flat": 1}


def _view_shape(kind: str, how: str, xs: list[Tensor], attrs: Mapping[str, int]) -> tuple[int, ...]:
    """The output shape of a gather or view (``how``, one of :data:`_VIEWS`) at the attributes
    the rule names (``attrs``; ONNX's defaults for the others)."""
    shapes = [tuple(x.shape) for x in xs]
    if len(shapes) != _VIEWS[how] or (how in ("gathernd", "gather") and not shapes[0]):
        raise GraphError(f"{kind} of {len(xs)} inputs", op=kind, shapes=shapes)
    if how == "flat":
        return (math.prod(shapes[0]),)
    if how == "flatten":
        (x,) = shapes
        axis = attrs.get("axis", 1)
        if not -len(x) <= axis <= len(x):
            raise GraphError(f"{kind}'s axis {axis} is out of range", op=kind, shapes=shapes)
        axis %= len(x) + 1
        return (math.prod(x[:axis]), math.prod(x[axis:]))
    data, index = shapes
    if how == "gather":
        axis = attrs.get("axis", 0)
        if not -len(data) <= axis < len(data):
            raise GraphError(f"{kind}'s axis {axis} is out of range", op=kind, shapes=shapes)
        axis %= len(data)
        return (*data[:axis], *index, *data[axis + 1 :])
    if attrs.get("batch_dims", 0) != 0:
        raise GraphError(f"{kind} with batch_dims is not modelled", op=kind, shapes=shapes)
    if not index or not 1 <= index[-1] <= len(data):
        raise GraphError(f"{kind}'s index does not fit its data", op=kind, shapes=shapes)
    return (*index[:-1], *data[index[-1] :])


def _matmul_shape(kind: str, xs: list[Tensor]) -> tuple[int, ...]:
    """ONNX MatMul's output shape (operands of rank 2 or more; the batch axes broadcast)."""
    if len(xs) != 2 or min(len(x.shape) for x in xs) < 2 or xs[0].shape[-1] != xs[1].shape[-2]:
        raise GraphError(
            f"{kind}'s operands do not multiply", op=kind, shapes=[x.shape for x in xs]
        )
    a, b = xs[0].shape, xs[1].shape
    return (*np.broadcast_shapes(a[:-2], b[:-2]), a[-2], b[-1])


def _value(e: Expr, env: Mapping[str, Tensor], parent: Pattern) -> int | tuple[int, ...]:
    """An integer parameter, or a list, computed from the shapes of the tensors bound (``(-
    (rank ?t) 1)``, ``(list (dim ?x 1))``)."""
    v = evaluate(e, {}, {name: t.shape for name, t in env.items()})
    if isinstance(v, tuple) and all(isinstance(i, int) for i in v):
        return v
    if not isinstance(v, int) or isinstance(v, bool):
        raise InvalidInstance(f"{sexpr(e)} has no integer value here", pattern=parent)
    return v


def _tensor(value: Value, parent: Pattern) -> Tensor:
    if isinstance(value, tuple):
        raise GraphError(f"a split pair used as an argument of {parent.op}", op=parent.op)
    return value


def _concat(b: GraphBuilder, ints: tuple[int, ...], xs: list[Tensor]) -> Tensor:
    axis, ndim = ints
    if any(x.rank != ndim for x in xs):
        # TENSAT rejects a rule-built concat whose inputs do not have exactly ndim dims (§5.1).
        raise InvalidInstance(
            f"concat with ndim {ndim} of inputs of rank {[x.rank for x in xs]}",
            op="concat",
            shapes=[x.shape for x in xs],
        )
    return b.concat(axis, xs)


def _pool(kind: str) -> Callable[[GraphBuilder, tuple[int, ...], list[Tensor]], Tensor]:
    def make(b: GraphBuilder, ints: tuple[int, ...], xs: list[Tensor]) -> Tensor:
        kh, kw, sh, sw, padding, activation = ints
        pool = b.maxpool2d if kind == "max" else b.avgpool2d
        return pool(xs[0], (kh, kw), (sh, sw), padding, activation)

    return make


def _split(b: GraphBuilder, ints: tuple[int, ...], xs: list[Tensor]) -> tuple[Tensor, Tensor]:
    return b.split_at_concat(xs[0], ints[0])


#: op → builder call from the op's integer literals (in order) and tensor arguments (in order).
#: (A shape operator's list parameter is one item of the literals: ``(perm, shuffle)``.)
_MAKERS: dict[str, Callable[[GraphBuilder, tuple[Any, ...], list[Tensor]], Value]] = {
    "ewadd": lambda b, i, xs: b.add(xs[0], xs[1]),
    "ewmul": lambda b, i, xs: b.mul(xs[0], xs[1]),
    "matmul": lambda b, i, xs: b.matmul(xs[0], xs[1], activation=i[0]),
    "conv2d": lambda b, i, xs: b.conv2d(xs[0], xs[1], i[:2], padding=i[2], activation=i[3]),
    "matmul_bias": lambda b, i, xs: b.matmul_bias(xs[0], xs[1], xs[2], activation=i[0]),
    "conv2d_bias": lambda b, i, xs: b.conv2d_bias(
        xs[0], xs[1], xs[2], i[:2], padding=i[2], activation=i[3]
    ),
    "relu6": lambda b, i, xs: b.relu6(xs[0]),
    "relu": lambda b, i, xs: b.relu(xs[0]),
    "tanh": lambda b, i, xs: b.tanh(xs[0]),
    "sigmoid": lambda b, i, xs: b.sigmoid(xs[0]),
    "dropout": lambda b, i, xs: b.dropout(xs[0]),
    "concat": _concat,
    "concat3": _concat,
    "concat4": _concat,
    "concat5": _concat,
    "split": _split,
    "split_0": _split,  # placeholders: _build selects the piece itself
    "split_1": _split,
    "merge": lambda b, i, xs: b.merge(xs[0], i[0]),
    "enlarge": lambda b, i, xs: b.enlarge(xs[0], xs[1]),
    "poolmax": _pool("max"),
    "poolavg": _pool("avg"),
    "batchnorm": lambda b, i, xs: b.batchnorm(
        xs[0], xs[1], xs[2], xs[3], xs[4], from_f32_bits(i[0])
    ),
    "noop": lambda b, i, xs: b.noop(*xs),
    "scalar": lambda b, i, xs: b.scalar(from_f32_bits(i[0])),
    "ewsub": lambda b, i, xs: b.sub(xs[0], xs[1]),
    "ewdiv": lambda b, i, xs: b.div(xs[0], xs[1]),
    "ewpow": lambda b, i, xs: b.pow(xs[0], xs[1]),
    "sqrt": lambda b, i, xs: b.sqrt(xs[0]),
    "erf": lambda b, i, xs: b.erf(xs[0]),
    "reducemean": lambda b, i, xs: b.reducemean(xs[0]),
    "softmax": lambda b, i, xs: b.softmax(xs[0]),
    "layernorm": lambda b, i, xs: b.layernorm(xs[0], xs[1], xs[2], from_f32_bits(i[0])),
    "skiplayernorm": lambda b, i, xs: b.skiplayernorm(xs[0], xs[1], xs[2], from_f32_bits(i[0])),
    "gelu": lambda b, i, xs: b.gelu(xs[0]),
    "gelu_tanh": lambda b, i, xs: b.gelu(xs[0], approximate="tanh"),
    "biasgelu": lambda b, i, xs: b.biasgelu(xs[0], xs[1]),
    "biasgelu_tanh": lambda b, i, xs: b.biasgelu(xs[0], xs[1], approximate="tanh"),
    "quickgelu": lambda b, i, xs: b.quickgelu(xs[0], from_f32_bits(i[0])),
    "nanzero": lambda b, i, xs: b.nanzero(xs[0]),
    "same": lambda b, i, xs: b.same(xs[0]),
    "attention": lambda b, i, xs: b.attention(xs[0], xs[1], xs[2], xs[3], from_f32_bits(i[0])),
    "reciprocal": lambda b, i, xs: b.reciprocal(xs[0]),
    "neg": lambda b, i, xs: b.neg(xs[0]),
    "turnpairs": lambda b, i, xs: b.turnpairs(xs[0]),
    "repeat2": lambda b, i, xs: b.repeat2(xs[0]),
    "cos": lambda b, i, xs: b.cos(xs[0]),
    "sin": lambda b, i, xs: b.sin(xs[0]),
    "slice": lambda b, i, xs: b.slice(xs[0], i[0], i[1], i[2], i[3]),
    "rmsnorm": lambda b, i, xs: b.rmsnorm(xs[0], xs[1], from_f32_bits(i[0])),
    "rotary": lambda b, i, xs: b.rotary(xs[0], xs[1], xs[2], interleaved=bool(i[0])),
    "gqa": lambda b, i, xs: b.gqa(xs[0], xs[1], xs[2], xs[3], from_f32_bits(i[0])),
    "repeatkv": lambda b, i, xs: b.repeatkv(xs[0], i[0]),
    "transpose": lambda b, i, xs: b.transpose(xs[0], i[0], shuffle=bool(i[1])),
    "mha": lambda b, i, xs: b.mha(xs[0], xs[1], xs[2], xs[3], i[0], from_f32_bits(i[1])),
    "reshape": lambda b, i, xs: b.reshape(xs[0], i[0]),
    "expand": lambda b, i, xs: b.expand(xs[0], i[0]),
    "linear": lambda b, i, xs: b.linear(xs[0], xs[1]),
    "instancenorm": lambda b, i, xs: b.instancenorm(xs[0], xs[1], xs[2], from_f32_bits(i[0])),
    "groupnorm": lambda b, i, xs: b.groupnorm(xs[0], xs[1], xs[2], i[0], from_f32_bits(i[1])),
}


def rule_instance(rule: Rule, shapes: Mapping[str, Sequence[int]]) -> tuple[Graph, Graph] | None:
    """The rule at these variable shapes: a graph of its left-hand side(s) and one of its right.

    Both graphs have one input per bound variable, named after it (``?x`` → ``x``), in the same
    order, and one output per pattern (multi-pattern rules: in order). Guards are not checked
    (see :func:`guards_hold`). None when some left- or right-hand side is invalid for ``shapes``.
    """
    names = [v.name for v in rule.bound]
    missing = [f"?{n}" for n in names if n not in shapes]
    if missing:
        raise GraphError(f"rule {rule.name!r}: no shape for {', '.join(missing)}")
    graphs = []
    for patterns in (rule.lhs, rule.rhs):
        b = GraphBuilder()
        env = {n: b.input(shapes[n], name=n) for n in names}
        memo: Memo = {}
        try:
            roots = [instantiate(b, p, env, memo) for p in patterns]
        except InvalidInstance:
            return None
        graphs.append(b.build(*roots))
    return graphs[0], graphs[1]


# ---------------------------------------------------------------------------------------------
# Guards


def _shape(value: Shaped) -> tuple[int, ...]:
    if isinstance(value, TensorType | Tensor):
        return value.shape
    return tuple(value)


def guard_holds(guard: Guard, types: Mapping[str, Shaped]) -> bool:
    """Whether ``guard`` holds for the shapes bound to its variables (keys: names without ``?``).

    ``ungrouped(?x, ?w)``: ``C(x) == w.shape[1]``; ``same-shape(?a, ?b)``: equal shapes;
    ``same-group-width(?x1, ?w1, ?x2, ?w2)``: ``O1 / g1 == O2 / g2`` with ``g = C(x) / w.shape[1]``;
    ``odd-kernels(?w1, ?w2)``: both kernels odd in both dims.
    Shapes of the wrong rank for a conv guard make it false.

    >>> depthwise = {"x": (1, 8, 4, 4), "w": (8, 1, 3, 3)}
    >>> guard_holds(Guard("ungrouped", (Var("x"), Var("w"))), depthwise)
    False
    """
    try:
        s = [_shape(types[v.name]) for v in guard.args]
    except KeyError as err:
        raise GraphError(f"guard {guard}: no shape for ?{err.args[0]}") from None
    if guard.name == "same-shape":
        return s[0] == s[1]
    if any(len(shape) != 4 for shape in s):
        return False
    if guard.name == "ungrouped":
        return s[0][1] == s[1][1]
    if guard.name == "odd-kernels":
        return all(k % 2 == 1 for shape in s for k in shape[2:])
    if guard.name == "same-group-width":
        (c1, cw1, o1), (c2, cw2, o2) = (s[0][1], s[1][1], s[1][0]), (s[2][1], s[3][1], s[3][0])
        # O1 / (C1 / Cw1) == O2 / (C2 / Cw2), without division.
        return o1 * cw1 * c2 == o2 * cw2 * c1
    raise GraphError(f"unknown guard {guard.name!r}")


def guards_hold(rule: Rule, types: Mapping[str, Shaped]) -> bool:
    """Whether every named guard of ``rule`` holds for these variable shapes (its conditions
    are evaluated with its parameters: :func:`relsat.rewrite.exprs.evaluate`)."""
    return all(guard_holds(g, types) for g in rule.guards if isinstance(g, Guard))
