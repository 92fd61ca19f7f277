"""Shapes for a rule's variables: a small constraint solver that makes a rule's sides valid often.

Drawing every variable's shape blindly almost never gives a valid instance of a conv or matmul
rule, so shapes are solved for: each variable's rank is inferred from where it is used (matmul
operands 2-D or 3-D, conv operands 4-D, concat's ``ndim``), its dims are symbols unified through
the patterns, conv channels are written ``C = g * Cw`` and ``O = g * O_per_group`` so groups
divide (two such products are equated either factor by factor or crosswise, so convs with
different group counts meet), kernels are odd (TENSAT does not support even conv kernels); then
the free symbols are drawn from small sets. Now and then a dim or two is redrawn on its own,
which gives broadcasting and other near misses. The builder's shape checks
(:mod:`relsat.rewrite.instantiate`) filter whatever the solver could not express.

``sides`` says which constraints are solved: ``"joint"`` (both sides, each left root equated
with its right root: instances where the rule should be sound), ``"both"`` (both sides, roots
not equated) or ``"lhs"`` (the left-hand sides alone: what the rule may meet in an e-graph,
whatever its right-hand side says, which is how a rule that changes a type shows).

>>> import random
>>> from relsat.rewrite.rulefile import parse_rules
>>> rule = parse_rules("# name: r\\n(matmul 0 ?a ?b) => (relu ?b)\\n")["r"]
>>> shapes = draw_shapes(rule, random.Random(1).choice, sides="lhs")
>>> shapes["a"][-1] == shapes["b"][-2]
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from relsat.errors import RuleError
from relsat.graph.onnx_kernels import SHAPES as ONNX_SHAPES
from relsat.rewrite.exprs import LIST, Param
from relsat.rewrite.exprs import Expr as ValueExpr
from relsat.rewrite.pins import UNIT, NotSymbolic, OutOfRange, Pin, length, one, symbolic
from relsat.rewrite.rules import Pattern, Rule, Term, Var, onnx_type

__all__ = [
    "DIMS",
    "NEAR_MISSES",
    "SIDES",
    "Choose",
    "NoInstance",
    "Unsolvable",
    "draw_shapes",
    "patterns",
]

DIMS = (1, 2, 3, 4)
GROUPS = (1, 2, 3, 4)
KERNELS = (1, 3)
KERNELS_ENLARGE = (1, 3, 5)
#: Kernel sizes with ``even_kernels``: outside TENSAT's domain, where the odd-kernels guard acts.
KERNELS_EVEN = (1, 2, 3, 4)
FREE_RANKS = (1, 2, 3, 4)
MATMUL_RANKS = (2, 3)  # plain and batched
#: How many dims to redraw after solving (drawn from this tuple).
NEAR_MISSES = (0, 0, 0, 1, 2)
#: Which constraints :func:`draw_shapes` solves (see the module docstring).
SIDES = ("joint", "both", "lhs")

T = TypeVar("T")
#: Picks one element of a non-empty sequence (``random.Random.choice``, hypothesis' draws).
Choose = Callable[[Sequence[T]], T]


class NoInstance(ValueError):
    """This draw's choices leave the rule no instance (a pinned reshape's length against the
    rank drawn for what reads it): draw again."""


class Unsolvable(RuleError):
    """The solver cannot give the rule's variables shapes: ranks that conflict (a conv operand
    used as a matmul operand), or an operator it does not model (``noop``)."""


# ---------------------------------------------------------------------------------------------
# Ranks: union-find over terms (a Var or a Pattern; equal sub-patterns are one term).


class _Ranks:
    def __init__(self) -> None:
        self.parent: dict[Any, Any] = {}
        self.fixed: dict[Any, int] = {}
        self.least: dict[Any, int] = {}  # the least rank an op allows (a normalization's x: 3)
        self.matmul: set[Any] = set()
        self.biases: set[Any] = set()  # matmul_bias biases: rank 1, broadcast by an ewadd
        self.pins: dict[str, Pin] = {}  # list variables pinned by conditions
        self.shaped: dict[str, object] = {}  # tensor variables whose shape conditions pin
        self.deferred: list[tuple[Any, object]] = []  # (reshape, its pinned list): rank later

    def root(self, k: Any) -> Any:
        self.parent.setdefault(k, k)
        while self.parent[k] != k:
            k = self.parent[k]
        return k

    def union(self, a: Any, b: Any) -> None:
        ra, rb = self.root(a), self.root(b)
        if ra == rb:
            return
        fa, fb = self.fixed.pop(ra, None), self.fixed.get(rb)
        if fa is not None and fb is not None and fa != fb:
            raise Unsolvable(f"a tensor is used with rank {fa} and rank {fb}")
        if fa is not None:
            self.fixed[rb] = fa
        if ra in self.least:
            self.least[rb] = max(self.least.pop(ra), self.least.get(rb, 0))
        if ra in self.matmul:
            self.matmul.add(rb)
        self.parent[ra] = rb

    def fix(self, k: Any, rank: int) -> None:
        r = self.root(k)
        if self.fixed.setdefault(r, rank) != rank:
            raise Unsolvable(f"{_text(k)} is used with rank {self.fixed[r]} and rank {rank}")


def _key(term: Term) -> Any:
    return ("var", term.name) if isinstance(term, Var) else term


def _text(key: Any) -> str:
    return f"?{key[1]}" if isinstance(key, tuple) else str(key)


def _tensor_args(p: Pattern) -> list[Term]:
    return [a for a in p.args if not isinstance(a, int | tuple | Param | ValueExpr)]


def _list(p: Pattern) -> tuple[int, ...]:
    """A shape operator's list parameter (a literal once the rule is specialized)."""
    (items,) = [a for a in p.args if isinstance(a, tuple)]
    return items


