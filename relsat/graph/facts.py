"""Facts about a tensor's values: the value analysis that rules' guards read.

A rule may need to know more of a tensor than its shape: an eager attention equals ONNX Attention
only where its additive mask is **finite** (a row masked entirely by -inf gives NaN, the fused
kernel 0); a rotary embedding is fused only where its cos and sin tables have **equal halves** on
the last axis (``concat(h, h)``: transformers' ``cat((freqs, freqs), -1)``), or **equal pairs**
(``repeat_interleave(t, 2, -1)``: GPT-J's interleaved rotary). :class:`Facts` holds what is known:

* ``lo`` / ``hi``: bounds of every value (float32's finite range; None: unknown or unbounded).
  ``finite`` when both are known, ``nonneg`` when ``lo >= 0``;
* ``halves``: the two halves of the last axis are equal; ``pairs``: entries ``2i`` and ``2i + 1``
  of the last axis are equal;
* ``digest``: for a constant (a weight or a scalar), a hash of its value, dtype and shape (equal
  digests, equal constants);
* ``affine``: for an integer tensor, its affine form over the dims as text (every element an
  affine function of its index: :mod:`relsat.onnx.affine`, whose transfer functions the ONNX
  importer's opaque operators are read with);
* ``grid``: for a ``GatherND`` index ``[*lead, k]``, the lengths along which it reads its data,
  one per component (:func:`relsat.onnx.affine.grid_dims`: each component the position along
  one axis of ``lead``, in order, every axis longer than 1 read): the data's dims where it reads
  them whole, fewer where it reads their first rows; ``rows``: for a row index into a flattened
  tensor, the dims of the data it reads in row-major order, one per moving axis
  (:func:`relsat.onnx.affine.row_dims`; the index's lengths where it reads them whole). A gather
  at such an index is a view of its data (``rules/masks.rules``).

The facts of a leaf come from its value (a weight's, a scalar's), those of an operator from its
inputs' (:func:`transfer`: bounds through arithmetic and data movement, halves and pairs through
element-wise operators and the layouts that keep the last axis). :func:`analyse` reads a whole
graph, an opaque operator through a function its importer gives (ONNX's: :func:`relsat.onnx.masks.
opaque_facts`). The e-graph keeps the same facts per e-class (table ``fact``, merged on union,
computed for rule-built e-nodes by the same :func:`transfer`: :mod:`relsat.engine.facts`), so
that a guard ``where finite(?m)`` or ``where halves(?c)`` reads them.

>>> from relsat.graph.builder import GraphBuilder
>>> b = GraphBuilder()
>>> x = b.input([2, 4])
>>> table = b.weight([1, 4], name="t", value=np.array([[1.0, 2.0, 1.0, 2.0]], np.float32))
>>> g = b.build(b.mul(b.neg(table), b.scalar(2.0)), b.add(x, table))
>>> facts = analyse(g)
>>> facts[g.outputs[0]]
Facts(lo=-4.0, hi=-2.0, halves=True, pairs=False, digest=None, affine=None, grid=None, rows=None)
>>> g.outputs[1] in facts  # x is unknown
False
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from relsat.graph.graph import Graph, Node, Ref
from relsat.graph.ops import Params

__all__ = [
    "FLT_MAX",
    "OPS",
    "VALUE_LIMIT",
    "Facts",
    "Opaque",
    "analyse",
    "bounded",
    "of_value",
    "rounded",
    "transfer",
    "weakest",
]

#: float32's largest finite value: bounds past it are unknown (an intermediate may overflow).
FLT_MAX = float(np.finfo(np.float32).max)
#: Constants larger than this (elements) are not read for facts (their digest, bounds, halves).
VALUE_LIMIT = 1 << 18


@dataclass(frozen=True)
class Facts:
    """What is known of a tensor's values (see the module docstring); the default: nothing."""

    lo: float | None = None
    hi: float | None = None
    halves: bool = False
    pairs: bool = False
    digest: str | None = None
    affine: str | None = None
    grid: tuple[int, ...] | None = None
    rows: tuple[int, ...] | None = None

    @property
    def finite(self) -> bool:
        """Every value a finite float32 (no infinity, no NaN)."""
        return self.lo is not None and self.hi is not None

    @property
    def nonneg(self) -> bool:
        return self.lo is not None and self.lo >= 0

    @property
    def empty(self) -> bool:
        return self == NOTHING

    def merge(self, other: Facts | None) -> Facts:
        """Both facts of one value (two e-nodes of one e-class): the tighter bounds, either
        layout fact."""
        if other is None:
            return self
        return Facts(
            _pick(self.lo, other.lo, max),
            _pick(self.hi, other.hi, min),
            self.halves or other.halves,
            self.pairs or other.pairs,
            self.digest or other.digest,
            self.affine or other.affine,  # both hold: either
            self.grid or other.grid,
            self.rows or other.rows,
        )


