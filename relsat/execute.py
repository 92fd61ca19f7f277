"""The NumPy executor: run a graph on concrete (or random) values, compare two graphs numerically.

Semantics are those of ``reference/SEMANTICS.md`` §2–3 (TASO as TENSAT calls it). Inputs and
weights are looked up by name; missing ones are drawn by :func:`random_values`, deterministically
per (seed, name), so a graph and its rewrite see the same data:

>>> from relsat.graph import GraphBuilder
>>> b = GraphBuilder()
>>> x = b.input([2, 3], name="x")
>>> g = b.build(b.relu(x))
>>> [y.shape for y in run(g)]
[(2, 3)]
>>> allclose(g, g)
True

``merge`` (TASO ``merge_gconv``) has no value of its own: its meaning depends on the group count of
the conv that consumes it. The executor evaluates it lazily (:class:`_Lazy`): the consuming conv
materializes its weight with its own groups, and the weight-shaping ops in between (concat, enlarge,
split, merge) pass that group count down.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from relsat.errors import ExecutionError
from relsat.graph import Graph, Node, Ref
from relsat.ops import conv_out_size, same_padding

__all__ = [
    "Comparison",
    "OpaqueKernel",
    "allclose",
    "compare",
    "evaluate",
    "random_values",
    "register_opaque",
    "run",
]

#: An opaque op's NumPy kernel: ``fn(attrs, *inputs) -> outputs`` (one array per declared shape).
OpaqueKernel: TypeAlias = Callable[..., Sequence[np.ndarray]]

_OPAQUE: dict[str, OpaqueKernel] = {}


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


# ---------------------------------------------------------------------------------------------
# Values


def random_values(graph: Graph, *, seed: int = 0, dtype: Any = np.float64) -> dict[str, np.ndarray]:
    """One array per input and weight of ``graph``, by name, drawn deterministically per name.

    Inputs are N(0, 1). Weights of rank >= 2 are N(0, 1) / sqrt(fan-in) so deep nets stay in a
    sane range; rank-1 weights are uniform in [0.5, 1.5) so batchnorm variances are positive.
    Weights with real data in ``graph.values`` use it.
    """
    out: dict[str, np.ndarray] = {}
    for node in graph.nodes:
        if node.op not in ("input", "weight"):
            continue
        name = node.name or ""
        if name in graph.values:
            out[name] = np.array(graph.values[name], dtype=dtype)
        else:
            out[name] = _draw(name, node.shape, node.op == "weight", seed).astype(dtype)
    return out


def _draw(name: str, shape: tuple[int, ...], weight: bool, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if not weight:
        return rng.standard_normal(shape)
    if len(shape) >= 2:
        return rng.standard_normal(shape) / math.sqrt(math.prod(shape[1:]))
    return rng.uniform(0.5, 1.5, shape)


@dataclass(frozen=True)
class _Lazy:
    """A weight whose value depends on the group count of the conv that consumes it (merge)."""

    shape: tuple[int, ...]
    make: Callable[[int], np.ndarray]
    _cache: dict[int, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    def at(self, groups: int) -> np.ndarray:
        if groups not in self._cache:
            self._cache[groups] = self.make(groups)
        return self._cache[groups]


Value: TypeAlias = "np.ndarray | _Lazy"


def _at(value: Value, groups: int) -> np.ndarray:
    return value.at(groups) if isinstance(value, _Lazy) else value


# ---------------------------------------------------------------------------------------------
# Kernels: fn(node, args) -> outputs


def _activate(x: np.ndarray, activation: str) -> np.ndarray:
    if activation == "RELU":
        return np.maximum(x, 0)
    if activation == "TANH":
        return np.tanh(x)
    if activation == "SIGMOID":
        return 0.5 * (1 + np.tanh(0.5 * x))  # = 1 / (1 + exp(-x)), without overflow warnings
    return x


def _geometry(size: int, kernel: int, stride: int, padding: str) -> tuple[int, int, int]:
    """(pad before, padded extent actually read, output extent) along one spatial dim (§3)."""
    out = conv_out_size(size, kernel, stride, padding)
    before = same_padding(size, kernel, stride) if padding == "SAME" else 0
    # TASO declares ceil(H/s) rows; cuDNN with the symmetric pad may compute one more (even
    # kernels, stride 1). Reading only (out-1)*s + k padded rows keeps the declared ones.
    return before, (out - 1) * stride + kernel, out


def _windows(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int], padding: str,
             fill: float) -> np.ndarray:
    """Sliding windows of the padded input: a view ``[N, C, H', W', kh, kw]``."""
    n, c, h, w = x.shape
    top, need_h, _ = _geometry(h, kernel[0], stride[0], padding)
    left, need_w, _ = _geometry(w, kernel[1], stride[1], padding)
    if (top, left, need_h, need_w) != (0, 0, h, w):
        padded = np.full((n, c, need_h, need_w), fill, dtype=x.dtype)
        hh, ww = min(h, need_h - top), min(w, need_w - left)
        padded[:, :, top : top + hh, left : left + ww] = x[:, :, :hh, :ww]
        x = padded
    view = sliding_window_view(x, kernel, axis=(2, 3))
    return view[:, :, :: stride[0], :: stride[1]]


def _conv2d(node: Node, args: list[Value]) -> tuple[Value, ...]:
    x, w_value = args
    assert isinstance(x, np.ndarray)
    n, c = x.shape[:2]
    o, cw, kh, kw = w_value.shape
    groups = c // cw
    w = _at(w_value, groups)
    p = node.params
    win = _windows(x, (kh, kw), p["stride"], p["padding"], 0.0)  # [N, C, H', W', kh, kw]
    ho, wo = win.shape[2:4]
    # im2col per group: [g, Cw*kh*kw, N*H'*W'], then one batched matmul over the groups.
    cols = win.reshape(n, groups, cw, ho, wo, kh, kw).transpose(1, 2, 5, 6, 0, 3, 4)
    cols = cols.reshape(groups, cw * kh * kw, n * ho * wo)
    mat = w.reshape(groups, o // groups, cw * kh * kw)
    out = np.matmul(mat, cols)  # [g, O/g, N*H'*W']
    out = out.reshape(o, n, ho, wo).transpose(1, 0, 2, 3)
    return (_activate(np.ascontiguousarray(out), p["activation"]),)


def _pool(node: Node, args: list[Value]) -> tuple[Value, ...]:
    (x,) = args
    assert isinstance(x, np.ndarray)
    p = node.params
    kernel, stride, padding = p["kernel"], p["stride"], p["padding"]
    if node.op == "poolmax":
        out = _windows(x, kernel, stride, padding, -np.inf).max(axis=(4, 5))
    else:
        total = _windows(x, kernel, stride, padding, 0.0).sum(axis=(4, 5))
        # cuDNN's count-exclude-padding: divide by the number of real positions in each window.
        ones = np.ones((1, 1) + x.shape[2:], dtype=x.dtype)
        count = _windows(ones, kernel, stride, padding, 0.0).sum(axis=(4, 5))
        out = total / count
    return (_activate(out, p["activation"]),)


def _merged(w: np.ndarray, count: int, groups: int, node: Node) -> np.ndarray:
    """TASO merge_gconv, defined mathematically (§2): old groups ``groups``, new ``groups/count``."""
    o, cw = w.shape[:2]
    if groups < 1 or o % groups:
        raise ExecutionError(f"merged weight with {o} output channels cannot have {groups} groups "
                             "before merging", node=node.id, op=node.op)
    out = np.zeros((o, count, cw) + w.shape[2:], dtype=w.dtype)
    block = (np.arange(o) // (o // groups)) % count
    out[np.arange(o), block] = w
    return out.reshape(o, count * cw, *w.shape[2:])


def _merge(node: Node, args: list[Value]) -> tuple[Value, ...]:
    (w,) = args
    count = node.params["count"]
    o, cw, kh, kw = w.shape
    # The consumer's groups g' are the new ones; the weight was built for g' * count groups.
    return (_Lazy((o, count * cw, kh, kw),
                  lambda g: _merged(_at(w, g * count), count, g * count, node)),)


def _enlarge(node: Node, args: list[Value]) -> tuple[Value, ...]:
    w, ref = args  # only ref's shape matters

    def make(groups: int) -> np.ndarray:
        arr = _at(w, groups)
        out = np.zeros(arr.shape[:2] + ref.shape[2:], dtype=arr.dtype)
        top, left = (ref.shape[2] - arr.shape[2]) // 2, (ref.shape[3] - arr.shape[3]) // 2
        out[:, :, top : top + arr.shape[2], left : left + arr.shape[3]] = arr
        return out

    if isinstance(w, _Lazy):
        return (_Lazy(tuple(w.shape[:2]) + tuple(ref.shape[2:]), make),)
    return (make(1),)


def _concat(node: Node, args: list[Value]) -> tuple[Value, ...]:
    axis = node.params["axis"]
    if any(isinstance(a, _Lazy) for a in args):
        return (_Lazy(node.shape, lambda g: np.concatenate([_at(a, g) for a in args], axis)),)
    return (np.concatenate(args, axis),)  # type: ignore[arg-type]


def _split(node: Node, args: list[Value]) -> tuple[Value, ...]:
    (x,) = args
    axis, sizes = node.params["axis"], node.params["sizes"]
    cuts = np.cumsum(sizes)[:-1].tolist()
    if isinstance(x, _Lazy):
        return tuple(
            _Lazy(t.shape, lambda g, i=i: np.split(x.at(g), cuts, axis)[i])
            for i, t in enumerate(node.outputs)
        )
    return tuple(np.split(x, cuts, axis))


def _batchnorm(node: Node, args: list[Value]) -> tuple[Value, ...]:
    x, scale, bias, mean, var = (np.asarray(a) for a in args)
    shape = (1, -1) + (1,) * (x.ndim - 2)  # broadcast over channel dim 1
    eps = node.params["epsilon"]
    inv = scale.reshape(shape) / np.sqrt(var.reshape(shape) + eps)
    return ((x - mean.reshape(shape)) * inv + bias.reshape(shape),)


def _opaque(node: Node, args: list[Value]) -> tuple[Value, ...]:
    type_name = node.params["type"]
    fn = _OPAQUE.get(type_name)
    if fn is None:
        raise ExecutionError(f"no NumPy kernel registered for opaque type {type_name!r} "
                             "(see relsat.execute.register_opaque)", node=node.id, op="opaque")
    outs = tuple(fn(json.loads(node.params["attrs"]), *args))
    got = [np.shape(a) for a in outs]
    want = [t.shape for t in node.outputs]
    if got != want:
        raise ExecutionError(f"kernel for opaque type {type_name!r} returned shapes {got}, "
                             f"declared {want}", node=node.id, op="opaque")
    dtype = np.asarray(args[0]).dtype if args else np.float64
    return tuple(np.asarray(a, dtype=dtype) for a in outs)


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[Node, list[Value]], tuple[Value]]:
    return lambda node, args: (fn(args[0]),)  # type: ignore[arg-type]


_Kernel: TypeAlias = Callable[[Node, list[Value]], tuple[Value, ...]]

_KERNELS: dict[str, _Kernel] = {
    "ewadd": lambda n, a: (np.add(a[0], a[1]),),
    "ewmul": lambda n, a: (np.multiply(a[0], a[1]),),
    "matmul": lambda n, a: (_activate(np.matmul(a[0], a[1]), n.params["activation"]),),
    "conv2d": _conv2d,
    "relu": _unary(lambda x: _activate(x, "RELU")),
    "tanh": _unary(np.tanh),
    "sigmoid": _unary(lambda x: _activate(x, "SIGMOID")),
    "dropout": _unary(lambda x: x),
    "poolmax": _pool,
    "poolavg": _pool,
    "transpose": lambda n, a: (np.transpose(a[0], n.params["perm"]),),
    "reshape": lambda n, a: (np.reshape(a[0], n.params["shape"]),),
    "concat": _concat,
    "split": _split,
    "enlarge": _enlarge,
    "merge": _merge,
    "batchnorm": _batchnorm,
    "opaque": _opaque,
}

#: Ops that may read a lazy (merged) weight, and at which argument positions.
_LAZY_OK = {"conv2d": {1}, "concat": None, "split": None, "merge": None, "enlarge": {0, 1}}


# ---------------------------------------------------------------------------------------------
# Running


def _leaf_values(graph: Graph, values: Mapping[str, Any] | None, seed: int,
                 dtype: Any) -> dict[str, np.ndarray]:
    leaves = {n.name: n for n in graph.nodes if n.op in ("input", "weight")}
    given = dict(values or {})
    unknown = sorted(set(given) - set(leaves))
    if unknown:
        raise ExecutionError(f"values given for unknown tensors {unknown}; the graph has "
                             f"inputs/weights {sorted(k for k in leaves if k)}")
    out = {}
    for name, arr in given.items():
        node = leaves[name]
        arr = np.asarray(arr, dtype=dtype)
        if arr.shape != node.shape:
            raise ExecutionError(f"value for {name!r} has shape {list(arr.shape)}, the graph "
                                 f"declares {list(node.shape)}", node=node.id, op=node.op)
        out[name] = arr
    if len(out) < len(leaves):
        drawn = random_values(graph, seed=seed, dtype=dtype)
        out = {name: out.get(name, drawn[name]) for name in drawn}
    return out


def _flat_outputs(graph: Graph) -> list[Ref]:
    """Graph outputs with every noop replaced by its inputs, depth-first, in argument order."""
    flat: list[Ref] = []

    def visit(ref: Ref) -> None:
        node = graph.nodes[ref.node]
        if node.op == "noop":
            for r in node.inputs:
                visit(r)
        else:
            flat.append(ref)

    for r in graph.outputs:
        visit(r)
    return flat


def _execute(graph: Graph, leaves: Mapping[str, np.ndarray], keep: set[Ref] | None
             ) -> dict[Ref, Value]:
    """Evaluate every node; with ``keep`` given, drop other values once their last reader ran."""
    last_use: dict[int, int] = {}
    if keep is not None:
        for n in graph.nodes:
            for r in n.inputs:
                last_use[r.node] = n.id
    env: dict[Ref, Value] = {}
    for node in graph.nodes:
        if node.op in ("input", "weight"):
            env[Ref(node.id, 0)] = leaves[node.name or ""]
            continue
        if node.op == "noop":
            continue
        args = [env[r] for r in node.inputs]
        allowed = _LAZY_OK.get(node.op, set())
        for pos, a in enumerate(args):
            if isinstance(a, _Lazy) and allowed is not None and pos not in allowed:
                raise ExecutionError(f"argument {pos} is a merged weight, which only a conv "
                                     "weight (or concat/enlarge/split/merge) can read",
                                     node=node.id, op=node.op)
        for i, value in enumerate(_KERNELS[node.op](node, args)):
            env[Ref(node.id, i)] = value
        if keep is not None:
            for r in {r.node for r in node.inputs}:
                if last_use.get(r) == node.id:
                    for i in range(len(graph.nodes[r].outputs)):
                        if Ref(r, i) not in keep:
                            env.pop(Ref(r, i), None)
    return env


def evaluate(graph: Graph, values: Mapping[str, Any] | None = None, *, seed: int = 0,
             dtype: Any = np.float64) -> dict[Ref, np.ndarray]:
    """The value of every tensor of ``graph`` (noops and lazy merged weights left out)."""
    env = _execute(graph, _leaf_values(graph, values, seed, dtype), None)
    return {r: v for r, v in env.items() if isinstance(v, np.ndarray)}


def run(graph: Graph, values: Mapping[str, Any] | None = None, *, seed: int = 0,
        dtype: Any = np.float64) -> list[np.ndarray]:
    """Evaluate ``graph`` and return its outputs in order (noop outputs expand into their inputs).

    ``values`` maps input/weight names to arrays; missing ones come from :func:`random_values`.
    Raises :class:`~relsat.errors.ExecutionError` for unknown names or wrongly shaped values.
    """
    refs = _flat_outputs(graph)
    env = _execute(graph, _leaf_values(graph, values, seed, dtype), set(refs))
    outs = []
    for r in refs:
        value = env[r]
        if isinstance(value, _Lazy):
            raise ExecutionError("a merged weight cannot be a graph output", node=r.node,
                                 op="merge")
        outs.append(value)
    return outs


# ---------------------------------------------------------------------------------------------
# Comparing


@dataclass(frozen=True)
class Comparison:
    """The numerical comparison of two graphs' outputs (:func:`compare`)."""

    ok: bool
    max_abs: tuple[float, ...]  # per output: max |a - b|
    max_rel: tuple[float, ...]  # per output: max |a - b| / max(|a|, |b|)
    close: tuple[bool, ...]  # per output: |a - b| <= atol + rtol |b| everywhere
    rtol: float
    atol: float
    reason: str | None = None  # why the outputs could not be compared at all

    def report(self) -> str:
        """One line, plus one per differing output."""
        if self.reason is not None:
            return f"not comparable: {self.reason}"
        head = "equal" if self.ok else "DIFFERENT"
        worst_abs = max(self.max_abs, default=0.0)
        worst_rel = max(self.max_rel, default=0.0)
        lines = [f"{head} (rtol={self.rtol:g}, atol={self.atol:g}): {len(self.close)} outputs, "
                 f"max abs error {worst_abs:.3g}, max rel error {worst_rel:.3g}"]
        for i, (c, a, r) in enumerate(zip(self.close, self.max_abs, self.max_rel, strict=True)):
            if not c:
                lines.append(f"  output {i}: max abs error {a:.3g}, max rel error {r:.3g}")
        return "\n".join(lines)