def _own_shape(term: Term, shaped: dict[str, object]) -> bool:
    """Whether ``term`` has a shape of its own, given whatever an element-wise operator it is
    an operand of does: a tensor whose shape the conditions pin, or a reshape or expand to a
    list computed from shapes (a channel vector viewed ``[C, 1, ...]``). Its rank is its own
    and its 1s broadcast."""
    if isinstance(term, Var):
        return term.name in shaped
    return (
        isinstance(term, Pattern)
        and term.op in ("reshape", "expand")
        and isinstance(term.args[1], ValueExpr)
    )


#: Operators whose output has their (broadcast) inputs' shape.
_UNARY = (
    "relu",
    "relu6",
    "tanh",
    "sigmoid",
    "dropout",
    "sqrt",
    "erf",
    "softmax",
    "gelu",
    "nanzero",
    "same",
    "reciprocal",
    "neg",
    "cos",
    "sin",
)
_ELEMENTWISE = (*_UNARY, "gelu_tanh", "quickgelu", "ewadd", "ewmul", "ewsub", "ewdiv", "ewpow")


def _walk_ranks(term: Term, ranks: _Ranks) -> Any:
    key = _key(term)
    ranks.root(key)
    if not isinstance(term, Pattern):
        pin = ranks.shaped.get(term.name) if isinstance(term, Var) else None
        if pin is not None and pin != UNIT:  # its rank: its pin's length (a unit's: its own)
            ranks.deferred.append((key, pin))
        return key
    kids = [_walk_ranks(a, ranks) for a in _tensor_args(term)]
    ints = [a for a in term.args if isinstance(a, int)]
    op = term.op
    if onnx_type(op) is not None:  # an ONNX operator rules match: as relsat's element-wise
        if ONNX_SHAPES.get(onnx_type(op) or "") not in ("unary", "broadcast", "matmul"):
            raise Unsolvable(f"the shape solver does not model {op!r}")
        op = "ewadd"
    if op in ("conv2d", "conv2d_bias", "merge", "enlarge", "poolmax", "poolavg"):
        for k in (key, *kids):
            ranks.fix(k, 4)
    elif op == "batchnorm":
        ranks.union(key, kids[0])
        ranks.fix(key, 4)
        for k in kids[1:]:
            ranks.fix(k, 1)
    elif op == "matmul_bias":
        for k in kids[:2]:
            ranks.union(key, k)
        ranks.matmul.add(ranks.root(key))
        ranks.fix(kids[2], 1)
    elif op.startswith("concat"):
        for k in (key, *kids):
            ranks.fix(k, ints[1])
    elif op == "scalar":
        ranks.fix(key, 0)
    elif op == "repeatkv":
        for k in (key, *kids):
            ranks.fix(k, 4)
    elif op in ("attention", "gqa"):  # q, kt, v and the output 4-D; the bias as its pattern says
        for k in (key, *kids[:3]):
            ranks.fix(k, 4)
        if not (isinstance(kids[3], Pattern) and kids[3].op == "scalar"):
            ranks.fix(kids[3], 4)
    elif op in ("slice", "rotary", "turnpairs", "repeat2"):
        # x keeps its rank; rotary's tables as the patterns say
        for k in kids:
            ranks.union(key, k)
    elif op in ("layernorm", "skiplayernorm", "biasgelu", "biasgelu_tanh", "rmsnorm"):
        # x (and skip) keep their shape; scale, bias: [N], a packed scale_bias [2N]
        for k in kids[: 2 if op == "skiplayernorm" else 1]:
            ranks.union(key, k)
        for k in kids[2 if op == "skiplayernorm" else 1 :]:
            ranks.fix(k, 1)
    elif op in ("instancenorm", "groupnorm"):  # x [N, C, D1, ...] keeps its shape; scale, bias [C]
        ranks.union(key, kids[0])
        root = ranks.root(key)
        ranks.least[root] = max(ranks.least.get(root, 0), 3)
        for k in kids[1:]:
            ranks.fix(k, 1)
    elif op in _ELEMENTWISE or op in ("matmul", "split", "reducemean"):
        for k, arg in zip(kids, _tensor_args(term), strict=True):
            scalar = isinstance(k, Pattern) and k.op == "scalar"
            if k not in ranks.biases and not scalar and not _own_shape(arg, ranks.shaped):
                ranks.union(key, k)
        if op == "matmul":
            ranks.matmul.add(ranks.root(key))
    elif op in ("split_0", "split_1"):
        ranks.union(key, kids[0])
    elif op == "transpose":
        for k in (key, *kids):
            ranks.fix(k, len(_list(term)))
    elif op in ("reshape", "expand") and isinstance(term.args[1], ValueExpr):
        ranks.deferred.append((key, term.args[1]))  # a list computed from shapes: its length
    elif op in ("reshape", "expand") and isinstance(term.args[1], Param):  # a pinned list
        pin = ranks.pins.get(term.args[1].name)
        if pin is None:
            raise Unsolvable(f"{term.args[1]} is neither drawn nor pinned by a condition")
        if pin.length is not None:
            ranks.fix(key, pin.length)
        if pin.whole is not None:
            ranks.deferred.append((key, pin.whole))
    elif op == "linear":  # x [..., K] @ w [K, N]
        ranks.union(key, kids[0])
        ranks.fix(kids[1], 2)
    elif op == "mha":  # x [B, S, E], w [E, 3N], b [3N], the mask 4-D: out [B, S, N]
        for k, rank in zip((key, *kids), (3, 3, 2, 1, 4), strict=True):
            if not (k is kids[3] and isinstance(k, Pattern) and k.op == "scalar"):
                ranks.fix(k, rank)
    elif op == "expand":  # to a literal shape: its rank (the input's at most)
        ranks.fix(key, len(_list(term)))
    elif op == "reshape":  # a variable reshaped: drawn as the target's shape (see _op)
        ranks.fix(key, len(_list(term)))
        if isinstance(term.args[0], Var) and ranks.root(kids[0]) not in ranks.fixed:
            ranks.fix(kids[0], len(_list(term)))
    else:
        raise Unsolvable(f"the shape solver does not model {op!r}")
    return key


