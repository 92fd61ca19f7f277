"""NumPy kernels of the operator language, one function per op, for the executor.

Semantics are those of ``reference/SEMANTICS.md`` §2–3. ``merge`` (TASO ``merge_gconv``) has no
value of its own: its meaning depends on the group count of the conv that consumes it, so its value
is a :class:`Lazy` weight that the consuming conv materializes with its own groups; the
weight-shaping ops in between (concat, enlarge, split, merge) pass that group count down.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from relsat.errors import ExecutionError
from relsat.graph.graph import Node
from relsat.graph.onnx_kernels import KERNELS as ONNX_KERNELS
from relsat.graph.ops import conv_out_size, same_padding

__all__ = ["Lazy", "OpaqueKernel", "Value", "apply", "has_kernel", "register_opaque"]

#: An opaque op's NumPy kernel: ``fn(attrs, *inputs) -> outputs`` (one array per declared shape).
OpaqueKernel: TypeAlias = Callable[..., Sequence[np.ndarray]]

_OPAQUE: dict[str, OpaqueKernel] = {}


def has_kernel(type_name: str) -> bool:
    """Whether opaque ops of type ``type_name`` have a NumPy kernel: a registered one, or one
    of the ONNX operators rules match (:data:`relsat.graph.onnx_kernels.KERNELS`)."""
    return type_name in _OPAQUE or type_name in ONNX_KERNELS


def register_opaque(type_name: str, fn: OpaqueKernel | None) -> OpaqueKernel | None:
    """Register the kernel of opaque ops of type ``type_name`` (``None`` removes it).

    ``fn(attrs, *inputs)`` gets the node's attributes as a dict and its input arrays, and returns
    a tuple with one array per declared output shape. Returns the kernel it replaces, if any.
    """
    previous = _OPAQUE.get(type_name)
    if fn is None:
        _OPAQUE.pop(type_name, None)
    else:
        _OPAQUE[type_name] = fn
    return previous


@dataclass(frozen=True)
class Lazy:
    """A weight whose value depends on the group count of the conv that consumes it (merge)."""

    shape: tuple[int, ...]
    make: Callable[[int], np.ndarray]
    _cache: dict[int, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    def at(self, groups: int) -> np.ndarray:
        if groups not in self._cache:
            self._cache[groups] = self.make(groups)
        return self._cache[groups]


Value: TypeAlias = "np.ndarray | Lazy"


def _at(value: Value, groups: int) -> Any:
    return value.at(groups) if isinstance(value, Lazy) else value


# ---------------------------------------------------------------------------------------------
# Kernels: fn(node, args) -> outputs


def _activate(x: np.ndarray, activation: str) -> np.ndarray:
    if activation == "RELU":
        return np.maximum(x, 0)
    if activation == "RELU6":
        return np.clip(x, 0, 6)
    if activation == "TANH":
        return np.tanh(x)
    if activation == "SIGMOID":
        e = np.exp(-np.abs(x))  # 1 / (1 + exp(-x)) without overflow for large negative x
        return np.where(x >= 0, 1 / (1 + e), e / (1 + e))
    return x


def _geometry(size: int, kernel: int, stride: int, padding: str) -> tuple[int, int, int]:
    """(pad before, padded extent actually read, output extent) along one spatial dim (§3)."""
    out = conv_out_size(size, kernel, stride, padding)
    before = same_padding(size, kernel, stride) if padding == "SAME" else 0
    # TASO declares ceil(H/s) rows; cuDNN with the symmetric pad may compute one more (even
    # kernels, stride 1). Reading only (out-1)*s + k padded rows keeps the declared ones.
    return before, (out - 1) * stride + kernel, out


def _padded(
    x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int], padding: str, fill: float
) -> np.ndarray:
    """``x`` padded (with ``fill``) and cropped to exactly the rows and columns the windows read."""
    n, c, h, w = x.shape
    top, need_h, _ = _geometry(h, kernel[0], stride[0], padding)
    left, need_w, _ = _geometry(w, kernel[1], stride[1], padding)
    if (top, left, need_h, need_w) == (0, 0, h, w):
        return x
    padded = np.full((n, c, need_h, need_w), fill, dtype=x.dtype)
    hh, ww = min(h, need_h - top), min(w, need_w - left)
    padded[:, :, top : top + hh, left : left + ww] = x[:, :, :hh, :ww]
    return padded


def _taps(
    xp: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int]
) -> Iterator[tuple[int, int, np.ndarray]]:
    """Per kernel position (i, j): the ``[N, C, H', W']`` view of the padded input it reads."""
    (kh, kw), (sh, sw) = kernel, stride
    ho, wo = (xp.shape[2] - kh) // sh + 1, (xp.shape[3] - kw) // sw + 1
    for i in range(kh):
        for j in range(kw):
            yield i, j, xp[:, :, i : i + (ho - 1) * sh + 1 : sh, j : j + (wo - 1) * sw + 1 : sw]


def _conv2d(node: Node, args: list[Value]) -> tuple[Value, ...]:
    return (_activate(_convolve(node, args[0], args[1]), node.params["activation"]),)


def _conv2d_bias(node: Node, args: list[Value]) -> tuple[Value, ...]:
    x, w, bias = args
    if isinstance(bias, Lazy):
        raise _lazy_misuse(node, 2)
    return (_activate(_convolve(node, x, w) + bias, node.params["activation"]),)


def _convolve(node: Node, x: Value, w_value: Value) -> np.ndarray:
    """The convolution of ``node`` (stride, padding; groups from the shapes), no activation."""
    if isinstance(x, Lazy):
        raise _lazy_misuse(node, 0)
    n, c = x.shape[:2]
    o, cw, kh, kw = w_value.shape
    groups = c // cw
    w = _at(w_value, groups)
    p = node.params
    xp = _padded(x, (kh, kw), p["stride"], p["padding"], 0.0)
    if cw == 1 and groups > 1:
        # Depthwise: a multiply-add per kernel position beats kh*kw-deep matmuls per channel.
        xr = np.repeat(xp, o // groups, axis=1) if o > groups else xp
        out: np.ndarray | None = None
        for i, j, tap in _taps(xr, (kh, kw), p["stride"]):
            term = tap * w[:, 0, i, j].reshape(1, o, 1, 1)
            out = term if out is None else np.add(out, term, out=out)
        assert out is not None
        return out
    win = sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, :: p["stride"][0], :: p["stride"][1]]
    ho, wo = win.shape[2:4]
    # im2col per group: [g, Cw*kh*kw, N*H'*W'], then one batched matmul over the groups.
    cols = win.reshape(n, groups, cw, ho, wo, kh, kw).transpose(1, 2, 5, 6, 0, 3, 4)
    cols = cols.reshape(groups, cw * kh * kw, n * ho * wo)
    mat = w.reshape(groups, o // groups, cw * kh * kw)
    out = np.matmul(mat, cols)  # [g, O/g, N*H'*W']
    out = out.reshape(o, n, ho, wo).transpose(1, 0, 2, 3)
    return np.ascontiguousarray(out)


def _pool(node: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    (x,) = args
    p = node.params
    kernel, stride, padding = p["kernel"], p["stride"], p["padding"]
    is_max = node.op == "poolmax"
    xp = _padded(x, kernel, stride, padding, -np.inf if is_max else 0.0)
    out: np.ndarray | None = None
    for _, _, tap in _taps(xp, kernel, stride):
        if out is None:
            out = tap.copy()
        elif is_max:
            np.maximum(out, tap, out=out)
        else:
            out += tap
    assert out is not None
    if not is_max:
        # cuDNN's count-exclude-padding: divide by the number of real positions in each window.
        counts = [
            _real_counts(size, k, s, padding)
            for size, k, s in zip(x.shape[2:], kernel, stride, strict=True)
        ]
        out /= np.outer(*counts).astype(x.dtype)
    return (_activate(out, p["activation"]),)


def _real_counts(size: int, kernel: int, stride: int, padding: str) -> np.ndarray:
    """Per output position along one dim: how many of its window's rows are real (not padding)."""
    before, _, out = _geometry(size, kernel, stride, padding)
    start = np.arange(out) * stride - before
    return np.minimum(start + kernel, size) - np.maximum(start, 0)