def _shared_values(g1: Graph, g2: Graph, seed: int) -> tuple[dict[str, np.ndarray], ...]:
    v1 = random_values(g1, seed=seed)
    v2 = random_values(g2, seed=seed)
    in1 = {n.name: n.shape for n in g1.inputs}
    in2 = {n.name: n.shape for n in g2.inputs}
    if in1 != in2:
        raise ExecutionError(f"the graphs' inputs differ: {in1} vs {in2}")
    for name, arr in v2.items():
        if name in v1:
            if v1[name].shape != arr.shape:
                raise ExecutionError(f"tensor {name!r} has shape {list(v1[name].shape)} in the "
                                     f"first graph and {list(arr.shape)} in the second")
            v2[name] = v1[name]  # the first graph's real data wins
    return v1, v2


def compare(g1: Graph, g2: Graph, *, seed: int = 0, rtol: float = 1e-4,
            atol: float = 1e-5) -> Comparison:
    """Run both graphs on the same values (drawn by name) and compare their outputs.

    Inputs must agree in names and shapes (else :class:`~relsat.errors.ExecutionError`); weights
    are matched by name. Different output counts or shapes give ``ok=False`` with a ``reason``.
    """
    v1, v2 = _shared_values(g1, g2, seed)
    out1, out2 = run(g1, v1), run(g2, v2)
    reason = None
    if len(out1) != len(out2):
        reason = f"{len(out1)} outputs vs {len(out2)}"
    else:
        bad = [i for i, (a, b) in enumerate(zip(out1, out2, strict=True)) if a.shape != b.shape]
        if bad:
            i = bad[0]
            reason = f"output {i} has shape {list(out1[i].shape)} vs {list(out2[i].shape)}"
    if reason is not None:
        return Comparison(False, (), (), (), rtol, atol, reason)
    max_abs, max_rel, close = [], [], []
    for a, b in zip(out1, out2, strict=True):
        diff = np.abs(a - b)
        scale = np.maximum(np.abs(a), np.abs(b))
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = np.where(diff == 0, 0.0, diff / scale)
        max_abs.append(float(diff.max(initial=0.0)))
        max_rel.append(float(rel.max(initial=0.0)))
        close.append(bool(np.allclose(a, b, rtol=rtol, atol=atol)))
    return Comparison(all(close), tuple(max_abs), tuple(max_rel), tuple(close), rtol, atol)


def allclose(g1: Graph, g2: Graph, *, seed: int = 0, rtol: float = 1e-4,
             atol: float = 1e-5) -> bool:
    """Whether ``g1`` and ``g2`` compute the same outputs on the same random values."""
    return compare(g1, g2, seed=seed, rtol=rtol, atol=atol).ok