# ---------------------------------------------------------------------------------------------
# Dims: symbols with unification. An expression is ("sym", i), ("sum", a, b), ("mul", a, b),
# ("const", n) or ("cdiv", a, n) (ceil division, a stride-s SAME conv's output size).

Expr = tuple[Any, ...]


class _Dims:
    def __init__(self, choose: Choose[Any]) -> None:
        self.choose = choose
        self.parent: list[int] = []
        self.tags: list[set[str]] = []
        self.bound: dict[int, Expr] = {}

    def fresh(self, tag: str = "dim") -> Expr:
        self.parent.append(len(self.parent))
        self.tags.append({tag})
        return ("sym", len(self.parent) - 1)

    def _root(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def resolve(self, e: Expr) -> Expr:
        while e[0] == "sym":
            r = self._root(e[1])
            if r not in self.bound:
                return ("sym", r)
            e = self.bound[r]
        return e

    def _occurs(self, r: int, e: Expr) -> bool:
        e = self.resolve(e)
        if e[0] == "sym":
            return bool(e[1] == r)
        return any(self._occurs(r, sub) for sub in e[1:] if isinstance(sub, tuple))

    def unify(self, a: Expr, b: Expr) -> None:
        """Make ``a`` and ``b`` equal where that can be expressed; otherwise leave it to the
        builder's checks (an equality like ``x + y == g * c`` is simply not enforced)."""
        a, b = self.resolve(a), self.resolve(b)
        if a == b:
            return
        if a[0] == "sym" and b[0] == "sym":
            self.parent[a[1]] = b[1]
            self.tags[b[1]] |= self.tags[a[1]]
        elif a[0] == "sym" or b[0] == "sym":
            (s, e) = (a, b) if a[0] == "sym" else (b, a)
            if not self._occurs(s[1], e):
                self.bound[s[1]] = e
        elif a[0] == b[0] == "mul" and self.choose((False, True)):
            # g1 * c1 == g2 * c2 without forcing g1 == g2: c1 = g2 * t, c2 = g1 * t.
            t = self.fresh()
            self.unify(a[2], ("mul", b[1], t))
            self.unify(b[2], ("mul", a[1], t))
        elif a[0] == b[0] in ("sum", "mul"):
            self.unify(a[1], b[1])
            self.unify(a[2], b[2])
        elif a[0] == b[0] == "cdiv" and a[2] == b[2]:
            self.unify(a[1], b[1])

    def free(self, e: Expr, out: dict[int, None]) -> None:
        e = self.resolve(e)
        if e[0] == "sym":
            out[e[1]] = None
        else:
            for sub in e[1:]:
                if isinstance(sub, tuple):
                    self.free(sub, out)

    def value(self, e: Expr, values: dict[int, int]) -> int:
        e = self.resolve(e)
        kind = e[0]
        if kind == "sym":
            return values[e[1]]
        if kind == "const":
            return int(e[1])
        if kind == "cdiv":
            return -(-self.value(e[1], values) // e[2])
        x, y = self.value(e[1], values), self.value(e[2], values)
        return x + y if kind == "sum" else x * y


@dataclass
class _SplitDims:
    axis: int
    dims: list[Expr]


@dataclass
class _Solver:
    ranks: dict[Any, int]
    dims: _Dims
    memo: dict[Any, Any] = field(default_factory=dict)
    pins: dict[str, Pin] = field(default_factory=dict)
    shaped: dict[str, object] = field(default_factory=dict)  # tensors whose shapes are pinned
    divides: list[tuple[object, object]] = field(default_factory=list)  # (a, b): b divides a
    values: dict[str, Any] = field(default_factory=dict)  # parameters drawn before the shapes
    lists: dict[str, list[Expr]] = field(default_factory=dict)  # pinned lists, symbolically

    def _pinned(self, name: str, source: list[Expr] | None) -> list[Expr]:
        """The target of a reshape (or expand: no ``source``) by the pinned list ``name``: the
        pin over the solver's dims; items it does not name are fresh dims (:meth:`_balance`
        keeps a reshape's element count)."""
        if name not in self.lists:
            pin = self.pins[name]

            def dims(var: str) -> list[Expr]:
                return self.walk(Var(var))

            try:
                if pin.whole is not None:
                    target = symbolic(pin.whole, dims, {**self.values, **self.lists})
                    assert isinstance(target, list)
                else:
                    assert pin.length is not None
                    named = {i % pin.length: e for i, e in pin.items.items()}
                    target = [
                        one(symbolic(named[i], dims, {**self.values, **self.lists}))
                        if i in named
                        else self.dims.fresh("item")
                        for i in range(pin.length)
                    ]
            except OutOfRange as err:
                raise NoInstance(f"?{name}: {err}") from None
            except NotSymbolic as err:
                raise Unsolvable(f"?{name}: {err}") from None
            self.lists[name] = target
            self._divide()
        target = self.lists[name]
        if source is not None:
            self._balance(source, target)
        return target

    def _computed(self, e: ValueExpr) -> list[Expr]:
        """A list a right-hand side computes from the shapes (``(list (dim ?x 0) 4)``, ``(shape
        ?x)``) over the solver's dims; an item it cannot write (a quotient) is a fresh dim
        (:meth:`_balance` keeps a reshape's element count)."""

        def dims(var: str) -> list[Expr]:
            return self.walk(Var(var))

        known = {**self.values, **self.lists}
        try:
            try:
                whole = symbolic(e, dims, known)
                if isinstance(whole, list):
                    return whole
            except NotSymbolic:
                if e.op != LIST:
                    raise
            out = []
            for item in e.args:
                try:
                    out.append(one(symbolic(item, dims, known)))
                except OutOfRange:
                    raise
                except NotSymbolic:
                    out.append(self.dims.fresh("item"))
            return out
        except OutOfRange as err:
            raise NoInstance(f"{e}: {err}") from None
        except NotSymbolic as err:
            raise Unsolvable(f"{e}: {err}") from None

    def _divide(self) -> None:
        """Draw each ``a`` that a condition says ``b`` divides as ``b`` times a dim of its own,
        once both are known over the solver's dims (a reshape's balance then sees the factor)."""
        known = {**self.values, **self.lists}

        def dims(var: str) -> list[Expr]:
            return self.walk(Var(var))

        for pair in list(self.divides):
            try:
                a, b = (one(symbolic(t, dims, known)) for t in pair)
            except OutOfRange as err:
                raise NoInstance(f"{pair[0]} % {pair[1]}: {err}") from None
            except NotSymbolic:
                continue
            self.divides.remove(pair)
            if self.dims.resolve(a)[0] == "sym":
                self.dims.unify(a, ("mul", b, self.dims.fresh()))

    def _factors(self, e: Expr) -> list[Expr]:
        e = self.dims.resolve(e)
        if e[0] == "mul":
            return self._factors(e[1]) + self._factors(e[2])
        return [] if e == ("const", 1) else [e]

    def _balance(self, source: list[Expr], target: list[Expr]) -> None:
        """Keep a pinned reshape's element count: the factors the two sides share cancel;
        a single symbol left on one side is the product of what is left on the other (a
        projection's width [.., W] split into heads [.., H, D]: W = H * D)."""
        left = [f for e in source for f in self._factors(e)]
        right = [f for e in target for f in self._factors(e)]
        for f in list(left):
            if f in right:
                left.remove(f)
                right.remove(f)
        for one_side, other in ((left, right), (right, left)):
            if len(one_side) == 1 and one_side[0][0] == "sym" and other:
                product = other[0]
                for f in other[1:]:
                    product = ("mul", product, f)
                self.dims.unify(one_side[0], product)
                return

    def walk(self, term: Term) -> Any:
        key = _key(term)
        if key in self.memo:
            if self.memo[key] is None:
                raise Unsolvable(f"the shape pinned for {term} reads its own shape")
            return self.memo[key]
        if isinstance(term, Var) and self.shaped.get(term.name) == UNIT:  # one element
            out: Any = [("const", 1)] * self.ranks[key]
        elif isinstance(term, Var) and term.name in self.shaped:  # drawn as its pin says
            self.memo[key] = None  # (a pin that reads back this tensor cannot be drawn)
            pin = self.shaped[term.name]
            assert isinstance(pin, ValueExpr)
            out = self._computed(pin)
        elif isinstance(term, Var):
            out = [self.dims.fresh() for _ in range(self.ranks[key])]
        else:
            assert isinstance(term, Pattern)
            out = self._op(term, [self.walk(a) for a in _tensor_args(term)])
        self.memo[key] = out
        return out

    def _op(self, p: Pattern, kids: list[Any]) -> Any:
        """The symbolic output dims of ``p`` from its children's, with the constraints its op's
        shape rule adds. (Long: one branch per operator, as ``relsat.graph.ops`` has one shape
        rule per operator.)"""
        d, ints, op = self.dims, [a for a in p.args if isinstance(a, int)], p.op
        if op == "slice" and len(ints) < 4:  # an axis computed from a shape: any dims
            return [d.fresh() for _ in kids[0]]
        if op not in ("split_0", "split_1") and any(isinstance(k, _SplitDims) for k in kids):
            raise Unsolvable(f"a split pair is an argument of {op}")
        kind = onnx_type(op)
        if kind is not None and ONNX_SHAPES.get(kind) == "unary":
            return kids[0]
        if kind is not None and ONNX_SHAPES.get(kind) == "matmul":
            # the batch axes broadcast as an element-wise op's; then a product of the last two
            a, b = kids
            batch = self._op(Pattern("ewadd", p.args), [a[:-2], b[:-2]])
            d.unify(a[-1], b[-2])
            return [*batch, a[-2], b[-1]]
        if op in ("ewadd", "ewmul", "ewsub", "ewdiv", "ewpow") or kind is not None:
            # right-aligned, as NumPy broadcasts (a matmul_bias's [N] bias against [M, N]); a
            # 1 in a shape of its own broadcasts (a channel vector [C, 1, 1]: _own_shape)
            pinned = [_own_shape(a, self.shaped) for a in _tensor_args(p)]
            out, out_pin = kids[0], pinned[0]
            for kid, pin in zip(kids[1:], pinned[1:], strict=True):  # ONNX Where: three
                (longer, long_pin), (shorter, short_pin) = sorted(
                    ((out, out_pin), (kid, pin)), key=lambda k: len(k[0]), reverse=True
                )
                out = list(longer)
                for i, (x, y) in enumerate(zip(longer[::-1], shorter[::-1], strict=False)):
                    if short_pin and d.resolve(y) == ("const", 1):
                        continue
                    if long_pin and d.resolve(x) == ("const", 1):
                        out[len(out) - 1 - i] = y
                        continue
                    d.unify(x, y)
                out_pin = out_pin and pin
            return out
        if op in ("conv2d_bias", "matmul_bias"):
            out = self._op(Pattern(op.removesuffix("_bias"), p.args[:-1]), kids[:2])
            bias = kids[2]
            if op == "matmul_bias":
                d.unify(bias[0], out[-1])
            else:
                for i, e in enumerate(bias):
                    d.unify(e, out[1] if i == 1 else ("const", 1))
            return out
        if op == "matmul":
            a, b = kids
            for x, y in zip(a[:-2], b[:-2], strict=True):
                d.unify(x, y)
            d.unify(a[-1], b[-2])
            return [*a[:-1], b[-1]]
        if op == "conv2d":
            sh, sw, padding, _ = ints
            x, w = kids
            g = d.fresh("group")
            for k in w[2:]:
                d.unify(k, d.fresh("kernel"))
            d.unify(x[1], ("mul", g, w[1]))
            d.unify(w[0], ("mul", g, d.fresh()))
            spatial = [
                h if s == 1 and padding == 0 else ("cdiv", h, s) if padding == 0 else d.fresh()
                for h, s in ((x[2], sh), (x[3], sw))
            ]
            return [x[0], w[0], *spatial]
        if op in (*_UNARY, "gelu_tanh", "quickgelu"):  # quickgelu: x, alpha an integer
            return kids[0]
        if op == "scalar":
            return []
        if op == "repeatkv":
            x = kids[0]
            if not ints:  # a count computed from dims (matmul-broadcast-heads): any heads
                return [x[0], d.fresh(), *x[2:]]
            return [x[0], ("mul", x[1], ("const", ints[0])), *x[2:]]
        if op in ("attention", "gqa"):
            q, kt, v, bias = kids
            d.unify(q[0], kt[0])
            d.unify(q[0], v[0])
            d.unify(kt[1], v[1])
            # gqa: each key/value head serves a group of query heads
            d.unify(q[1], ("mul", kt[1], d.fresh("group")) if op == "gqa" else kt[1])
            d.unify(q[3], kt[2])
            d.unify(kt[3], v[2])
            for x, y in zip(bias[::-1], [q[0], q[1], q[2], kt[3]][::-1], strict=False):
                d.unify(x, y)
            return [*q[:3], v[3]]
        if op == "reducemean":
            return [*kids[0][:-1], ("const", 1)]
        if op == "transpose":
            return [kids[0][i] for i in _list(p)]
        if op == "reshape" and isinstance(p.args[1], Param):
            return self._pinned(p.args[1].name, kids[0])
        computed = p.args[1] if op in ("reshape", "expand") else None
        if op == "reshape" and isinstance(computed, ValueExpr):
            target = self._computed(computed)
            self._balance(kids[0], target)
            return target
        if op == "expand":  # broadcast: each input dim other than 1 is the target's
            arg = p.args[1]
            target = (
                self._pinned(arg.name, None)
                if isinstance(arg, Param)
                else self._computed(arg)
                if isinstance(arg, ValueExpr)
                else [("const", n) for n in _list(p)]
            )
            for x, y in zip(kids[0][::-1], target[::-1], strict=False):
                if d.resolve(x) != ("const", 1):
                    d.unify(x, y)
            return target
        if op == "linear":
            x, w = kids
            d.unify(x[-1], w[0])
            return [*x[:-1], w[1]]
        if op == "mha":
            x, w, b, _ = kids
            n = d.fresh()
            d.unify(x[2], w[0])
            d.unify(w[1], ("mul", ("const", 3), n))
            d.unify(b[0], w[1])
            return [x[0], x[1], n]
        if op == "reshape":  # a variable reshaped is drawn as the target's shape: the lists
            target = [("const", n) for n in _list(p)]  # a rule's reshapes are drawn from
            free = all(d.resolve(x)[0] == "sym" for x in kids[0])  # (relsat.rewrite.params)
            if isinstance(p.args[0], Var) and free and len(kids[0]) == len(target):  # all hold
                for x, y in zip(kids[0], target, strict=True):  # 24 elements, so that any of
                    d.unify(x, y)  # them reshapes into any other
            return target
        if op == "slice":
            axis, start, end, step = ints
            size = -(-(end - start) // step)
            return [("const", size) if i == axis else e for i, e in enumerate(kids[0])]
        if op == "turnpairs":
            return kids[0]
        if op == "repeat2":
            x = kids[0]
            return [*x[:-1], ("sum", x[-1], x[-1])]
        if op == "rotary":  # the tables are half as wide as x and broadcast to it
            x = kids[0]
            for table in kids[1:]:
                d.unify(x[-1], ("sum", table[-1], table[-1]))
                for a, b in zip(x[-2::-1], table[-2::-1], strict=False):
                    d.unify(a, b)
            return x
        if op in ("layernorm", "biasgelu", "biasgelu_tanh", "rmsnorm"):
            for k in kids[1:]:
                d.unify(k[0], kids[0][-1])
            return kids[0]
        if op in ("instancenorm", "groupnorm"):  # scale and bias: one value per channel
            if len(kids[0]) < 3:
                raise NoInstance(f"{op} of a tensor of rank {len(kids[0])} (it needs 3 or more)")
            for k in kids[1:]:
                d.unify(k[0], kids[0][1])
            if op == "groupnorm" and ints and ints[0] > 1:  # the groups divide the channels
                d.unify(kids[0][1], ("mul", ("const", ints[0]), d.fresh()))
            return kids[0]
        if op == "skiplayernorm":
            x, skip, packed = kids
            for a, b in zip(x, skip, strict=True):
                d.unify(a, b)
            d.unify(packed[0], ("mul", ("const", 2), x[-1]))
            return x
        if op in ("poolmax", "poolavg"):
            _, _, sh, sw, padding, _ = ints
            x = kids[0]
            spatial = [
                ("cdiv", h, s) if padding == 0 else d.fresh()
                for h, s in zip(x[2:], (sh, sw), strict=True)
            ]
            return [x[0], x[1], *spatial]
        if op == "batchnorm":
            for k in kids[1:]:
                d.unify(k[0], kids[0][1])
            return kids[0]
        if op.startswith("concat"):
            axis = ints[0]
            for i in range(len(kids[0])):
                if i != axis:
                    for other in kids[1:]:
                        d.unify(kids[0][i], other[i])
            total = kids[0][axis]
            for other in kids[1:]:
                total = ("sum", total, other[axis])
            return [total if i == axis else e for i, e in enumerate(kids[0])]
        if op == "split":
            return _SplitDims(ints[0], kids[0])
        if op in ("split_0", "split_1"):
            s = kids[0]
            if not isinstance(s, _SplitDims):
                raise Unsolvable(f"{op} of {p.args[0]}, which is not a split")
            whole = d.resolve(s.dims[s.axis])
            piece = whole[1 if op == "split_0" else 2] if whole[0] == "sum" else d.fresh()
            return [piece if i == s.axis else e for i, e in enumerate(s.dims)]
        if op == "merge":
            w = kids[0]
            return [w[0], ("mul", ("const", ints[0]), w[1]), w[2], w[3]]
        if op == "enlarge":
            w, ref = kids
            for k in (*w[2:], *ref[2:]):
                d.unify(k, d.fresh("kernel"))
            return [w[0], w[1], ref[2], ref[3]]
        raise Unsolvable(f"the shape solver does not model {op!r}")


def patterns(rule: Rule, *, rhs: bool = True) -> list[Pattern]:
    """Every pattern node of the left-hand sides of ``rule`` and, with ``rhs``, the right."""
    out: list[Pattern] = []
    stack: list[Term] = [*rule.lhs, *(rule.rhs if rhs else ())]
    while stack:
        t = stack.pop()
        if isinstance(t, Pattern):
            out.append(t)
            stack.extend(t.args)
    return out


def draw_shapes(
    rule: Rule,
    choose: Choose[Any],
    near_misses: Sequence[int] = NEAR_MISSES,
    *,
    sides: str = "joint",
    even_kernels: bool = False,
    pinned: dict[str, Pin] | None = None,
    params: dict[str, Any] | None = None,
    lists: dict[str, tuple[int, ...]] | None = None,
    ranks: dict[str, int] | None = None,
    shaped: dict[str, object] | None = None,
    divides: list[tuple[object, object]] | None = None,
) -> dict[str, tuple[int, ...]]:
    """Shapes for the rule's variables that make its sides valid often (not always); then
    ``choose(near_misses)`` times one dim of one variable is redrawn on its own (1 favoured:
    broadcasting is what element-wise guards are about). ``sides``: which constraints are solved
    (:data:`SIDES`); ``even_kernels``: conv kernels of even sizes too (TENSAT supports odd ones
    only). ``pinned``: the rule's lists pinned by its conditions
    (:func:`relsat.rewrite.pins.pins`, left as variables in ``rule``), solved with the shapes;
    their values go into ``lists`` (``params``: the parameters drawn before); ``ranks``: ranks
    the conditions fix; ``shaped``: tensors whose shapes they pin
    (:func:`relsat.rewrite.pins.shapes`); ``divides``: the dims they say divide others
    (:func:`relsat.rewrite.pins.divisors`). Raises :class:`Unsolvable` when the constraints
    cannot be modelled, :class:`NoInstance` when this draw has no instance."""
    if sides not in SIDES:
        raise ValueError(f"sides must be one of {SIDES}, got {sides!r}")
    try:
        return _draw(
            rule,
            choose,
            near_misses,
            sides,
            even_kernels,
            pinned or {},
            params or {},
            {} if lists is None else lists,
            ranks or {},
            shaped or {},
            list(divides or ()),
        )
    except NoInstance:
        raise
    except IndexError as exc:
        if params:  # an axis drawn past the rank a parameter gives: not at these values
            raise NoInstance(f"no shapes at {dict(params)} ({exc})") from None
        raise Unsolvable(f"the shape solver cannot model this rule ({exc})") from None
    except (TypeError, ValueError) as exc:  # a pattern no valid instance has
        # (a concat axis past its rank, a matmul of vectors): the builder would refuse it too.
        raise Unsolvable(f"the shape solver cannot model this rule ({exc})") from None


def _draw(
    rule: Rule,
    choose: Choose[Any],
    near_misses: Sequence[int],
    sides: str,
    even: bool,
    pinned: dict[str, Pin],
    params: dict[str, Any],
    lists: dict[str, tuple[int, ...]],
    fixed_ranks: dict[str, int],
    shaped: dict[str, object],
    divides: list[tuple[object, object]],
) -> dict[str, tuple[int, ...]]:
    rhs = sides != "lhs"
    rk = _Ranks()
    rk.pins = pinned
    rk.shaped = shaped
    rk.biases = {_key(t.args[-1]) for t in patterns(rule, rhs=rhs) if t.op == "matmul_bias"}
    for lhs_root, rhs_root in zip(rule.lhs, rule.rhs, strict=True):
        left = _walk_ranks(lhs_root, rk)
        if rhs:
            right = _walk_ranks(rhs_root, rk)
        if sides == "joint":
            rk.union(left, right)
    for name, rank in fixed_ranks.items():  # rank(?x) == 3 in a condition
        rk.fix(("var", name), rank)
    rank_of: dict[Any, int] = {}
    for k in rk.parent:  # insertion order: deterministic
        r = rk.root(k)
        if r not in rank_of:
            fixed = rk.fixed.get(r)
            drawn = MATMUL_RANKS if r in rk.matmul else FREE_RANKS
            least = rk.least.get(r, 0)
            rank_of[r] = fixed if fixed else choose([n for n in drawn if n >= least] or drawn)
    for key, whole in rk.deferred:  # a pinned reshape's rank: its list's length
        try:
            n = length(whole, lambda v: rank_of[rk.root(("var", v))])
        except (NotSymbolic, KeyError) as err:
            raise Unsolvable(f"a pinned reshape: {err}") from None
        r = rk.root(key)
        if rk.fixed.get(r, n) != n:
            raise NoInstance(f"a reshape to {n} dims is used with rank {rk.fixed[r]}")
        rank_of[r] = n
    solver = _Solver(
        {k: rank_of[rk.root(k)] for k in rk.parent},
        _Dims(choose),
        pins=pinned,
        shaped=shaped,
        divides=divides,
        values=params,
    )
    for lhs_root, rhs_root in zip(rule.lhs, rule.rhs, strict=True):
        left = solver.walk(lhs_root)
        if rhs:
            right = solver.walk(rhs_root)
        if sides == "joint":
            if isinstance(left, _SplitDims) or isinstance(right, _SplitDims):
                raise Unsolvable("a side is a split pair, not a tensor")
            if len(left) != len(right):  # a broadcast on one side drawn past the other's rank
                raise NoInstance(f"the sides' ranks differ here ({len(left)}, {len(right)})")
            for x, y in zip(left, right, strict=True):
                solver.dims.unify(x, y)
    var_dims = {v.name: solver.walk(v) for v in rule.bound}
    free: dict[int, None] = {}
    for dims in var_dims.values():
        for e in dims:
            solver.dims.free(e, free)
    kernels = KERNELS_EVEN if even else KERNELS_ENLARGE if "enlarge" in str(rule) else KERNELS

    def pool(e: Expr) -> tuple[int, ...]:
        e = solver.dims.resolve(e)
        tags = solver.dims.tags[e[1]] if e[0] == "sym" else set()
        return kernels if "kernel" in tags else GROUPS if "group" in tags else DIMS

    for target in solver.lists.values():
        for e in target:
            solver.dims.free(e, free)
    values = {sym: choose(pool(("sym", sym))) for sym in free}
    for name, target in solver.lists.items():
        lists[name] = tuple(solver.dims.value(e, values) for e in target)
    shapes = {n: [solver.dims.value(e, values) for e in ds] for n, ds in var_dims.items()}
    for _ in range(choose(near_misses)):  # redraw one dim of one variable on its own
        name = choose(sorted(shapes))
        if not shapes[name]:
            continue
        i = choose(range(len(shapes[name])))
        shapes[name][i] = choose((1, *pool(var_dims[name][i])))
    return {n: tuple(s) for n, s in shapes.items()}
