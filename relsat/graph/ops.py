"""The operator language: what each op takes, and the shape and split history it produces.

Semantics follow TASO as TENSAT calls it (``reference/SEMANTICS.md``). Every op is an
:class:`OpSpec` in :data:`OPS`: its arity, its parameter names, and an ``infer`` function from
parameters and input :class:`TensorType` s to output types. ``infer`` raises :class:`OpError` with a
plain reason; the graph builder turns it into a :class:`~relsat.errors.GraphError` naming the node.

A tensor's *split history* (TASO's ``SplitInfo``) is, per dimension, the list of concat boundaries
recorded on that dimension, most recent last. TENSAT's ``split`` cuts at the last entry.

>>> infer("matmul", Params(activation="NONE"), [TensorType((2, 3)), TensorType((3, 5))])[0].shape
(2, 5)
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "ACTIVATIONS",
    "FLOAT_PARAMS",
    "INT_PARAMS",
    "OPAQUE_INT_ATTRS",
    "OPS",
    "PADDINGS",
    "OpError",
    "OpSpec",
    "Params",
    "TensorType",
    "conv_out_size",
    "f32",
    "f32_bits",
    "from_f32_bits",
    "infer",
    "int_params",
    "opaque_ints",
    "opaque_key",
    "opaque_parts",
    "opaque_type",
    "param_ints",
    "same_padding",
]

#: Fused activations; the index is TASO's integer code (0 none, 1 sigmoid, 2 ReLU, 3 tanh), and
#: relsat's 4 for ReLU6 (``min(max(x, 0), 6)``, ONNX ``Clip(0, 6)``, which onnxruntime fuses too).
ACTIVATIONS = ("NONE", "SIGMOID", "RELU", "TANH", "RELU6")
#: Padding modes; the index is TASO's integer code (0 SAME, 1 VALID).
PADDINGS = ("SAME", "VALID")

Shape = tuple[int, ...]
Splits = tuple[tuple[int, ...], ...]


class OpError(Exception):
    """An op cannot be applied to these parameters or input types (internal; see GraphError)."""


@dataclass(frozen=True)
class TensorType:
    """The static type of one tensor: its shape and its per-dimension split history."""

    shape: Shape
    splits: Splits = ()

    def __post_init__(self) -> None:
        if not self.splits:
            object.__setattr__(self, "splits", tuple(() for _ in self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class Params(Mapping[str, Any]):
    """An immutable, hashable parameter mapping; lists become tuples.

    >>> Params(stride=[1, 1], padding="SAME")["stride"]
    (1, 1)
    """

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        merged = dict(items or {}, **kwargs)
        self._items = tuple(sorted((k, _freeze(v)) for k, v in merged.items()))

    def __getitem__(self, key: str) -> Any:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Params):
            return self._items == other._items
        return isinstance(other, Mapping) and dict(self) == dict(other)

    def __repr__(self) -> str:
        return "Params(" + ", ".join(f"{k}={v!r}" for k, v in self._items) + ")"


def _freeze(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.generic):  # numpy scalars behave like the Python ones
        return value.item()
    return value


@dataclass(frozen=True)
class OpSpec:
    """One operator: ``arity`` inputs (``None``: at least ``min_arity``), named parameters."""

    name: str
    arity: int | None
    params: tuple[str, ...]
    infer: Callable[[Params, Sequence[TensorType]], tuple[TensorType, ...]]
    min_arity: int = 0
    doc: str = ""


# ---------------------------------------------------------------------------------------------
# Parameter checks


def _int(params: Params, key: str, *, minimum: int) -> int:
    value = params[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise OpError(f"parameter {key}={value!r} must be an integer >= {minimum}")
    return value


def _ints(params: Params, key: str, n: int | None, *, minimum: int) -> tuple[int, ...]:
    value = params[key]
    ok = isinstance(value, tuple) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in value
    )
    if not ok or (n is not None and len(value) != n):
        count = f"{n} " if n is not None else ""
        raise OpError(f"parameter {key}={value!r} must be {count}integers >= {minimum}")
    return tuple(value)


def _choice(params: Params, key: str, choices: tuple[str, ...]) -> str:
    value = params[key]
    if value not in choices:
        raise OpError(f"parameter {key}={value!r} must be one of {', '.join(choices)}")
    return str(value)


def _rank(t: TensorType, rank: int, what: str) -> None:
    if t.rank != rank:
        raise OpError(f"{what} must be {rank}-D, got shape {list(t.shape)}")


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise OpError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def f32(value: float) -> float:
    """``value`` rounded to float32, as a Python float: the one form float parameters (a scalar
    constant, an epsilon) are stored in, so they survive the e-graph's integer encoding."""
    return float(np.float32(value))


def f32_bits(value: float) -> int:
    """The float32 bit pattern of ``value`` as a signed 32-bit integer: how a float parameter is
    an e-node's integer parameter and a rule's literal (``0.5`` is 1056964608).

    >>> f32_bits(0.5), from_f32_bits(f32_bits(0.5))
    (1056964608, 0.5)
    """
    return int(np.array(value, dtype=np.float32).view(np.int32))


def from_f32_bits(bits: int) -> float:
    """The float a :func:`f32_bits` pattern stands for."""
    return float(np.array(bits, dtype=np.int32).view(np.float32))


def _float(params: Params, key: str, *, positive: bool = False) -> float:
    value = params[key]
    ok = isinstance(value, float | int) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or (positive and value <= 0):
        kind = "a finite number > 0" if positive else "a finite number"
        raise OpError(f"parameter {key}={value!r} must be {kind}")
    if value != f32(value):
        raise OpError(f"parameter {key}={value!r} is not a float32 value (use ops.f32)")
    return float(value)


