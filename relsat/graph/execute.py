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

The kernels of the individual ops live in :mod:`relsat.graph.kernels` (``merge`` is evaluated lazily
there, with the group count of the conv that consumes it).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from relsat.errors import ExecutionError
from relsat.graph.graph import Graph, Node, Ref
from relsat.graph.kernels import Lazy, OpaqueKernel, Value, apply, register_opaque

__all__ = [
    "Comparison",
    "OpaqueKernel",
    "allclose",
    "compare",
    "compare_outputs",
    "evaluate",
    "random_value",
    "random_values",
    "register_opaque",
    "run",
]


# ---------------------------------------------------------------------------------------------
# Values


def random_values(graph: Graph, *, seed: int = 0, dtype: Any = np.float64) -> dict[str, np.ndarray]:
    """One array per input and weight of ``graph``, by name, drawn deterministically per name.

    Inputs are N(0, 1). Weights of rank >= 2 are N(0, 1) / sqrt(fan-in) so deep nets stay in a
    sane range; rank-1 weights are uniform in [0.5, 1.5) so batchnorm variances are positive.
    Weights with real data in ``graph.values`` use it. Values are drawn in ``dtype`` itself
    (float32 or float64; another dtype is drawn as float64, then cast), so a float32 tensor
    never passes through a float64 copy twice its size.
    """
    return {
        node.name or "": random_value(graph, node, seed=seed, dtype=dtype)
        for node in graph.nodes
        if node.op in ("input", "weight")
    }


def random_value(graph: Graph, node: Node, *, seed: int = 0, dtype: Any = np.float64) -> np.ndarray:
    """The array :func:`random_values` gives input or weight ``node`` of ``graph``, alone."""
    name = node.name or ""
    if name in graph.values:
        return np.array(graph.values[name], dtype=dtype)
    return _draw(name, node.shape, node.op == "weight", seed, dtype)


def _draw(name: str, shape: tuple[int, ...], weight: bool, seed: int, dtype: Any) -> np.ndarray:
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    kind = np.dtype(dtype)
    native = kind if kind in (np.float32, np.float64) else np.dtype(np.float64)
    if weight and len(shape) < 2:
        values = rng.random(shape, dtype=native)
        values += native.type(0.5)  # uniform in [0.5, 1.5)
    else:
        values = rng.standard_normal(shape, dtype=native)
        if weight:
            values /= native.type(math.sqrt(math.prod(shape[1:])))
    return values.astype(kind, copy=False)


# ---------------------------------------------------------------------------------------------
# Running


def _leaf_values(
    graph: Graph, values: Mapping[str, Any] | None, seed: int, dtype: Any
) -> dict[str, np.ndarray]:
    leaves = {n.name: n for n in graph.nodes if n.op in ("input", "weight")}
    given = dict(values or {})
    unknown = sorted(set(given) - set(leaves))
    if unknown:
        raise ExecutionError(
            f"values given for unknown tensors {unknown}; the graph has "
            f"inputs/weights {sorted(k for k in leaves if k)}"
        )
    out = {}
    for name, arr in given.items():
        node = leaves[name]
        arr = np.asarray(arr, dtype=dtype)
        if arr.shape != node.shape:
            raise ExecutionError(
                f"value for {name!r} has shape {list(arr.shape)}, the graph "
                f"declares {list(node.shape)}",
                node=node.id,
                op=node.op,
            )
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


