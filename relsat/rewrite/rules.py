"""The rule IR: operators and guards of the rule language, patterns, rules, rule sets.

Rules are data (:class:`Rule`: named, one or more ``lhs => rhs`` pairs, flags, guards); the file
formats that produce them live in :mod:`relsat.rewrite.rulefile`. A :class:`Rule` validates itself
when it
is built: unknown operators or guards, wrong arity, a right-hand-side variable that no left-hand
side binds, an ONNX operator (``onnx.Where``: one relsat keeps opaque, :func:`onnx_type`) on a
right-hand side are :class:`RuleError` s naming the rule.

>>> r = Rule("relu-of-relu", (Pattern("relu", (Pattern("relu", (Var("x"),)),)),),
...          (Pattern("relu", (Var("x"),)),))
>>> str(r.lhs[0])
'(relu (relu ?x))'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TypeAlias, TypeVar, overload

import numpy as np

from relsat.errors import RuleError, RuleSyntaxError
from relsat.graph.ops import FLOAT_PARAMS, MIXED_PARAMS, OPAQUE_INT_ATTRS, from_f32_bits
from relsat.rewrite.exprs import Cond, Expr, Param, expr_type, params_of, sexpr, tensors_of

__all__ = [
    "COMMUTATIVE",
    "GUARDS",
    "ONNX_PREFIX",
    "OPERATORS",
    "Guard",
    "GuardSpec",
    "Location",
    "OpSignature",
    "Pattern",
    "Rule",
    "RuleError",
    "RuleSet",
    "RuleSyntaxError",
    "Term",
    "Var",
    "canonical",
    "check_onnx",
    "onnx_type",
    "param_type",
    "signature",
]


# ---------------------------------------------------------------------------------------------
# Operators and guards


@dataclass(frozen=True)
class OpSignature:
    """An operator's arguments in order: ``(name, kind)``, kind ``int``, ``tensor`` or ``str``."""

    params: tuple[tuple[str, str], ...]

    @property
    def arity(self) -> int:
        return len(self.params)

    @property
    def n_int(self) -> int:
        """Number of integer arguments (for rule ops they all come first)."""
        return sum(kind == "int" for _, kind in self.params)

    @property
    def n_tensor(self) -> int:
        return sum(kind == "tensor" for _, kind in self.params)

    @property
    def in_rules(self) -> bool:
        """Rules cannot spell string leaves (names, permutations, shapes)."""
        return all(kind != "str" for _, kind in self.params)


def _sig(spec: str) -> OpSignature:
    """``"stride_h:int input"`` → signature; a bare name is a tensor argument."""
    pieces = [[*p.split(":"), "tensor"] for p in spec.split()]
    return OpSignature(tuple((piece[0], piece[1]) for piece in pieces))