NOTHING = Facts()

#: What an opaque operator's facts are, given its node and its inputs' facts (an importer's).
Opaque = Callable[[Graph, Node, Sequence["Facts | None"]], "Facts | None"]


def _pick(a: float | None, b: float | None, best: Callable[[float, float], float]) -> float | None:
    return b if a is None else a if b is None else best(a, b)


def bounded(lo: float | None, hi: float | None) -> tuple[float | None, float | None]:
    """Bounds past float32's range, or NaN, are unknown."""
    ok = lambda v: v is not None and not math.isnan(v) and -FLT_MAX <= v <= FLT_MAX  # noqa: E731
    return (lo if ok(lo) else None), (hi if ok(hi) else None)


#: How far past float32's largest finite value an exact result may lie and still round to it:
#: round-to-nearest overflows from 2^128 - 2^103 (half an ulp past FLT_MAX = 2^128 - 2^104) on;
#: half that margin, so that float64's error in computing the bound (2^75 there) cannot matter.
ROUNDS_FINITE = 2.0**102


def rounded(lo: float | None, hi: float | None) -> tuple[float | None, float | None]:
    """The bounds of a float32 result of one correctly rounded operation (an addition, a
    product) whose exact value lies in [lo, hi]: an exact value just past float32's range still
    rounds to its largest finite value, so such a bound is FLT_MAX (a mask of float32's lowest
    plus a small bias is float32's lowest, not -inf); farther past it, unknown."""

    def clamp(v: float | None) -> float | None:
        if v is not None and FLT_MAX < abs(v) <= FLT_MAX + ROUNDS_FINITE:
            return math.copysign(FLT_MAX, v)
        return v

    return bounded(clamp(lo), clamp(hi))