def _execute(
    graph: Graph, leaves: Mapping[str, np.ndarray], keep: set[Ref] | None
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
        outs = apply(node, [env[r] for r in node.inputs])
        for i, value in enumerate(outs):
            env[Ref(node.id, i)] = value
        if keep is not None:
            for read in {r.node for r in node.inputs}:
                if last_use.get(read) == node.id:
                    for i in range(len(graph.nodes[read].outputs)):
                        if Ref(read, i) not in keep:
                            env.pop(Ref(read, i), None)
    return env


def evaluate(
    graph: Graph, values: Mapping[str, Any] | None = None, *, seed: int = 0, dtype: Any = np.float64
) -> dict[Ref, np.ndarray]:
    """The value of every tensor of ``graph`` (noops and lazy merged weights left out)."""
    env = _execute(graph, _leaf_values(graph, values, seed, dtype), None)
    return {r: v for r, v in env.items() if isinstance(v, np.ndarray)}


def run(
    graph: Graph, values: Mapping[str, Any] | None = None, *, seed: int = 0, dtype: Any = np.float64
) -> list[np.ndarray]:
    """Evaluate ``graph`` and return its outputs in order (noop outputs expand into their inputs).

    ``values`` maps input/weight names to arrays; missing ones come from :func:`random_values`.
    Raises :class:`~relsat.errors.ExecutionError` for unknown names or wrongly shaped values.
    """
    refs = _flat_outputs(graph)
    env = _execute(graph, _leaf_values(graph, values, seed, dtype), set(refs))
    outs = []
    for r in refs:
        value = env[r]
        if isinstance(value, Lazy):
            raise ExecutionError(
                "a merged weight cannot be a graph output", node=r.node, op="merge"
            )
        outs.append(value)
    return outs


# ---------------------------------------------------------------------------------------------
# Comparing


@dataclass(frozen=True)
class Comparison:
    """The numerical comparison of two lists of outputs (:func:`compare_outputs`): two graphs'
    in NumPy (:func:`compare`) or two models' in onnxruntime (:func:`relsat.onnx.verify`)."""

    ok: bool
    max_abs: tuple[float, ...]  # per output: max |a - b| (0 where a and b are equal, NaN in both)
    max_rel: tuple[float, ...]  # per output: max |a - b| / max(|a|, |b|)
    close: tuple[bool, ...]  # per output: within tolerance everywhere (:func:`compare_outputs`)
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
        lines = [
            f"{head} (rtol={self.rtol:g}, atol={self.atol:g}): {len(self.close)} outputs, "
            f"max abs error {worst_abs:.3g}, max rel error {worst_rel:.3g}"
        ]
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
                raise ExecutionError(
                    f"tensor {name!r} has shape {list(v1[name].shape)} in the "
                    f"first graph and {list(arr.shape)} in the second"
                )
            v2[name] = v1[name]  # the first graph's real data wins
    return v1, v2


def compare(
    g1: Graph, g2: Graph, *, seed: int = 0, rtol: float = 1e-4, atol: float = 1e-5
) -> Comparison:
    """Run both graphs on the same values (drawn by name) and compare their outputs.

    Inputs must agree in names and shapes (else :class:`~relsat.errors.ExecutionError`); weights
    are matched by name. Outputs are compared by :func:`compare_outputs` (``atol`` scaled by the
    output's magnitude, ``rtol`` per element); different output counts or shapes give ``ok=False``
    with a ``reason``.
    """
    v1, v2 = _shared_values(g1, g2, seed)
    return compare_outputs(run(g1, v1), run(g2, v2), rtol=rtol, atol=atol)


def compare_outputs(
    out1: Sequence[np.ndarray], out2: Sequence[np.ndarray], *, rtol: float, atol: float
) -> Comparison:
    """Two lists of output arrays compared position by position: the one tolerance rule of
    :func:`compare` (NumPy) and :func:`relsat.onnx.verify` (onnxruntime).

    ``ok`` iff both lists have the same length, every pair the same shape, and element-wise
    ``|a - b| <= atol * max(1, max|b|) + rtol * |b|`` (``max|b|`` over the finite elements of the
    second output) wherever ``a`` and ``b`` differ: ``atol`` scales with the output's magnitude,
    because rewrites reorder float sums and an element near zero of a large output is only as
    exact as that magnitude allows; ``rtol`` is relative to each element. Equal values match,
    equal infinities and NaN in both included; an infinity or NaN against anything else does
    not. Outputs that are not both floating point (ids, masks, booleans) must be equal.
    Different counts or shapes give ``ok=False`` with a ``reason``.

    >>> one = [np.array([1000.0, 0.0])]
    >>> compare_outputs(one, [np.array([1000.0, 0.005])], rtol=1e-4, atol=1e-5).ok
    True
    >>> compare_outputs([np.array([1, 2])], [np.array([1, 3])], rtol=1.0, atol=1.0).ok
    False
    """
    reason = None
    if len(out1) != len(out2):
        reason = f"{len(out1)} outputs vs {len(out2)}"
    else:
        for i, (a, b) in enumerate(zip(out1, out2, strict=True)):
            if a.shape != b.shape:
                reason = f"output {i} has shape {list(a.shape)} vs {list(b.shape)}"
                break
    if reason is not None:
        return Comparison(False, (), (), (), rtol, atol, reason)
    max_abs, max_rel, close = [], [], []
    for a, b in zip(out1, out2, strict=True):
        a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        same = (a64 == b64) | (np.isnan(a64) & np.isnan(b64))
        with np.errstate(invalid="ignore"):
            diff = np.where(same, 0.0, np.abs(a64 - b64))
        scale = np.maximum(np.abs(a64), np.abs(b64))
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = np.where(diff == 0, 0.0, diff / scale)
        max_abs.append(float(diff.max(initial=0.0)))
        max_rel.append(float(rel.max(initial=0.0)))
        finite = np.abs(b64[np.isfinite(b64)])
        tolerance = atol * max(1.0, float(finite.max(initial=0.0))) + rtol * np.abs(b64)
        exact = not (np.issubdtype(a.dtype, np.floating) and np.issubdtype(b.dtype, np.floating))
        close.append(bool(np.all(same)) if exact else bool(np.all(same | (diff <= tolerance))))
    return Comparison(all(close), tuple(max_abs), tuple(max_rel), tuple(close), rtol, atol)


def allclose(
    g1: Graph, g2: Graph, *, seed: int = 0, rtol: float = 1e-4, atol: float = 1e-5
) -> bool:
    """Whether ``g1`` and ``g2`` compute the same outputs on the same random values."""
    return compare(g1, g2, seed=seed, rtol=rtol, atol=atol).ok