_CONV = "stride_h:int stride_w:int padding:int activation:int"
_POOL = "input kernel_h:int kernel_w:int stride_h:int stride_w:int padding:int activation:int"
#: TENSAT's operator language (FORMAT.md §3): name → argument names and kinds, in TENSAT's order.
OPERATORS: dict[str, OpSignature] = {
    "ewadd": _sig("a b"),
    "ewmul": _sig("a b"),
    "matmul": _sig("activation:int a b"),
    "conv2d": _sig(f"{_CONV} input weight"),
    # relsat's fused units (not TENSAT's): what onnxruntime runs as one kernel.
    "matmul_bias": _sig("activation:int a b bias"),
    # x [..., K] @ w [K, N]: one MatMul on an N-D input (onnxruntime's, no flatten around it)
    "linear": _sig("x w"),
    "conv2d_bias": _sig(f"{_CONV} input weight bias"),
    "relu6": _sig("x"),
    "relu": _sig("x"),
    "tanh": _sig("x"),
    "sigmoid": _sig("x"),
    "dropout": _sig("x"),
    # relsat's transformer operators (reductions and normalizations on the last axis); a float
    # parameter is an integer literal, its float32 bits (rule files write it as a float: 0.5).
    "scalar": _sig("value:int"),
    "ewsub": _sig("a b"),
    "ewdiv": _sig("a b"),
    "ewpow": _sig("a b"),
    "sqrt": _sig("x"),
    "erf": _sig("x"),
    "reducemean": _sig("x"),
    "softmax": _sig("x"),
    "layernorm": _sig("epsilon:int x scale bias"),
    "skiplayernorm": _sig("epsilon:int x skip scale_bias"),
    "gelu": _sig("x"),
    "gelu_tanh": _sig("x"),
    "biasgelu": _sig("x bias"),
    "biasgelu_tanh": _sig("x bias"),
    "quickgelu": _sig("alpha:int x"),
    "nanzero": _sig("x"),
    "same": _sig("x"),
    "attention": _sig("scale:int q kt v bias"),
    # attention with its q, k, v projections packed (com.microsoft Attention)
    "mha": _sig("heads:int scale:int x w b bias"),
    # LLM decoder operators: RMS normalization, rotary embedding and their spelled-out pieces.
    "reciprocal": _sig("x"),
    "neg": _sig("x"),
    "turnpairs": _sig("x"),
    "repeat2": _sig("x"),
    "cos": _sig("x"),
    "sin": _sig("x"),
    "slice": _sig("axis:int start:int end:int step:int x"),
    "rmsnorm": _sig("epsilon:int x scale"),
    "rotary": _sig("interleaved:int x cos sin"),
    "gqa": _sig("scale:int q kt v bias"),
    "repeatkv": _sig("count:int x"),
    # normalizations of images: over each channel (instance), over groups of channels (group)
    "instancenorm": _sig("epsilon:int x scale bias"),
    "groupnorm": _sig("groups:int epsilon:int x scale bias"),
    "concat": _sig("axis:int ndim:int a b"),
    "concat3": _sig("axis:int ndim:int x1 x2 x3"),
    "concat4": _sig("axis:int ndim:int x1 x2 x3 x4"),
    "concat5": _sig("axis:int ndim:int x1 x2 x3 x4 x5"),
    "split": _sig("axis:int x"),
    "split_0": _sig("split"),
    "split_1": _sig("split"),
    "merge": _sig("weight count:int"),
    "enlarge": _sig("weight reference"),
    "poolmax": _sig(_POOL),
    "poolavg": _sig(_POOL),
    # shape operators: a list parameter (``ints``: the enode's string column, "0_2_1_3")
    "transpose": _sig("input perm:ints shuffle:int"),
    "reshape": _sig("input shape:ints"),
    "expand": _sig("input shape:ints"),
    "noop": _sig("a b"),
    "batchnorm": _sig("epsilon:int input scale bias mean var"),
    "input": _sig("name:str"),
    "weight": _sig("name:str"),
}


#: A left-hand side names an ONNX operator relsat keeps opaque as ``onnx.<Type>`` (the default
#: domain): ``(onnx.Where (onnx.IsNaN ?x) ?z ?x)``. Its arguments are the integer attributes rules
#: may name (:data:`relsat.graph.ops.OPAQUE_INT_ATTRS`: ``(onnx.Flatten ?axis ?m)``, ``(onnx.Gather
#: 0 ?d ?i)``), then the node's tensor inputs in order (as many as written); a right-hand side
#: cannot build one.
ONNX_PREFIX = "onnx."


def onnx_type(op: str) -> str | None:
    """The ONNX type a pattern's ``onnx.<Type>`` names (``"Where"``), None for relsat's ops."""
    return op[len(ONNX_PREFIX) :] if op.startswith(ONNX_PREFIX) else None