# ---------------------------------------------------------------------------------------------
# Sizes and padding (SEMANTICS.md §3)


def conv_out_size(size: int, kernel: int, stride: int, padding: str) -> int:
    """Output extent of a conv/pool along one dim: SAME ``ceil(H/s)``, VALID ``(H-k)//s + 1``."""
    if padding == "SAME":
        return (size + stride - 1) // stride
    return (size - kernel) // stride + 1


def same_padding(size: int, kernel: int, stride: int) -> int:
    """The symmetric per-side padding TASO passes to cuDNN for SAME (TensorFlow-style total)."""
    total = max(kernel - (stride if size % stride == 0 else size % stride), 0)
    return (total + 1) // 2


# ---------------------------------------------------------------------------------------------
# Inference functions


def _leaf(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    return (TensorType(_ints(params, "shape", None, minimum=1)),)


def _unary(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    return (inputs[0],)


def _elementwise(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    a, b = inputs
    rank = max(a.rank, b.rank)
    pa = (1,) * (rank - a.rank) + a.shape
    pb = (1,) * (rank - b.rank) + b.shape
    sa = ((),) * (rank - a.rank) + a.splits
    sb = ((),) * (rank - b.rank) + b.splits
    shape, splits = [], []
    for da, db, la, lb in zip(pa, pb, sa, sb, strict=True):
        if da != db and 1 not in (da, db):
            raise OpError("shapes are not broadcastable")
        shape.append(max(da, db))
        if da > 1 and db > 1:
            splits.append(la if la == lb else ())
        else:
            splits.append(la if da > 1 else lb)
    return (TensorType(tuple(shape), tuple(splits)),)


def _matmul(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    _choice(params, "activation", ACTIVATIONS)
    a, b = inputs
    if a.rank < 2 or a.rank != b.rank:
        raise OpError("matmul needs operands of equal rank >= 2")
    if a.shape[:-2] != b.shape[:-2]:
        raise OpError("matmul batch dims differ")
    if a.shape[-1] != b.shape[-2]:
        raise OpError(f"matmul inner dims differ ({a.shape[-1]} vs {b.shape[-2]})")
    batch = tuple(la if la == lb else () for la, lb in zip(a.splits, b.splits, strict=False))
    shape = a.shape[:-1] + b.shape[-1:]
    return (TensorType(shape, (*batch[: a.rank - 2], a.splits[-2], b.splits[-1])),)


def _conv2d(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    sh, sw = _ints(params, "stride", 2, minimum=1)
    padding = _choice(params, "padding", PADDINGS)
    _choice(params, "activation", ACTIVATIONS)
    x, w = inputs
    _rank(x, 4, "conv2d input")
    _rank(w, 4, "conv2d weight")
    n, c, h, wd = x.shape
    o, cw, kh, kw = w.shape
    if c % cw:
        raise OpError(f"input channels {c} not divisible by weight channels {cw}")
    groups = c // cw
    if o % groups:
        raise OpError(f"output channels {o} not divisible by groups {groups}")
    ho, wo = conv_out_size(h, kh, sh, padding), conv_out_size(wd, kw, sw, padding)
    if ho < 1 or wo < 1:
        raise OpError(f"kernel {kh}x{kw} larger than input {h}x{wd} with VALID padding")
    splits = (x.splits[0], w.splits[0], x.splits[2], x.splits[3])
    return (TensorType((n, o, ho, wo), splits),)


def _conv2d_bias(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    (out,) = _conv2d(params, inputs[:2])
    _bias(inputs[2], (1, out.shape[1], 1, 1), "conv2d_bias")
    return (out,)


def _linear(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    x, w = inputs
    _rank(w, 2, "linear weight")
    if x.rank < 2 or x.shape[-1] != w.shape[0]:
        raise OpError(f"linear needs x [..., {w.shape[0]}], got {list(x.shape)}")
    return (TensorType((*x.shape[:-1], w.shape[1]), (*x.splits[:-1], w.splits[1])),)


def _matmul_bias(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    (out,) = _matmul(params, inputs[:2])
    _bias(inputs[2], (out.shape[-1],), "matmul_bias")
    return (out,)


def _bias(b: TensorType, expected: Shape, op: str) -> None:
    """A fused bias is one value per output channel, in the one shape the op's rules spell:
    ``[1, O, 1, 1]`` for a conv (what an exporter's bias add broadcasts), ``[N]`` for a matmul."""
    if b.shape != expected:
        raise OpError(f"{op} bias must have shape {list(expected)}, got {list(b.shape)}")


def _pool(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    kh, kw = _ints(params, "kernel", 2, minimum=1)
    sh, sw = _ints(params, "stride", 2, minimum=1)
    padding = _choice(params, "padding", PADDINGS)
    _choice(params, "activation", ACTIVATIONS)
    (x,) = inputs
    _rank(x, 4, "pool input")
    n, c, h, w = x.shape
    ho, wo = conv_out_size(h, kh, sh, padding), conv_out_size(w, kw, sw, padding)
    if ho < 1 or wo < 1:
        raise OpError(f"kernel {kh}x{kw} larger than input {h}x{w} with VALID padding")
    return (TensorType((n, c, ho, wo), (x.splits[0], x.splits[1], (), ())),)


def _transpose(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    perm = _ints(params, "perm", None, minimum=0)
    (x,) = inputs
    if sorted(perm) != list(range(x.rank)):
        raise OpError(f"perm {list(perm)} is not a permutation of the {x.rank} dims")
    if not isinstance(params["shuffle"], bool):
        raise OpError("parameter shuffle must be a bool")
    return (TensorType(tuple(x.shape[p] for p in perm), tuple(x.splits[p] for p in perm)),)


def _reshape(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    shape = _ints(params, "shape", None, minimum=1)
    (x,) = inputs
    if math.prod(shape) != x.size:
        raise OpError(f"cannot reshape {x.size} elements to {list(shape)}")
    return (TensorType(shape),)


def _expand(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    shape = _ints(params, "shape", None, minimum=1)
    (x,) = inputs
    try:
        out = np.broadcast_shapes(x.shape, tuple(shape))
    except ValueError:
        raise OpError(f"cannot expand {list(x.shape)} to {list(shape)}") from None
    return (TensorType(tuple(int(d) for d in out)),)


def _concat(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    first = inputs[0]
    axis = _axis(_int(params, "axis", minimum=-first.rank), first.rank)
    for t in inputs[1:]:
        if t.rank != first.rank:
            raise OpError("concat inputs have different ranks")
        if any(
            d != e for i, (d, e) in enumerate(zip(t.shape, first.shape, strict=False)) if i != axis
        ):
            raise OpError(f"concat inputs differ outside axis {axis}")
    on_axis = list(first.splits[axis])
    offset = first.shape[axis]
    for t in inputs[1:]:
        on_axis += [p + offset for p in t.splits[axis]] + [offset]
        offset += t.shape[axis]
    splits = []
    for d in range(first.rank):
        if d == axis:
            splits.append(tuple(on_axis))
        else:
            same = all(t.splits[d] == first.splits[d] for t in inputs)
            splits.append(first.splits[d] if same else ())
    shape = (*first.shape[:axis], offset, *first.shape[axis + 1 :])
    return (TensorType(shape, tuple(splits)),)


def _split(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    (x,) = inputs
    axis = _axis(_int(params, "axis", minimum=-x.rank), x.rank)
    sizes = _ints(params, "sizes", None, minimum=1)
    if len(sizes) < 2 or sum(sizes) != x.shape[axis]:
        raise OpError(
            f"split sizes {list(sizes)} do not cover dim {axis} of size "
            f"{x.shape[axis]} in at least two pieces"
        )
    outs, lo = [], 0
    for size in sizes:
        hi = lo + size
        # Piece [lo, hi) keeps the boundaries strictly inside it, shifted (TASO SplitInfo::divide).
        inside = tuple(p - lo for p in x.splits[axis] if lo < p < hi)
        splits = (*x.splits[:axis], inside, *x.splits[axis + 1 :])
        outs.append(TensorType((*x.shape[:axis], size, *x.shape[axis + 1 :]), splits))
        lo = hi
    return tuple(outs)


def _enlarge(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    w, ref = inputs
    _rank(w, 4, "enlarge weight")
    _rank(ref, 4, "enlarge reference")
    if w.shape[2] > ref.shape[2] or w.shape[3] > ref.shape[3]:
        raise OpError(
            f"kernel {w.shape[2]}x{w.shape[3]} larger than reference {ref.shape[2]}x{ref.shape[3]}"
        )
    return (TensorType(w.shape[:2] + ref.shape[2:], (*w.splits[:2], (), ())),)


def _merge(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    count = _int(params, "count", minimum=1)
    (w,) = inputs
    _rank(w, 4, "merge weight")
    o, cw, kh, kw = w.shape
    return (TensorType((o, count * cw, kh, kw), (w.splits[0], (), w.splits[2], w.splits[3])),)


def _noop(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    return (TensorType(()),)


def _batchnorm(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    eps = params["epsilon"]
    if not isinstance(eps, float | int) or eps < 0:
        raise OpError(f"parameter epsilon={eps!r} must be a number >= 0")
    x = inputs[0]
    if x.rank < 2:
        raise OpError("batchnorm input must have a channel dim")
    for t in inputs[1:]:
        if t.shape != (x.shape[1],):
            raise OpError(f"batchnorm scale/bias/mean/var must be [{x.shape[1]}]")
    return (x,)


def _scalar(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    _float(params, "value")
    return (TensorType(()),)


def _last_axis(x: TensorType, op: str) -> int:
    if x.rank < 1:
        raise OpError(f"{op} needs an input of rank >= 1")
    return x.shape[-1]


def _reduce_last(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    (x,) = inputs
    _last_axis(x, "reducemean")
    return (TensorType((*x.shape[:-1], 1), (*x.splits[:-1], ())),)


def _softmax(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    _last_axis(inputs[0], "softmax")
    return (TensorType(inputs[0].shape),)


def _layernorm(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    _float(params, "epsilon", positive=True)
    x, gamma, beta = inputs
    n = _last_axis(x, "layernorm")
    for what, t in (("scale", gamma), ("bias", beta)):
        if t.shape != (n,):
            raise OpError(f"layernorm {what} must have shape [{n}], got {list(t.shape)}")
    return (TensorType(x.shape),)


def _skip_layernorm(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    _float(params, "epsilon", positive=True)
    x, skip, packed = inputs
    n = _last_axis(x, "skiplayernorm")
    if x.rank not in (2, 3):
        # onnxruntime's kernel refuses any other rank when it runs (measured, onnxruntime 1.32:
        # "input is expected to have 3 or 2 dimensions"); such a norm is left unfused.
        raise OpError(f"skiplayernorm takes an input of rank 2 or 3, got {list(x.shape)}")
    if skip.shape != x.shape:
        # onnxruntime's kernel takes equal shapes; a broadcast residual is left unfused.
        raise OpError(f"skiplayernorm skip {list(skip.shape)} differs from {list(x.shape)}")
    if packed.shape not in ((2 * n,), (3 * n,)):
        raise OpError(
            f"skiplayernorm scale and bias must be packed as [{2 * n}] (or [{3 * n}] with an "
            f"input bias), got {list(packed.shape)}"
        )
    return (TensorType(x.shape),)


def _bias_gelu(op: str) -> Callable[[Params, Sequence[TensorType]], tuple[TensorType, ...]]:
    """The type rule of a GELU with its bias (``op``: biasgelu, biasgelu_tanh): ``bias`` [N]."""

    def infer(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
        x, bias = inputs
        n = _last_axis(x, op)
        if bias.shape != (n,):
            raise OpError(f"{op} bias must have shape [{n}], got {list(bias.shape)}")
        return (TensorType(x.shape),)

    return infer


def _quick_gelu(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    _float(params, "alpha")
    return (inputs[0],)


def _scores_bias(op: str, bias: TensorType, scores: Shape) -> None:
    """An attention's additive mask must broadcast to its scores ``[B, H, S, T]``: a bias that
    would broadcast the scores up (or not at all) is another computation."""
    padded = (1,) * (4 - bias.rank) + bias.shape
    if bias.rank > 4 or any(x not in (1, y) for x, y in zip(padded, scores, strict=True)):
        raise OpError(f"{op} bias {list(bias.shape)} does not broadcast to {list(scores)}")


def _attention(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    _float(params, "scale", positive=True)
    q, kt, v, bias = inputs
    for what, t in (("q", q), ("kt", kt), ("v", v)):
        _rank(t, 4, f"attention {what}")
    b, h, s, d = q.shape
    if kt.shape[:2] != (b, h) or v.shape[:2] != (b, h):
        raise OpError(
            f"attention q {list(q.shape)}, kt {list(kt.shape)}, v {list(v.shape)} differ in "
            "batch or heads"
        )
    if kt.shape[2] != d or v.shape[2] != kt.shape[3]:
        raise OpError(
            f"attention needs q [B, H, S, D], kt [B, H, D, T], v [B, H, T, Dv]; got "
            f"{list(q.shape)}, {list(kt.shape)}, {list(v.shape)}"
        )
    _scores_bias("attention", bias, (b, h, s, kt.shape[3]))
    return (TensorType((b, h, s, v.shape[3]), (q.splits[0], q.splits[1], q.splits[2], ())),)


def _mha(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    _float(params, "scale", positive=True)
    heads = _int(params, "heads", minimum=1)
    x, w, b, bias = inputs
    _rank(x, 3, "mha x")
    _rank(w, 2, "mha w")
    batch, seq, embed = x.shape
    hidden, rem = divmod(w.shape[1], 3)
    if w.shape[0] != embed or rem or hidden % heads:
        raise OpError(
            f"mha needs x [B, S, E], w [E, 3 * {heads} * D], b [3 * {heads} * D]; got x "
            f"{list(x.shape)}, w {list(w.shape)}"
        )
    if b.shape != (w.shape[1],):
        raise OpError(f"mha b must have shape [{w.shape[1]}], got {list(b.shape)}")
    _scores_bias("mha", bias, (batch, heads, seq, seq))
    return (TensorType((batch, seq, hidden), (x.splits[0], x.splits[1], ())),)


def _repeatkv(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    count = _int(params, "count", minimum=1)
    (x,) = inputs
    _rank(x, 4, "repeatkv x")
    b, h, t, d = x.shape
    return (TensorType((b, h * count, t, d), (x.splits[0], (), x.splits[2], x.splits[3])),)


def _gqa(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    q, kt, v, bias = inputs
    for what, t in (("q", q), ("kt", kt), ("v", v)):
        _rank(t, 4, f"gqa {what}")
    heads, kv_heads = q.shape[1], kt.shape[1]
    if v.shape[1] != kv_heads or heads % kv_heads:
        raise OpError(
            f"gqa needs key/value heads that divide the query heads: q {list(q.shape)}, "
            f"kt {list(kt.shape)}, v {list(v.shape)}"
        )
    # attention with each key/value head repeated for its group of query heads
    count = Params(count=heads // kv_heads)
    kt_full, v_full = (_repeatkv(count, [t])[0] for t in (kt, v))
    return _attention(params, [q, kt_full, v_full, bias])


def _rmsnorm(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    _float(params, "epsilon", positive=True)
    x, scale = inputs
    n = _last_axis(x, "rmsnorm")
    if scale.shape != (n,):
        raise OpError(f"rmsnorm scale must have shape [{n}], got {list(scale.shape)}")
    return (TensorType(x.shape),)


def _channels(x: TensorType, op: str, *vectors: tuple[str, TensorType]) -> int:
    """The channels ``C`` of ``x`` ``[N, C, D1, ...]`` (rank 3 or more), which each of
    ``vectors`` (a scale, a bias) must hold one value of: shape ``[C]``."""
    if x.rank < 3:
        raise OpError(f"{op} needs x [N, C, D1, ...] of rank >= 3, got {list(x.shape)}")
    c = x.shape[1]
    for what, t in vectors:
        if t.shape != (c,):
            raise OpError(f"{op} {what} must have shape [{c}], got {list(t.shape)}")
    return c


def _instancenorm(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    _float(params, "epsilon", positive=True)
    x, scale, bias = inputs
    _channels(x, "instancenorm", ("scale", scale), ("bias", bias))
    return (TensorType(x.shape),)


def _groupnorm(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    _float(params, "epsilon", positive=True)
    groups = _int(params, "groups", minimum=1)
    x, scale, bias = inputs
    c = _channels(x, "groupnorm", ("scale", scale), ("bias", bias))
    if c % groups:
        raise OpError(f"groupnorm groups {groups} do not divide the {c} channels")
    return (TensorType(x.shape),)


def _slice(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    (x,) = inputs
    if x.rank < 1:
        raise OpError("slice needs an input of rank >= 1")
    axis = _int(params, "axis", minimum=0)
    start, end = _int(params, "start", minimum=0), _int(params, "end", minimum=1)
    step = _int(params, "step", minimum=1)
    if axis >= x.rank:
        raise OpError(f"axis {axis} out of range for rank {x.rank}")
    if not start < end <= x.shape[axis]:
        raise OpError(f"slice [{start}, {end}) is empty or outside dim {axis} of {list(x.shape)}")
    # The piece keeps the boundaries strictly inside it, shifted (as a split's pieces do); a
    # strided slice keeps none.
    inside = tuple(p - start for p in x.splits[axis] if start < p < end) if step == 1 else ()
    shape = (*x.shape[:axis], -(-(end - start) // step), *x.shape[axis + 1 :])
    return (TensorType(shape, (*x.splits[:axis], inside, *x.splits[axis + 1 :])),)


def _turnpairs(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    (x,) = inputs
    if _last_axis(x, "turnpairs") % 2:
        raise OpError(f"turnpairs needs an even last dim, got {list(x.shape)}")
    # the pairs are not a split of the last axis: its boundaries are gone
    return (TensorType(x.shape, (*x.splits[:-1], ())),)


def _repeat2(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    (x,) = inputs
    n = _last_axis(x, "repeat2")
    return (TensorType((*x.shape[:-1], 2 * n), (*x.splits[:-1], ())),)


def _rotary(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    interleaved = params["interleaved"]
    if interleaved not in (0, 1) or isinstance(interleaved, bool):
        raise OpError(f"parameter interleaved={interleaved!r} must be 0 or 1")
    x, cos, sin = inputs
    d = _last_axis(x, "rotary")
    if d % 2:
        raise OpError(f"rotary needs an even last dim, got {list(x.shape)}")
    half = d // 2
    for what, t in (("cos", cos), ("sin", sin)):
        if t.rank > x.rank or t.rank < 1 or t.shape[-1] != half:
            raise OpError(
                f"rotary {what} {list(t.shape)} must end in {half} (half of {list(x.shape)})"
            )
        padded = (1,) * (x.rank - t.rank) + t.shape[:-1]
        if any(a not in (1, b) for a, b in zip(padded, x.shape[:-1], strict=True)):
            # the fused kernel keeps x's shape: tables that would broadcast it up are refused
            raise OpError(f"rotary {what} {list(t.shape)} does not broadcast to {list(x.shape)}")
    # The type of the spelled-out form, x * [cos, cos] + [-x2, x1] * [sin, sin] (x1, x2 x's
    # halves; interleaved: x * repeat2(cos) + turnpairs(x) * repeat2(sin)), so that a rule's
    # two sides agree on the split history too.
    if interleaved:
        (cc,) = _repeat2(Params(), [cos])
        (ss,) = _repeat2(Params(), [sin])
        (turned,) = _turnpairs(Params(), [x])
        straight = _elementwise(Params(), [x, cc])[0]
        return _elementwise(Params(), [straight, _elementwise(Params(), [turned, ss])[0]])
    last = x.rank - 1
    x1 = _slice(Params(axis=last, start=0, end=half, step=1), [x])[0]
    x2 = _slice(Params(axis=last, start=half, end=d, step=1), [x])[0]
    rotated = _concat(Params(axis=last), [x2, x1])[0]
    (cc,) = _concat(Params(axis=cos.rank - 1), [cos, cos])
    (ss,) = _concat(Params(axis=sin.rank - 1), [sin, sin])
    return _elementwise(
        Params(), [_elementwise(Params(), [x, cc])[0], _elementwise(Params(), [rotated, ss])[0]]
    )


def _opaque(params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    if not isinstance(params["type"], str) or not params["type"]:
        raise OpError("opaque op needs a non-empty type name")
    try:
        json.loads(params["attrs"])
    except (TypeError, ValueError) as exc:
        raise OpError(f"opaque attrs must be a JSON string ({exc})") from None
    shapes = params["shapes"]
    if not isinstance(shapes, tuple) or not shapes:
        raise OpError("opaque op needs at least one output shape")
    out = []
    for s in shapes:
        if not isinstance(s, tuple) or not all(isinstance(d, int) and d >= 1 for d in s):
            raise OpError(f"opaque output shape {s!r} must be positive integers")
        out.append(TensorType(s))
    return tuple(out)


def _spec(
    name: str, arity: int | None, params: str, fn: Callable[..., Any], doc: str, min_arity: int = 0
) -> OpSpec:
    return OpSpec(name, arity, tuple(params.split()), fn, min_arity, doc)


#: Every operator of the language, by name (TENSAT's names; see SEMANTICS.md §2).
OPS: dict[str, OpSpec] = {
    s.name: s
    for s in [
        _spec("input", 0, "shape", _leaf, "a graph input"),
        _spec("weight", 0, "shape", _leaf, "a constant tensor"),
        _spec("ewadd", 2, "", _elementwise, "element-wise a + b (broadcasting)"),
        _spec("ewmul", 2, "", _elementwise, "element-wise a * b (broadcasting)"),
        _spec("matmul", 2, "activation", _matmul, "batched a @ b, then activation"),
        _spec(
            "conv2d",
            2,
            "stride padding activation",
            _conv2d,
            "grouped 2-D cross-correlation (groups = C / weight dim 1), then activation",
        ),
        _spec(
            "conv2d_bias",
            3,
            "stride padding activation",
            _conv2d_bias,
            "conv2d(x, w) + per-channel bias b [1, O, 1, 1], then activation: one fused kernel",
        ),
        _spec(
            "matmul_bias",
            3,
            "activation",
            _matmul_bias,
            "a @ w + bias b [N] on the last dim, then activation: one fused kernel (Gemm)",
        ),
        _spec("relu", 1, "", _unary, "max(x, 0)"),
        _spec("relu6", 1, "", _unary, "min(max(x, 0), 6) (ONNX Clip(0, 6))"),
        _spec("tanh", 1, "", _unary, "tanh(x)"),
        _spec("sigmoid", 1, "", _unary, "1 / (1 + exp(-x))"),
        _spec("dropout", 1, "", _unary, "identity at inference"),
        _spec("poolmax", 1, "kernel stride padding activation", _pool, "2-D max pooling"),
        _spec(
            "poolavg",
            1,
            "kernel stride padding activation",
            _pool,
            "2-D average pooling, padding excluded from the divisor",
        ),
        _spec("transpose", 1, "perm shuffle", _transpose, "permute dims: out[i] = in[perm[i]]"),
        _spec("reshape", 1, "shape", _reshape, "row-major reinterpretation"),
        _spec(
            "expand",
            1,
            "shape",
            _expand,
            "broadcast to a shape (ONNX Expand: the two shapes broadcast against each other)",
        ),
        _spec("concat", None, "axis", _concat, "concatenate along axis", min_arity=2),
        _spec("split", 1, "axis sizes", _split, "cut along axis into pieces of the given sizes"),
        _spec("enlarge", 2, "", _enlarge, "zero-pad kernel of w, centred, to ref's kernel size"),
        _spec(
            "merge",
            1,
            "count",
            _merge,
            "TASO merge_gconv: the weight of the same conv with groups / count",
        ),
        _spec("noop", None, "", _noop, "joins several graph outputs; no tensor", min_arity=1),
        # Transformer operators: the element-wise pieces exporters spell LayerNorm and GELU with,
        # and the fused kernels onnxruntime runs them as. Reductions and normalizations work on
        # the last axis only (what exporters emit; another axis stays opaque).
        _spec("scalar", 0, "value", _scalar, "a float32 constant of shape [] (rank 0)"),
        _spec("ewsub", 2, "", _elementwise, "element-wise a - b (broadcasting)"),
        _spec("ewdiv", 2, "", _elementwise, "element-wise a / b (broadcasting)"),
        _spec("ewpow", 2, "", _elementwise, "element-wise a ** b (broadcasting)"),
        _spec("sqrt", 1, "", _unary, "sqrt(x)"),
        _spec("erf", 1, "", _unary, "the error function erf(x)"),
        _spec("reducemean", 1, "", _reduce_last, "mean over the last axis, kept as size 1"),
        _spec("softmax", 1, "", _softmax, "softmax over the last axis"),
        _spec(
            "layernorm",
            3,
            "epsilon",
            _layernorm,
            "(x - mean) / sqrt(var + epsilon) * scale + bias over the last axis (ONNX "
            "LayerNormalization, axis -1)",
        ),
        _spec(
            "skiplayernorm",
            3,
            "epsilon",
            _skip_layernorm,
            "layernorm(x + skip) with scale and bias packed as one [2N] tensor (com.microsoft "
            "SkipLayerNormalization, input of rank 2 or 3): one fused kernel; packed [3N], "
            "layernorm(x + skip + b) with the input bias b third (a projection's bias: "
            "rules/transformer.rules)",
        ),
        _spec("gelu", 1, "", _unary, "x * (1 + erf(x / sqrt 2)) / 2 (com.microsoft Gelu)"),
        _spec(
            "gelu_tanh",
            1,
            "",
            _unary,
            "x * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2 (com.microsoft FastGelu)",
        ),
        _spec(
            "biasgelu",
            2,
            "",
            _bias_gelu("biasgelu"),
            "gelu(x + bias[N]) (com.microsoft BiasGelu): one fused kernel",
        ),
        _spec(
            "biasgelu_tanh",
            2,
            "",
            _bias_gelu("biasgelu_tanh"),
            "gelu_tanh(x + bias[N]) (com.microsoft FastGelu with its bias): one fused kernel",
        ),
        _spec(
            "quickgelu",
            1,
            "alpha",
            _quick_gelu,
            "x * sigmoid(alpha * x) (com.microsoft QuickGelu): CLIP's quick_gelu at alpha 1.702, "
            "SiLU (swish) at alpha 1",
        ),
        _spec(
            "nanzero",
            1,
            "",
            _unary,
            "x, with NaN replaced by 0 (ONNX Where(IsNaN(x), 0, x): torch's guard after the "
            "softmax of a masked attention, for rows masked entirely)",
        ),
        _spec(
            "same",
            1,
            "",
            _unary,
            "x itself: a rule's right-hand side that is one of its variables (the engine merges "
            "the match with that variable's class; never an e-node); no computation",
        ),
        _spec(
            "attention",
            4,
            "scale",
            _attention,
            "scaled dot-product attention on head-split tensors: nanzero(softmax(q @ kt * scale "
            "+ bias)) @ v with q [B, H, S, D], kt [B, H, D, T] (keys transposed), v [B, H, T, "
            "Dv], bias broadcast to [B, H, S, T] (ONNX Attention, opset 23): one fused kernel",
        ),
        _spec(
            "gqa",
            4,
            "scale",
            _gqa,
            "grouped-query attention: attention with kt [B, Hkv, D, T] and v [B, Hkv, T, Dv], "
            "key/value head j serving query heads j*H/Hkv to (j+1)*H/Hkv - 1 (ONNX Attention, "
            "opset 23, with fewer key/value heads): one fused kernel, no repeated copies",
        ),
        _spec(
            "mha",
            4,
            "heads scale",
            _mha,
            "multi-head self-attention with its input projections packed: x [B, S, E] @ w "
            "[E, 3 * H * D] + b gives q, k, v, each split into H heads of D, then attention "
            "(scale, bias broadcast to [B, H, S, S]) and the heads merged back, [B, S, H * D] "
            "(com.microsoft Attention): one kernel (rules/transformer.rules' attention-packed)",
        ),
        _spec(
            "linear",
            2,
            "",
            _linear,
            "x [..., K] @ w [K, N] over any leading dims (ONNX MatMul with a 2-D weight; "
            "rules/layout.rules' projection-as-linear)",
        ),
        _spec(
            "repeatkv",
            1,
            "count",
            _repeatkv,
            "each head of x [B, H, T, D] repeated count times in place: [B, H*count, T, D] "
            "(transformers' repeat_kv: Unsqueeze, Expand, Reshape): a copy",
        ),
        # LLM decoder operators (Llama, Qwen, Mistral): RMS normalization and rotary position
        # embedding as the fused kernels onnxruntime runs them as, and the pieces torch spells
        # them with (1 / x, -x, a slice of one axis).
        _spec("reciprocal", 1, "", _unary, "1 / x (ONNX Reciprocal)"),
        _spec("neg", 1, "", _unary, "-x (ONNX Neg)"),
        _spec("cos", 1, "", _unary, "cos(x) (ONNX Cos: rotary tables computed at run time)"),
        _spec("sin", 1, "", _unary, "sin(x) (ONNX Sin: rotary tables computed at run time)"),
        _spec(
            "slice",
            1,
            "axis start end step",
            _slice,
            "x[start:end:step] along axis (ONNX Slice, a positive step): a copy",
        ),
        _spec(
            "turnpairs",
            1,
            "",
            _turnpairs,
            "the pairs (x[2i], x[2i+1]) of the last axis turned to (-x[2i+1], x[2i]) (GPT-J's "
            "rotate_every_two: strided Slices, Neg, Unsqueeze, Concat, Reshape): a copy",
        ),
        _spec(
            "repeat2",
            1,
            "",
            _repeat2,
            "each entry of the last axis twice in place, [..., N] -> [..., 2N] (torch's "
            "repeat_interleave(x, 2, -1) of an interleaved rotary table): a copy",
        ),
        _spec(
            "rmsnorm",
            2,
            "epsilon",
            _rmsnorm,
            "x / sqrt(mean(x^2) + epsilon) * scale over the last axis, scale [N] (ONNX "
            "RMSNormalization, axis -1; com.microsoft SimplifiedLayerNormalization): one fused "
            "kernel",
        ),
        _spec(
            "rotary",
            3,
            "interleaved",
            _rotary,
            "rotary position embedding over the last axis, cos and sin [..., D/2] broadcast to "
            "x [..., D]: x * [cos, cos] + [-x2, x1] * [sin, sin] with x1, x2 x's halves "
            "(interleaved 0, Llama's rotate_half); interleaved 1 pairs x[2i] with x[2i+1] "
            "(GPT-J) (ONNX RotaryEmbedding, opset 23): one fused kernel",
        ),
        # Normalizations of images (diffusion UNets, GroupNorm): over each sample's channels
        # (instance) or groups of channels (group), all positions, then a scale and a bias
        # per channel.
        _spec(
            "instancenorm",
            3,
            "epsilon",
            _instancenorm,
            "x [N, C, D1, ...] normalized over D1, ... per sample and channel, (x - mean) / "
            "sqrt(var + epsilon) * scale + bias, scale and bias [C] (ONNX "
            "InstanceNormalization)",
        ),
        _spec(
            "groupnorm",
            3,
            "groups epsilon",
            _groupnorm,
            "x [N, C, D1, ...] normalized over each group of C / groups channels and D1, ... "
            "per sample, then * scale + bias per channel, scale and bias [C] (ONNX "
            "GroupNormalization, opset 21; torch.nn.GroupNorm): one fused op",
        ),
        _spec("batchnorm", 5, "epsilon", _batchnorm, "inference batch normalization"),
        _spec(
            "opaque",
            None,
            "type attrs shapes",
            _opaque,
            "an operator relsat does not rewrite, kept as is",
        ),
    ]
}


#: Float parameters that an e-node stores as float32 bits in ``p0`` (rules spell them as float
#: literals), by op.
FLOAT_PARAMS = {
    "scalar": "value",
    "layernorm": "epsilon",
    "skiplayernorm": "epsilon",
    "attention": "scale",
    "gqa": "scale",
    "rmsnorm": "epsilon",
    "quickgelu": "alpha",
    "instancenorm": "epsilon",
    "batchnorm": "epsilon",
}

#: Integer parameters that an e-node stores in ``p0``, ``p1``, … in this order (rules spell them
#: as integer literals), by op.
INT_PARAMS = {
    "slice": ("axis", "start", "end", "step"),
    "rotary": ("interleaved",),
    "repeatkv": ("count",),
}

#: Ops with an integer parameter in ``p0`` and a float one, as float32 bits, in ``p1``.
MIXED_PARAMS = {"mha": ("heads", "scale"), "groupnorm": ("groups", "epsilon")}


#: The integer attributes of ONNX operators relsat keeps opaque that rules may name, each with
#: ONNX's default: an opaque e-node stores them in ``p1``, ``p2``, … after its type's key, and
#: a rule spells them as the operator's leading integer arguments, ``(onnx.Flatten ?f ?m)``
#: (:func:`relsat.rewrite.rules.signature`), so that it matches the one attribute it means.
#: One attribute per type at most: a price signature leaves ``p1`` out (the attributes are in
#: ``s`` already), ``sql/cost/enode_signatures.sql``.
OPAQUE_INT_ATTRS: dict[str, tuple[tuple[str, int], ...]] = {
    "Flatten": (("axis", 1),),
    "Gather": (("axis", 0),),
    "GatherND": (("batch_dims", 0),),
}


def opaque_ints(qualified: str, attrs: Mapping[str, Any]) -> list[int]:
    """The attributes of :data:`OPAQUE_INT_ATTRS` an opaque node of type ``qualified`` has
    (``attrs``: its attributes), in order, ONNX's default where one is not given.

    >>> opaque_ints("Flatten", {"axis": 2}), opaque_ints("Gather", {}), opaque_ints("Where", {})
    ([2], [0], [])
    """
    return [int(attrs.get(name, default)) for name, default in OPAQUE_INT_ATTRS.get(qualified, ())]


def opaque_parts(s: str) -> tuple[str, str, str]:
    """An opaque e-node's string parameter ``type|attrs|shapes`` (as
    :func:`relsat.engine.egraph.encode_node` writes it) split into its type, its attributes'
    JSON and its output shapes' JSON (the attributes may hold ``|``: the shapes never do).

    >>> opaque_parts('Where|{"a":"x|y"}|[[2]]')
    ('Where', '{"a":"x|y"}', '[[2]]')
    """
    kind, rest = s.split("|", 1)
    attrs, shapes = rest.rsplit("|", 1)
    return kind, attrs, shapes


def opaque_type(type_name: str, attrs: str) -> str:
    """An opaque node's operator as rules name it: its ONNX type for the default domain (or no
    domain recorded: not an ONNX node), else ``domain.type`` (``com.microsoft.Gelu``), so that a
    rule's ``onnx.Gelu`` never matches a contrib operator of the same name. ``attrs``: the node's
    attributes as JSON text (the domain is ``_onnx.domain``)."""
    found = attrs.count('"domain":"')
    if found == 0 or (found == 1 and '"domain":""' in attrs):  # the default one: parse nothing
        return type_name
    domain = json.loads(attrs).get("_onnx", {}).get("domain", "")
    return type_name if domain in ("", "ai.onnx") else f"{domain}.{type_name}"


def opaque_key(qualified: str) -> int:
    """A 31-bit key of an opaque operator's type (:func:`opaque_type`): what an opaque e-node
    stores in ``p0``, so that a rule's ``(onnx.Where ...)`` is a literal test on ``p0`` like any
    other (the type itself stays in the e-node's ``s``). Two types share a key with odds of
    about 1 in 2**31 per pair; every operator ONNX defines has its own (a test checks), and the
    rule compiler refuses two rule types with one key.

    >>> opaque_key("Where") == opaque_key("Where") != opaque_key("IsNaN")
    True
    """
    digest = hashlib.blake2b(qualified.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


def int_params(op: str, p: Sequence[int]) -> Params | None:
    """The parameters of an op with a float parameter (:data:`FLOAT_PARAMS`) or integer
    parameters (:data:`INT_PARAMS`) from its e-node integers; None for other ops."""
    if op in FLOAT_PARAMS:
        return Params({FLOAT_PARAMS[op]: from_f32_bits(p[0])})
    if op in INT_PARAMS:
        return Params(dict(zip(INT_PARAMS[op], p, strict=False)))
    if op in MIXED_PARAMS:
        count, value = MIXED_PARAMS[op]
        return Params({count: int(p[0]), value: from_f32_bits(p[1])})
    return None


def param_ints(op: str, params: Params) -> list[int] | None:
    """The e-node integers of an op of :data:`FLOAT_PARAMS` or :data:`INT_PARAMS` (the inverse
    of :func:`int_params`); None for other ops.

    >>> param_ints("slice", Params(axis=3, start=0, end=32, step=1))
    [3, 0, 32, 1]
    """
    if op in FLOAT_PARAMS:
        return [f32_bits(params[FLOAT_PARAMS[op]])]
    if op in INT_PARAMS:
        return [int(params[k]) for k in INT_PARAMS[op]]
    if op in MIXED_PARAMS:
        count, value = MIXED_PARAMS[op]
        return [int(params[count]), f32_bits(params[value])]
    return None


def infer(op: str, params: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:
    """Output types of ``op`` applied to ``inputs``; raises :class:`OpError` when invalid."""
    spec = OPS.get(op)
    if spec is None:
        raise OpError(f"unknown op {op!r}")
    if spec.arity is not None and len(inputs) != spec.arity:
        raise OpError(f"{op} takes {spec.arity} inputs, got {len(inputs)}")
    if spec.arity is None and len(inputs) < spec.min_arity:
        raise OpError(f"{op} takes at least {spec.min_arity} inputs, got {len(inputs)}")
    missing = [p for p in spec.params if p not in params]
    extra = [p for p in params if p not in spec.params]
    if missing or extra:
        raise OpError(
            f"{op} parameters must be {list(spec.params)}; missing {missing}, unexpected {extra}"
        )
    return spec.infer(params, inputs)