def _merged(w: Any, count: int, groups: int, node: Node, xp: Any = np) -> Any:
    """TASO merge_gconv defined mathematically (§2): ``groups`` before merging. ``xp`` is the
    array module (NumPy here, CuPy in :mod:`relsat.gpu.executor`)."""
    o, cw = w.shape[:2]
    if groups < 1 or o % groups:
        raise ExecutionError(
            f"merged weight with {o} output channels cannot have {groups} groups before merging",
            node=node.id,
            op=node.op,
        )
    out = xp.zeros((o, count, cw, *w.shape[2:]), dtype=w.dtype)
    block = (xp.arange(o) // (o // groups)) % count
    out[xp.arange(o), block] = w
    return out.reshape(o, count * cw, *w.shape[2:])


def _merge(node: Node, args: list[Value]) -> tuple[Value, ...]:
    (w,) = args
    count = node.params["count"]
    o, cw, kh, kw = w.shape
    # The consumer's groups g' are the new ones; the weight was built for g' * count groups.
    return (
        Lazy((o, count * cw, kh, kw), lambda g: _merged(_at(w, g * count), count, g * count, node)),
    )


def _enlarge(node: Node, args: list[Value]) -> tuple[Value, ...]:
    w, ref = args  # only ref's shape matters

    def make(groups: int) -> np.ndarray:
        arr = _at(w, groups)
        out = np.zeros(arr.shape[:2] + ref.shape[2:], dtype=arr.dtype)
        top, left = (ref.shape[2] - arr.shape[2]) // 2, (ref.shape[3] - arr.shape[3]) // 2
        out[:, :, top : top + arr.shape[2], left : left + arr.shape[3]] = arr
        return out

    if isinstance(w, Lazy):
        return (Lazy(tuple(w.shape[:2]) + tuple(ref.shape[2:]), make),)
    return (make(1),)


def _concat(node: Node, args: list[Value]) -> tuple[Value, ...]:
    axis = node.params["axis"]
    if any(isinstance(a, Lazy) for a in args):
        return (Lazy(node.shape, lambda g: np.concatenate([_at(a, g) for a in args], axis)),)
    return (np.concatenate(args, axis),)  # type: ignore[arg-type]


def _split(node: Node, args: list[Value]) -> tuple[Value, ...]:
    (x,) = args
    axis, sizes = node.params["axis"], node.params["sizes"]
    cuts = np.cumsum(sizes)[:-1].tolist()
    if isinstance(x, Lazy):
        lazy = x

        def piece(i: int) -> Callable[[int], np.ndarray]:
            return lambda g: np.split(lazy.at(g), cuts, axis)[i]

        return tuple(Lazy(t.shape, piece(i)) for i, t in enumerate(node.outputs))
    return tuple(np.split(x, cuts, axis))


def _batchnorm(node: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    x, scale, bias, mean, var = args
    shape = (1, -1) + (1,) * (x.ndim - 2)  # broadcast over channel dim 1
    eps = node.params["epsilon"]
    inv = scale.reshape(shape) / np.sqrt(var.reshape(shape) + eps)
    return ((x - mean.reshape(shape)) * inv + bias.reshape(shape),)


def _opaque(node: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    type_name = node.params["type"]
    fn = _OPAQUE.get(type_name) or ONNX_KERNELS.get(type_name)
    if fn is None:
        raise ExecutionError(
            f"no NumPy kernel registered for opaque type {type_name!r} "
            "(see relsat.graph.execute.register_opaque)",
            node=node.id,
            op="opaque",
        )
    outs = tuple(fn(json.loads(node.params["attrs"]), *args))
    got = [np.shape(a) for a in outs]
    want = [t.shape for t in node.outputs]
    if got != want:
        raise ExecutionError(
            f"kernel for opaque type {type_name!r} returned shapes {got}, declared {want}",
            node=node.id,
            op="opaque",
        )
    dtype = args[0].dtype if args else np.float64
    return tuple(np.asarray(a, dtype=dtype) for a in outs)


def _erf(x: np.ndarray) -> np.ndarray:
    """The error function, element-wise, in the input's precision (``math.erf`` per element:
    NumPy has no erf, and SciPy is not a dependency)."""
    x = np.asarray(x)
    return np.vectorize(math.erf, otypes=[x.dtype if x.dtype.kind == "f" else np.float64])(x)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _normalize(x: np.ndarray, epsilon: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    return centred / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + epsilon)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layernorm(node: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    x, scale, bias = args
    return (_normalize(x, node.params["epsilon"]) * scale + bias,)


def _skiplayernorm(node: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    x, skip, packed = args
    n = x.shape[-1]
    summed = x + skip if packed.shape[0] == 2 * n else x + skip + packed[2 * n :]
    return (_normalize(summed, node.params["epsilon"]) * packed[:n] + packed[n : 2 * n],)


def _nanzero(x: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x), np.zeros((), x.dtype), x)


def _attention(node: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    q, kt, v, bias = args
    with np.errstate(invalid="ignore"):  # a row masked entirely: -inf - -inf, then 0
        probs = _nanzero(_softmax(np.matmul(q, kt) * node.params["scale"] + bias))
    return (np.matmul(probs, v),)


def _linear(node: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    return (np.matmul(args[0], args[1]),)


def _mha(node: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    x, w, b, bias = args
    batch, seq, _ = x.shape
    heads = node.params["heads"]
    q, k, v = np.split(np.matmul(x, w) + b, 3, axis=-1)
    q, k, v = (t.reshape(batch, seq, heads, -1).transpose(0, 2, 1, 3) for t in (q, k, v))
    (out,) = _attention(node, [q, k.transpose(0, 1, 3, 2), v, bias])  # mha's own scale
    return (out.transpose(0, 2, 1, 3).reshape(batch, seq, -1),)


def _gqa(node: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    q, kt, v, bias = args
    count = q.shape[1] // kt.shape[1]
    full = [np.repeat(t, count, axis=1) for t in (kt, v)]
    return _attention(node, [q, *full, bias])


def _rmsnorm(node: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    x, scale = args
    mean_square = (x * x).mean(axis=-1, keepdims=True)
    return (x / np.sqrt(mean_square + node.params["epsilon"]) * scale,)


def _channel_view(v: np.ndarray, rank: int) -> np.ndarray:
    """A per-channel ``[C]`` vector as ``[C, 1, ...]``: broadcast over x ``[N, C, D1, ...]``."""
    return v.reshape(v.shape + (1,) * (rank - 2))


def _instancenorm(node: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    x, scale, bias = args
    flat = x.reshape(*x.shape[:2], -1)  # each sample's channel over all its positions
    normed = _normalize(flat, node.params["epsilon"]).reshape(x.shape)
    return (normed * _channel_view(scale, x.ndim) + _channel_view(bias, x.ndim),)


def _groupnorm(node: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    x, scale, bias = args
    flat = x.reshape(x.shape[0], node.params["groups"], -1)  # each sample's group of channels
    normed = _normalize(flat, node.params["epsilon"]).reshape(x.shape)
    return (normed * _channel_view(scale, x.ndim) + _channel_view(bias, x.ndim),)


def _slice(node: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    p = node.params
    index = [slice(None)] * args[0].ndim
    index[p["axis"]] = slice(p["start"], p["end"], p["step"])
    return (args[0][tuple(index)],)


def _rotary(node: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    x, cos, sin = args
    half = x.shape[-1] // 2
    if node.params["interleaved"]:  # GPT-J: pairs (x[2i], x[2i+1]), tables repeated per pair
        rotated = np.stack([-x[..., 1::2], x[..., 0::2]], axis=-1).reshape(x.shape)
        cos, sin = np.repeat(cos, 2, axis=-1), np.repeat(sin, 2, axis=-1)
    else:  # Llama's rotate_half: halves (x1, x2) become (-x2, x1), tables concatenated twice
        rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        cos, sin = np.concatenate([cos, cos], axis=-1), np.concatenate([sin, sin], axis=-1)
    return (x * cos + rotated * sin,)


def _turnpairs(node: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    (x,) = args
    return (np.stack([-x[..., 1::2], x[..., 0::2]], axis=-1).reshape(x.shape),)


def _scalar(node: Node, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    return (np.array(node.params["value"], dtype=np.float64),)


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> _ArrayKernel:
    return lambda node, args: (fn(args[0]),)


def _lazy_misuse(node: Node, pos: int) -> ExecutionError:
    return ExecutionError(
        f"argument {pos} is a merged weight, which only a conv weight "
        "(directly or through concat/enlarge/split/merge) can read",
        node=node.id,
        op=node.op,
    )


_ArrayKernel: TypeAlias = Callable[[Node, list[np.ndarray]], tuple[np.ndarray, ...]]
_WeightKernel: TypeAlias = Callable[[Node, list[Value]], tuple[Value, ...]]

#: Kernels of ops on plain arrays.
_KERNELS: dict[str, _ArrayKernel] = {
    "ewadd": lambda n, a: (np.add(a[0], a[1]),),
    "ewmul": lambda n, a: (np.multiply(a[0], a[1]),),
    "matmul": lambda n, a: (_activate(np.matmul(a[0], a[1]), n.params["activation"]),),
    "matmul_bias": lambda n, a: (_activate(np.matmul(a[0], a[1]) + a[2], n.params["activation"]),),
    "relu": _unary(lambda x: _activate(x, "RELU")),
    "relu6": _unary(lambda x: _activate(x, "RELU6")),
    "tanh": _unary(np.tanh),
    "sigmoid": _unary(lambda x: _activate(x, "SIGMOID")),
    "dropout": _unary(lambda x: x),
    "poolmax": _pool,
    "poolavg": _pool,
    "transpose": lambda n, a: (np.transpose(a[0], n.params["perm"]),),
    "reshape": lambda n, a: (np.reshape(a[0], n.params["shape"]),),
    "expand": lambda n, a: (
        np.array(np.broadcast_to(a[0], np.broadcast_shapes(a[0].shape, n.params["shape"]))),
    ),
    "batchnorm": _batchnorm,
    "opaque": _opaque,
    "scalar": _scalar,
    "ewsub": lambda n, a: (np.subtract(a[0], a[1]),),
    "ewdiv": lambda n, a: (np.divide(a[0], a[1]),),
    "ewpow": lambda n, a: (np.power(a[0], a[1]),),
    "sqrt": _unary(np.sqrt),
    "erf": _unary(_erf),
    "reducemean": lambda n, a: (a[0].mean(axis=-1, keepdims=True),),
    "softmax": _unary(_softmax),
    "layernorm": _layernorm,
    "skiplayernorm": _skiplayernorm,
    "gelu": _unary(_gelu),
    "gelu_tanh": _unary(_gelu_tanh),
    "biasgelu": lambda n, a: (_gelu(a[0] + a[1]),),
    "biasgelu_tanh": lambda n, a: (_gelu_tanh(a[0] + a[1]),),
    "quickgelu": lambda n, a: (a[0] * _activate(n.params["alpha"] * a[0], "SIGMOID"),),
    "nanzero": _unary(_nanzero),
    "same": _unary(lambda x: x),
    "attention": _attention,
    "gqa": _gqa,
    "mha": _mha,
    "linear": _linear,
    "repeatkv": lambda n, a: (np.repeat(a[0], n.params["count"], axis=1),),
    "reciprocal": _unary(np.reciprocal),
    "neg": _unary(np.negative),
    "turnpairs": _turnpairs,
    "repeat2": lambda n, a: (np.repeat(a[0], 2, axis=-1),),
    "cos": _unary(np.cos),
    "sin": _unary(np.sin),
    "slice": _slice,
    "rmsnorm": _rmsnorm,
    "rotary": _rotary,
    "instancenorm": _instancenorm,
    "groupnorm": _groupnorm,
}

#: Kernels of ops that may read (and pass on) a lazy merged weight.
_WEIGHT_KERNELS: dict[str, _WeightKernel] = {
    "conv2d": _conv2d,
    "conv2d_bias": _conv2d_bias,
    "concat": _concat,
    "split": _split,
    "enlarge": _enlarge,
    "merge": _merge,
}


def apply(node: Node, args: list[Value]) -> tuple[Value, ...]:
    """The outputs of ``node`` given its argument values."""
    if node.op in _WEIGHT_KERNELS:
        return _WEIGHT_KERNELS[node.op](node, args)
    arrays = []
    for pos, a in enumerate(args):
        if isinstance(a, Lazy):
            raise _lazy_misuse(node, pos)
        arrays.append(a)
    return _KERNELS[node.op](node, arrays)