def signature(op: str, n_args: int) -> OpSignature:
    """The signature of ``op`` as written with ``n_args`` arguments: :data:`OPERATORS`' for
    relsat's operators; for an ONNX one (:func:`onnx_type`), its attributes rules name, then
    the rest tensors. Raises :class:`RuleError` for an unknown operator."""
    kind = onnx_type(op)
    if kind is None:
        sig = OPERATORS.get(op)
        if sig is None:
            raise RuleError(f"unknown operator {op!r}")
        return sig
    attrs = tuple((name, "int") for name, _ in OPAQUE_INT_ATTRS.get(kind, ()))
    tensors = tuple((f"input{i}", "tensor") for i in range(n_args - len(attrs)))
    return OpSignature(attrs + tensors)


def check_onnx(op: str, n_args: int) -> None:
    """Raise :class:`RuleError` unless ``onnx.<Type>`` is an operator of ONNX's default domain
    (``onnx.defs``) that takes ``n_args`` inputs (at least one; a constant the importer keeps in
    the node's attributes is not an input, so fewer than the schema's least are allowed)."""
    import onnx.defs  # only for a rule that names one

    kind = onnx_type(op)
    if not kind or not onnx.defs.has(kind):
        raise RuleError(f"unknown ONNX operator {kind!r} (of the default domain, onnx.defs)")
    most = onnx.defs.get_schema(kind).max_input
    named = [name for name, _ in OPAQUE_INT_ATTRS.get(kind, ())]
    if not 1 <= n_args - len(named) <= most:
        takes = "1 tensor input" if most == 1 else f"1 to {most} tensor inputs"
        if named:
            takes = f"its attribute {', '.join(named)}, then {takes}"
        raise RuleError(f"{op} takes {takes}, got {n_args}")


#: Operators whose two operands commute: a rule's pattern of one of them matches either operand
#: order (relsat.engine.compile), so no rule is written per order: relsat's element-wise add and
#: mul, and the ONNX operators relsat keeps opaque whose two inputs commute (the masks' logic).
#: TENSAT's converted rules are ``ordered`` (matched as written, as TENSAT matches them).
COMMUTATIVE = frozenset({"ewadd", "ewmul", "onnx.And", "onnx.Or", "onnx.Xor", "onnx.Equal"})


def param_type(op: str, index: int) -> str:
    """The type of ``op``'s ``index``-th integer argument: ``float`` for a float parameter (stored
    as float32 bits, :data:`relsat.graph.ops.FLOAT_PARAMS`), else ``int``."""
    if op in FLOAT_PARAMS and index == 0:
        return "float"
    if op in MIXED_PARAMS and index == 1:  # mha: heads, then its scale; groupnorm: groups, eps
        return "float"
    return "int"


@dataclass(frozen=True)
class GuardSpec:
    """One guard of the closed vocabulary: its parameter names and what it requires."""

    params: tuple[str, ...]
    doc: str


#: The guard vocabulary (``where name(?a, …)``); see ``reference/SEMANTICS.md`` §7.
GUARDS: dict[str, GuardSpec] = {
    "ungrouped": GuardSpec(
        ("x", "w"), "a conv of input ?x with weight ?w has one group: C(x) == dim 1 of w"
    ),
    "same-shape": GuardSpec(("a", "b"), "?a and ?b have equal shapes (no broadcasting)"),
    "odd-kernels": GuardSpec(
        ("w1", "w2"),
        "?w1 and ?w2 are 4-D weights with odd kernel sizes (enlarge's centring equals SAME's)",
    ),
    "same-group-width": GuardSpec(
        ("x1", "w1", "x2", "w2"),
        "conv(?x1, ?w1) and conv(?x2, ?w2) have equal output channels per group",
    ),
}


# ---------------------------------------------------------------------------------------------
# The IR


@dataclass(frozen=True)
class Var:
    """A pattern variable; ``name`` without the ``?``."""

    name: str

    def __str__(self) -> str:
        return f"?{self.name}"


Term: TypeAlias = "Pattern | Var | int | Param | Expr | tuple[int, ...]"