def of_value(value: np.ndarray) -> Facts:
    """The facts of a constant (at most :data:`VALUE_LIMIT` elements; else none)."""
    v = np.asarray(value)
    if v.size == 0 or v.size > VALUE_LIMIT:
        return NOTHING
    digest = hashlib.blake2b(
        f"{v.dtype.str}{v.shape}".encode() + np.ascontiguousarray(v).tobytes(), digest_size=12
    ).hexdigest()
    f = v.astype(np.float64, copy=False)
    lo, hi = (None, None) if np.isnan(f).any() else bounded(float(f.min()), float(f.max()))
    d = v.shape[-1] if v.ndim else 0
    halves = d >= 2 and d % 2 == 0 and bool(np.array_equal(v[..., : d // 2], v[..., d // 2 :]))
    pairs = d >= 2 and d % 2 == 0 and bool(np.array_equal(v[..., 0::2], v[..., 1::2]))
    return Facts(lo, hi, halves, pairs, digest)


# --- transfer: an operator's facts from its inputs' -----------------------------------------

#: Operators whose output holds values of their (first) input only, rearranged.
_MOVES = frozenset({"reshape", "transpose", "expand", "slice", "split", "split_0", "split_1"})
_MOVES |= {"repeatkv", "repeat2", "noop", "dropout", "finite"}
#: Element-wise operators of one input, with the bounds of their output where known.
_UNARY: dict[str, Callable[[float | None, float | None], tuple[float | None, float | None]]] = {
    "neg": lambda lo, hi: (None if hi is None else -hi, None if lo is None else -lo),
    "relu": lambda lo, hi: (max(lo or 0.0, 0.0), None if hi is None else max(hi, 0.0)),
    "relu6": lambda lo, hi: (
        min(max(lo or 0.0, 0.0), 6.0), 6.0 if hi is None else min(max(hi, 0.0), 6.0)
    ),
    "sigmoid": lambda lo, hi: (0.0, 1.0),
    "tanh": lambda lo, hi: (-1.0, 1.0),
    "erf": lambda lo, hi: (-1.0, 1.0),
    "cos": lambda lo, hi: (-1.0, 1.0),
    "sin": lambda lo, hi: (-1.0, 1.0),
    "sqrt": lambda lo, hi: (
        (math.sqrt(lo), None if hi is None else math.sqrt(hi)) if lo is not None and lo >= 0
        else (None, None)
    ),
    "reciprocal": lambda lo, hi: (
        (0.0 if hi is None else 1 / hi, 1 / lo) if lo is not None and lo > 0 else (None, None)
    ),
    "nanzero": lambda lo, hi: (None, None) if lo is None or hi is None else (lo, hi),
    "gelu": lambda lo, hi: (None, None),
    "gelu_tanh": lambda lo, hi: (None, None),
    "quickgelu": lambda lo, hi: (None, None),
    # a softmax of finite values: its row's largest term is 1, the others in [0, 1]; of a row
    # with +inf or NaN, or of -inf throughout, NaN (so nothing is known without bounds)
    "softmax": lambda lo, hi: (None, None) if lo is None or hi is None else (0.0, 1.0),
    "reducemean": lambda lo, hi: (lo, hi),  # a mean lies between the least and the greatest
}  # fmt: skip
_BINARY = frozenset({"ewadd", "ewsub", "ewmul", "ewdiv", "ewpow"})
#: The operators :func:`transfer` knows (the others' facts are unknown).
OPS = frozenset(_MOVES | set(_UNARY) | _BINARY | {"concat", "scalar"})


def transfer(
    op: str,
    params: Params,
    shapes: Sequence[tuple[int, ...]],
    out: tuple[int, ...],
    facts: Sequence[Facts | None],
    same: bool = False,
) -> Facts | None:
    """The facts of ``op``'s output from its inputs' (``shapes``, ``facts``; ``out`` its shape;
    ``same``: its first two inputs are one tensor); None where nothing is known."""
    ins = [f or NOTHING for f in facts]
    if op == "scalar":
        v = float(params["value"])
        return Facts(v, v, digest=f"scalar:{v!r}")
    if op not in OPS or not ins:
        return None
    x = ins[0]
    if op in _MOVES:
        return _moved(op, params, shapes, out, x)
    if op in _UNARY:
        lo, hi = bounded(*_UNARY[op](x.lo, x.hi))
        keep = op not in ("softmax", "reducemean")  # these mix the last axis
        return _some(Facts(lo, hi, keep and x.halves, keep and x.pairs))
    if op == "concat":
        return _concat(params, shapes, out, ins, same)
    lo, hi = _binary(op, ins[0], ins[1])
    layouts = [_layout(s, f, out) for s, f in zip(shapes, ins, strict=True)]
    halves = all(h for h, _ in layouts)
    pairs = all(p for _, p in layouts)
    return _some(Facts(lo, hi, halves, pairs))


def _some(f: Facts) -> Facts | None:
    return None if f.empty else f


def _layout(shape: tuple[int, ...], f: Facts, out: tuple[int, ...]) -> tuple[bool, bool]:
    """Whether an element-wise operand keeps its output's halves and pairs equal: its own are,
    or it is constant along the output's last axis (a scalar, a last dim of 1)."""
    if not out or out[-1] % 2:
        return False, False
    if not shape or shape[-1] == 1:
        return True, True
    return f.halves, f.pairs


def _binary(op: str, a: Facts, b: Facts) -> tuple[float | None, float | None]:
    # relsat's element-wise operators compute in float32, each result rounded once
    if op == "ewadd":
        return rounded(_sum(a.lo, b.lo), _sum(a.hi, b.hi))
    if op == "ewsub":
        return rounded(_sum(a.lo, _neg(b.hi)), _sum(a.hi, _neg(b.lo)))
    if op == "ewmul" and a.finite and b.finite:
        products = [x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]  # type: ignore[operator]
        return rounded(min(products), max(products))
    if op == "ewpow" and b.lo is not None and b.lo == b.hi and b.lo % 2 == 0 and b.lo > 0:
        # an even power: never negative (x ^ 2, the RMSNorm's square)
        top = None if not a.finite else max(abs(a.lo), abs(a.hi)) ** b.lo  # type: ignore[arg-type]
        return bounded(0.0, top)
    return None, None


def _sum(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _neg(a: float | None) -> float | None:
    return None if a is None else -a


def _moved(
    op: str, params: Params, shapes: Sequence[tuple[int, ...]], out: tuple[int, ...], x: Facts
) -> Facts | None:
    """Data movement keeps the bounds; halves and pairs where the last axis is kept whole."""
    shape = shapes[0]
    last = len(shape) - 1
    if op == "reshape" or op == "expand":
        kept = bool(out) and bool(shape) and out[-1] == shape[-1]
        uniform = op == "expand" and (not shape or shape[-1] == 1) and bool(out)
        # equal pairs of an even last axis stay pairs in any row-major reshape to an even one
        even = op == "reshape" and bool(out) and bool(shape) and not (out[-1] % 2 or shape[-1] % 2)
        layout = (kept and x.halves) or uniform, ((kept or even) and x.pairs) or uniform
        if uniform and out[-1] % 2:
            layout = (False, False)
    elif op == "transpose":
        perm = tuple(params["perm"])
        layout = (x.halves, x.pairs) if perm and perm[-1] == last else (False, False)
    elif op in ("slice", "split"):
        axis = int(params["axis"]) % max(len(shape), 1)
        layout = (x.halves, x.pairs) if axis != last else (False, False)
    elif op == "repeat2":
        layout = (False, True)
    else:
        layout = (x.halves, x.pairs)
    return _some(Facts(x.lo, x.hi, *layout))


def _concat(
    params: Params,
    shapes: Sequence[tuple[int, ...]],
    out: tuple[int, ...],
    ins: Sequence[Facts],
    same: bool,
) -> Facts | None:
    los, his = [f.lo for f in ins], [f.hi for f in ins]
    lo = None if None in los else min(los)  # type: ignore[type-var]
    hi = None if None in his else max(his)  # type: ignore[type-var]
    axis = int(params["axis"]) % max(len(out), 1)
    if axis == len(out) - 1:  # concat(h, h) on the last axis: equal halves
        halves, pairs = same and len(ins) == 2, False
    else:
        halves, pairs = all(f.halves for f in ins), all(f.pairs for f in ins)
    return _some(Facts(lo, hi, halves, pairs))


# --- a whole graph ------------------------------------------------------------------------------


def analyse(
    graph: Graph,
    inputs: Mapping[str, Facts] | None = None,
    opaque: Opaque | None = None,
    only: Sequence[Ref] | None = None,
) -> dict[Ref, Facts]:
    """The facts of every tensor of ``graph`` where something is known: weights from their
    values, inputs from ``inputs`` (by name), opaque operators by ``opaque``, the others by
    :func:`transfer`. ``only``: read just what these tensors are computed from."""
    known: dict[Ref, Facts] = {}
    inputs = inputs or {}
    wanted = None if only is None else _ancestors(graph, only)
    for node in graph.nodes:
        if wanted is not None and node.id not in wanted:
            continue
        ins = [known.get(r) for r in node.inputs]
        if node.op == "weight":
            value = graph.values.get(node.name or "")
            found = None if value is None else _some(of_value(value))
        elif node.op == "input":
            found = inputs.get(node.name or "")
        elif node.op == "opaque":
            found = None if opaque is None else opaque(graph, node, ins)
        else:
            shapes = [graph.shape(r) for r in node.inputs]
            same = len(node.inputs) == 2 and node.inputs[0] == node.inputs[1]
            found = transfer(node.op, node.params, shapes, node.shape, ins, same)
        if found is not None and not found.empty:
            if node.op == "split":  # every piece: the same facts
                for i in range(len(node.outputs)):
                    known[Ref(node.id, i)] = found
            else:
                known[Ref(node.id)] = found
    return known


def _ancestors(graph: Graph, refs: Sequence[Ref]) -> set[int]:
    seen: set[int] = set()
    stack = [r.node for r in refs]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(r.node for r in graph.nodes[n].inputs)
    return seen


def weakest(facts: Sequence[Facts | None]) -> Facts | None:
    """What holds of every one of several tensors (a folded block's input, read at each of its
    occurrences): the widest bounds, a layout fact all have."""
    if not facts or any(f is None for f in facts):
        return None
    first = facts[0]
    assert first is not None
    out = first
    for f in facts[1:]:
        assert f is not None
        out = Facts(
            None if out.lo is None or f.lo is None else min(out.lo, f.lo),
            None if out.hi is None or f.hi is None else max(out.hi, f.hi),
            out.halves and f.halves,
            out.pairs and f.pairs,
            out.digest if out.digest == f.digest else None,
            out.affine if out.affine == f.affine else None,
            out.grid if out.grid == f.grid else None,
            out.rows if out.rows == f.rows else None,
        )
    return _some(out)