@dataclass(frozen=True)
class Pattern:
    """``(op args…)``: each argument a nested pattern, a variable or an integer literal."""

    op: str
    args: tuple[Term, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        if onnx_type(self.op) is not None:
            check_onnx(self.op, len(self.args))
        sig = signature(self.op, len(self.args))
        if not sig.in_rules:
            raise RuleError(f"operator {self.op!r} takes string arguments and cannot be in rules")
        if len(self.args) != sig.arity:
            raise RuleError(
                f"{self.op} takes {sig.arity} arguments ({_sig_text(sig)}), got {len(self.args)}"
            )
        for (pname, kind), arg in zip(sig.params, self.args, strict=True):
            if _kind(arg) != kind:
                raise RuleError(
                    f"{self.op} argument {pname!r} must be {_KIND_TEXT[kind]}, got {arg}"
                )

    def __str__(self) -> str:
        args = [sexpr(a) if isinstance(a, Expr | tuple) else str(a) for a in self.args]
        if self.op in FLOAT_PARAMS and isinstance(self.args[0], int):
            args[0] = str(np.float32(from_f32_bits(self.args[0])))  # a float literal, as written
        return "(" + " ".join([self.op, *args]) + ")"

    def vars(self) -> Iterator[Var]:
        """Variables in order of appearance (depth first, left to right), repeats included."""
        stack: list[Term] = [self]
        while stack:
            term = stack.pop()
            if isinstance(term, Var):
                yield term
            elif isinstance(term, Pattern):
                stack.extend(reversed(term.args))

    def ops(self) -> Iterator[str]:
        """The operator of each of its nodes, depth first, repeats included."""
        return (node.op for node in _nodes(self))

    def params(self) -> Iterator[Param]:
        """Parameter variables in order of appearance (depth first), repeats included."""
        for node in _nodes(self):
            for arg in node.args:
                if not isinstance(arg, Pattern):
                    yield from params_of(arg)

    def exprs(self) -> Iterator[Expr]:
        """Arithmetic at parameter positions (right-hand sides), depth first."""
        for node in _nodes(self):
            yield from (a for a in node.args if isinstance(a, Expr))


_KIND_TEXT = {
    "int": "an integer, a ?variable:type or arithmetic",
    "ints": "a list [0 2 1 3], a ?variable:ints or a list function",
    "tensor": "a tensor (pattern or ?variable)",
    "str": "a string",
}


def _kind(term: object) -> str:
    if isinstance(term, bool):
        return "other"
    if isinstance(term, tuple) and all(isinstance(i, int) for i in term):
        return "ints"
    if isinstance(term, Param):
        return "ints" if term.type == "ints" else "int"
    if isinstance(term, Expr):
        try:
            return "ints" if expr_type(term) == "ints" else "int"
        except RuleError:
            return "int"  # reported with its place by the parameter check
    if isinstance(term, int):
        return "int"
    return "tensor" if isinstance(term, Pattern | Var) else "other"


def _sig_text(sig: OpSignature) -> str:
    return " ".join(name for name, _ in sig.params)


@dataclass(frozen=True)
class Guard:
    """A side condition ``name(?a, …)`` from :data:`GUARDS`."""

    name: str
    args: tuple[Var, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        spec = GUARDS.get(self.name)
        if spec is None:
            raise RuleError(f"unknown guard {self.name!r} (known: {', '.join(GUARDS)})")
        if len(self.args) != len(spec.params):
            want = ", ".join(f"?{p}" for p in spec.params)
            raise RuleError(f"guard {self.name}({want}) takes {len(spec.params)} variables")

    def __str__(self) -> str:
        return f"{self.name}({', '.join(map(str, self.args))})"


@dataclass(frozen=True)
class Location:
    """Where a rule was defined: file (None for a string) and 1-based line."""

    path: str | None
    line: int

    def __str__(self) -> str:
        return f"{self.path or '<string>'}:{self.line}"


@dataclass(frozen=True)
class Rule:
    """A named rewrite: ``lhs[i] => rhs[i]`` for each i; several patterns are joined on shared vars.

    ``runtime``: onnxruntime makes this rewrite itself when it loads a model (a Conv's bias, batch
    norm or activation folded in): a model whose only rewrites are such is kept as it is, not
    timed against its own runtime form (:func:`relsat.pipeline.ort.unchanged`).

    Equality ignores ``location``. Construction checks the rule and raises :class:`RuleError`.
    """

    name: str
    lhs: tuple[Pattern, ...]
    rhs: tuple[Pattern, ...]
    symmetric: bool = False
    guards: tuple[Guard | Cond, ...] = ()
    ordered: bool = False
    runtime: bool = False
    sources: tuple[str, ...] = ()
    doc: str = ""
    location: Location | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name in ("lhs", "rhs", "guards", "sources"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        try:
            _check_rule(self)
        except RuleError as err:
            loc = self.location
            path, line = (loc.path, loc.line) if loc else (None, None)
            raise err.located(path, line, rule=self.name) from None

    @property
    def is_multi(self) -> bool:
        return len(self.lhs) > 1

    @property
    def bound(self) -> tuple[Var, ...]:
        """Variables bound by the left-hand sides, in order of first appearance."""
        return tuple(dict.fromkeys(v for p in self.lhs for v in p.vars()))

    @property
    def params(self) -> tuple[Param, ...]:
        """Parameter variables bound by the left-hand sides, in order of first appearance."""
        return tuple(dict.fromkeys(v for p in self.lhs for v in p.params()))

    @property
    def slots(self) -> tuple[Var | Param, ...]:
        """Every variable bound by the left-hand sides, tensors and parameters, in order of first
        appearance (depth first, left to right): the engine's variable slots."""
        out: dict[Var | Param, None] = {}
        stack: list[Term] = list(reversed(self.lhs))
        while stack:  # the order of Pattern.vars(), parameters in their places
            term = stack.pop()
            if isinstance(term, Var) or (isinstance(term, Param) and not term.wild):
                out.setdefault(term)
            elif isinstance(term, Pattern):
                stack.extend(reversed(term.args))
        return tuple(out)

    @property
    def shared(self) -> tuple[Var, ...]:
        """Variables that occur in more than one left-hand side: a multi-pattern rule's join key."""
        seen = [set(p.vars()) for p in self.lhs]
        return tuple(v for v in self.bound if sum(v in s for s in seen) > 1)

    def __str__(self) -> str:
        return _format_rule(self)


def _check_rule(rule: Rule) -> None:
    def fail(message: str, part: tuple[str, int] | None) -> None:
        err = RuleError(message, rule=rule.name)
        err.part = part
        raise err

    if not rule.name or any(c.isspace() for c in rule.name):
        fail(f"bad rule name {rule.name!r}", None)
    for p in (*rule.lhs, *rule.rhs):
        if not isinstance(p, Pattern):
            fail(f"each side must be an operator pattern, got {p}", None)
    for i, rhs in enumerate(rule.rhs):
        if any(onnx_type(op) is not None for op in rhs.ops()):
            fail("an opaque operator cannot be built by a rule", ("eq", i))
    if not rule.lhs:
        fail("no left-hand side", None)
    if len(rule.rhs) != len(rule.lhs):
        fail(f"{len(rule.lhs)} left-hand sides but {len(rule.rhs)} right-hand sides", None)
    if rule.symmetric and len(rule.lhs) < 2:
        fail("'symmetric' applies to multi-pattern rules only", ("flag", 0))
    bound = set(rule.bound)
    for i, rhs in enumerate(rule.rhs):
        used = [*rhs.vars(), *(v for e in rhs.exprs() for v in tensors_of(e))]
        for v in used:
            if v not in bound:
                fail(f"right-hand side uses {v}, which no left-hand side binds", ("eq", i))
    _check_params(rule, fail)
    params = {p.name for p in rule.params if not p.wild}
    for i, guard in enumerate(rule.guards):
        if isinstance(guard, Cond):
            try:
                if expr_type(guard.expr) != "bool":
                    fail(f"'where {guard}' is a number, not a condition", ("guard", i))
            except RuleError as err:
                fail(err.reason, ("guard", i))
            for t in tensors_of(guard.expr):
                if not isinstance(t, Var) or t not in bound:
                    fail(f"condition uses {t}, which no left-hand side binds", ("guard", i))
            for q in params_of(guard.expr):
                if q.name not in params:
                    fail(f"condition uses {q}, which no left-hand side binds", ("guard", i))
            continue
        for v in guard.args:
            if v not in bound:
                fail(f"guard {guard.name} uses {v}, which no left-hand side binds", ("guard", i))


def _check_params(rule: Rule, fail: object) -> None:
    """Parameter variables: one type per name, never also a tensor; bound on the left before a
    right-hand side uses them; arithmetic only on the right; each at a position of its type."""
    tensors = {v.name for v in rule.bound} | {v.name for p in rule.rhs for v in p.vars()}
    types: dict[str, str] = {}
    for side, patterns in (("lhs", rule.lhs), ("rhs", rule.rhs)):
        for i, p in enumerate(patterns):
            part = ("eq", i)
            for node in _nodes(p):
                sig = signature(node.op, len(node.args)).params
                ints = [a for a, (_, k) in zip(node.args, sig, strict=True) if k == "int"]
                lists = [a for a, (_, k) in zip(node.args, sig, strict=True) if k == "ints"]
                places = [(j, a, param_type(node.op, j)) for j, a in enumerate(ints)]
                places += [(len(ints) + j, a, "ints") for j, a in enumerate(lists)]
                for j, arg, want in places:
                    if isinstance(arg, Expr) and side == "lhs":
                        fail(  # type: ignore[operator]
                            f"arithmetic {sexpr(arg)} in a left-hand side: bind a ?variable "
                            "there and say what it must be in a 'where' line",
                            part,
                        )
                    for v in params_of(arg):
                        if v.wild:
                            continue
                        if v.name in tensors:
                            fail(f"?{v.name} is used as a tensor and as a {v.type}", part)  # type: ignore[operator]
                        if types.setdefault(v.name, v.type) != v.type:
                            fail(f"?{v.name} is used as {types[v.name]} and as {v.type}", part)  # type: ignore[operator]
                    if isinstance(arg, Param) and arg.type != want:
                        fail(  # type: ignore[operator]
                            f"{node.op}'s parameter {j + 1} is {want}, ?{arg.name} is {arg.type}",
                            part,
                        )
                    if isinstance(arg, Expr):
                        try:
                            got = expr_type(arg)
                        except RuleError as err:
                            fail(err.reason, part)  # type: ignore[operator]
                        if got != want:
                            fail(  # type: ignore[operator]
                                f"{node.op}'s parameter {j + 1} is {want}, {sexpr(arg)} is {got}",
                                part,
                            )
    bound = {p.name for p in rule.params if not p.wild}
    for i, p in enumerate(rule.rhs):
        for v in p.params():
            if v.wild:
                fail(f"{v} is a wildcard: it matches anything and binds nothing", ("eq", i))  # type: ignore[operator]
            if v.name not in bound:
                fail(f"right-hand side uses {v}, which no left-hand side binds", ("eq", i))  # type: ignore[operator]


def _nodes(p: Pattern) -> Iterator[Pattern]:
    """Every pattern node of ``p``, depth first, left to right (iteratively: deep patterns)."""
    stack = [p]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(a for a in reversed(node.args) if isinstance(a, Pattern))


class RuleSet:
    """An ordered collection of uniquely named rules; ``rs["name"]``, ``rs[0]``, ``len(rs)``."""

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self._rules: tuple[Rule, ...] = tuple(rules)
        self._by_name: dict[str, Rule] = {}
        for rule in self._rules:
            first = self._by_name.get(rule.name)
            if first is not None:
                where = rule.location
                raise RuleError(
                    f"duplicate rule name {rule.name!r} (first defined at {first.location})",
                    path=where.path if where else None,
                    line=where.line if where else None,
                    rule=rule.name,
                )
            self._by_name[rule.name] = rule

    @property
    def single(self) -> tuple[Rule, ...]:
        return tuple(r for r in self._rules if not r.is_multi)

    @property
    def multi(self) -> tuple[Rule, ...]:
        return tuple(r for r in self._rules if r.is_multi)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def get(self, name: str) -> Rule | None:
        return self._by_name.get(name)

    @overload
    def __getitem__(self, key: int) -> Rule: ...
    @overload
    def __getitem__(self, key: str) -> Rule: ...
    def __getitem__(self, key: int | str) -> Rule:
        return self._by_name[key] if isinstance(key, str) else self._rules[key]

    def __contains__(self, item: object) -> bool:
        return item in self._by_name if isinstance(item, str) else item in self._rules

    def __iter__(self) -> Iterator[Rule]:
        return iter(self._rules)

    def __len__(self) -> int:
        return len(self._rules)

    def __add__(self, other: RuleSet) -> RuleSet:
        return RuleSet((*self._rules, *other._rules))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RuleSet) and self._rules == other._rules

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RuleSet({len(self.single)} single, {len(self.multi)} multi)"


_T = TypeVar("_T", Pattern, Rule)


def canonical(item: _T) -> _T:
    """Rename variables to ``?v0``, ``?v1``, … in order of first appearance (left-hand sides
    first, then right-hand sides), so that rules equal up to renaming compare equal.

    >>> str(canonical(Pattern("ewadd", (Var("b"), Var("a")))))
    '(ewadd ?v0 ?v1)'
    """
    names: dict[Var, Var] = {}
    patterns = [item] if isinstance(item, Pattern) else [*item.lhs, *item.rhs]
    for p in patterns:
        for v in p.vars():
            names.setdefault(v, Var(f"v{len(names)}"))

    pnames: dict[str, str] = {}
    for p in patterns:
        for q in p.params():
            if not q.wild:  # a wildcard stays one: it binds nothing to rename
                pnames.setdefault(q.name, f"p{len(pnames)}")

    def ren(term: Term) -> Term:
        if isinstance(term, Var):
            return names.get(term, term)
        if isinstance(term, Param):
            return Param(pnames.get(term.name, term.name), term.type)
        if isinstance(term, Expr):
            return Expr(term.op, tuple(ren(a) for a in term.args))  # type: ignore[arg-type]
        if isinstance(term, Pattern):
            return Pattern(term.op, tuple(ren(a) for a in term.args))
        return term

    if isinstance(item, Pattern):
        return _pattern(ren(item))
    guards = tuple(
        Cond(ren(g.expr))  # type: ignore[arg-type]
        if isinstance(g, Cond)
        else Guard(g.name, tuple(names[v] for v in g.args))
        for g in item.guards
    )
    return replace(
        item,
        lhs=tuple(_pattern(ren(p)) for p in item.lhs),
        rhs=tuple(_pattern(ren(p)) for p in item.rhs),
        guards=guards,
    )


def _pattern(term: Term) -> Pattern:
    assert isinstance(term, Pattern)
    return term


def _format_rule(rule: Rule) -> str:
    out = [f"# name: {rule.name}"]
    if rule.sources:
        out.append(f"# from: {', '.join(rule.sources)}")
    out += [f"# {line}".rstrip() for line in rule.doc.splitlines()]
    body = "\n".join(
        f"{lhs} => {rhs.args[0] if rhs.op == 'same' else rhs}"  # (same ?x) is written ?x
        for lhs, rhs in zip(rule.lhs, rule.rhs, strict=True)
    )
    for p in (p for p in rule.params if not p.wild):  # each one's type where it first appears
        body = re.sub(rf"\?{p.name}(?![A-Za-z0-9_:])", f"?{p.name}:{p.type}", body, count=1)
    out.append(body)
    if rule.symmetric:
        out.append("symmetric")
    if rule.ordered:
        out.append("ordered")
    if rule.runtime:
        out.append("runtime")
    out += [f"where {g}" for g in rule.guards]
    return "\n".join(out)
