"""The GPU executor: a whole :class:`~relsat.graph.graph.Graph` on an NVIDIA GPU, and its real
runtime.

Values are CuPy fp32 arrays. Element-wise ops, concat, split, reshape, transpose, enlarge, merge
and batchnorm run in CuPy; matmul (cuBLAS), conv2d, conv2d_bias and the pools run through
PyTorch's cuBLAS and cuDNN paths on the same buffers (DLPack, no copies); the other fused and
transformer operators (Gemm, LayerNorm, GELU, attention, ...) run as PyTorch's kernels
(:mod:`relsat.gpu.fused`).
``opaque`` has no GPU kernel (:class:`~relsat.errors.ExecutionError`). The semantics are
:mod:`relsat.graph.kernels`' (SAME padding as TASO passes it to cuDNN, cropped to the declared
size; grouped conv; average pooling excludes the padding; ``merge`` materialized with the group
count of the conv that consumes it).

* :func:`run_gpu` runs a graph and copies its outputs back (compare with :func:`relsat.run`);
* :func:`time_graph` is TASO's end-to-end measurement (100 warm-ups, then 100 timed runs between
  two CUDA events, ms per run), weight-only subgraphs evaluated once beforehand by default.
* :class:`~relsat.gpu.device.Gpu` (:func:`~relsat.gpu.device.load_gpu`, re-exported here) holds
  the loaded libraries and the op primitives (:mod:`relsat.gpu.device`).

Runs are eager Python: each op costs a few microseconds of host time to launch, so a graph of
many tiny ops is host-bound; :class:`GraphTiming` gives the wall time beside the GPU time, and
with ``cuda_graph=True`` the time of the run captured once as a CUDA graph and replayed (the
GPU's own time; CuPy's and PyTorch's kernels are captured on one stream).
No CUDA library is imported until a function needs it; without a GPU they raise
:class:`~relsat.gpu.measure.GpuUnavailableError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from relsat.errors import ExecutionError
from relsat.gpu import fused
from relsat.gpu.device import Gpu, load_gpu
from relsat.graph.execute import _flat_outputs, _leaf_values
from relsat.graph.graph import Graph, Node, Ref
from relsat.graph.kernels import Lazy, _at, _merged

__all__ = [
    "Gpu",
    "GraphTiming",
    "load_gpu",
    "op_times",
    "run_gpu",
    "time_graph",
    "time_graph_detail",
]

# ---------------------------------------------------------------------------------------------
# The executor


def _apply(gpu: Gpu, node: Node, args: list[Any]) -> tuple[Any, ...]:
    """The outputs of ``node`` (CuPy arrays, or :class:`~relsat.graph.kernels.Lazy` merged
    weights)."""
    cp, p, op = gpu.cp, node.params, node.op
    if op in ("conv2d", "conv2d_bias"):
        x, w, *bias = args
        if isinstance(x, Lazy) or any(isinstance(b, Lazy) for b in bias):
            raise ExecutionError("a merged weight cannot be a conv input", node=node.id, op=op)
        groups = x.shape[1] // w.shape[1]
        conv = (x, _at(w, groups), p["stride"], p["padding"], p["activation"])
        return (gpu.conv2d(*conv, *bias),)  # conv2d_bias passes its bias, the last argument
    if op in ("merge", "enlarge", "concat", "split"):
        return _weight_op(gpu, node, args)
    for pos, a in enumerate(args):
        if isinstance(a, Lazy):
            raise ExecutionError(
                f"argument {pos} is a merged weight, which only a conv weight can read",
                node=node.id,
                op=op,
            )
    if op == "ewadd":
        return (cp.add(args[0], args[1]),)
    if op == "ewmul":
        return (cp.multiply(args[0], args[1]),)
    if op == "matmul":
        return (gpu.matmul(args[0], args[1], p["activation"]),)
    if op in ("relu", "tanh", "sigmoid"):
        return (gpu.activate(args[0], op.upper()),)
    if op == "dropout":
        return (args[0],)
    if op in ("poolmax", "poolavg"):
        return (gpu.pool(args[0], op, p["kernel"], p["stride"], p["padding"], p["activation"]),)
    if op == "transpose":
        return (cp.transpose(args[0], p["perm"]),)
    if op == "reshape":
        return (cp.reshape(args[0], p["shape"]),)
    if op == "expand":
        out = np.broadcast_shapes(args[0].shape, tuple(p["shape"]))
        return (cp.ascontiguousarray(cp.broadcast_to(args[0], out)),)
    if op == "batchnorm":
        x, scale, bias, mean, var = args
        return (gpu.batchnorm(x, scale, bias, mean, var, float(p["epsilon"])),)
    if op == "scalar":
        return (cp.asarray(p["value"], dtype=cp.float32),)
    kernel = fused.KERNELS.get(op)
    if kernel is not None:  # PyTorch's kernel on the same buffers (relsat.gpu.fused)
        outs = kernel(gpu.torch, node, [gpu.t(a) for a in args])
        return tuple(cp.from_dlpack(o) for o in outs)
    raise ExecutionError(f"no GPU kernel for {op!r}", node=node.id, op=op)


def _weight_op(gpu: Gpu, node: Node, args: list[Any]) -> tuple[Any, ...]:
    """concat, split, enlarge and merge, which may read and pass on a lazy merged weight."""
    cp, p, op = gpu.cp, node.params, node.op
    if op == "merge":
        (w,) = args
        count = p["count"]
        o, cw, kh, kw = w.shape
        return (
            Lazy(
                (o, count * cw, kh, kw),
                lambda g: _merged(_at(w, g * count), count, g * count, node, gpu.cp),
            ),
        )
    if op == "enlarge":
        w, ref = args

        def make(groups: int) -> Any:
            arr = _at(w, groups)
            out = cp.zeros(tuple(arr.shape[:2]) + tuple(ref.shape[2:]), dtype=arr.dtype)
            top, left = (ref.shape[2] - arr.shape[2]) // 2, (ref.shape[3] - arr.shape[3]) // 2
            out[:, :, top : top + arr.shape[2], left : left + arr.shape[3]] = arr
            return out

        if isinstance(w, Lazy):
            return (Lazy(tuple(w.shape[:2]) + tuple(ref.shape[2:]), make),)
        return (make(1),)
    if op == "concat":
        axis = p["axis"]
        if any(isinstance(a, Lazy) for a in args):
            return (Lazy(node.shape, lambda g: cp.concatenate([_at(a, g) for a in args], axis)),)
        return (cp.concatenate(args, axis),)
    (x,) = args  # split
    axis, sizes = p["axis"], p["sizes"]
    cuts = np.cumsum(sizes)[:-1].tolist()
    if isinstance(x, Lazy):
        lazy = x

        def piece(i: int) -> Callable[[int], Any]:
            return lambda g: cp.split(lazy.at(g), cuts, axis)[i]

        return tuple(Lazy(t.shape, piece(i)) for i, t in enumerate(node.outputs))
    return tuple(cp.split(x, cuts, axis))


@dataclass
class _Plan:
    """A graph ready to run: constants (leaves, and with precomputation every weight-only value
    and every merged weight at its conv's group count) and the nodes left to run each time."""

    gpu: Gpu
    graph: Graph
    consts: dict[Ref, Any]
    steps: list[Node]
    outputs: list[Ref]
    precomputed: int

    def run(self, events: list[tuple[Any, Any]] | None = None) -> dict[Ref, Any]:
        """One run; with ``events`` (a start and stop CUDA event per step) each step's kernels
        are bracketed by its pair."""
        env = dict(self.consts)
        keep = set(self.outputs)
        last = _last_use(self.steps)
        for k, node in enumerate(self.steps):
            try:
                if events is not None:
                    events[k][0].record()
                outs = _apply(self.gpu, node, [env[r] for r in node.inputs])
                if events is not None:
                    events[k][1].record()
            except ExecutionError:
                raise
            except Exception as exc:
                raise _gpu_error(self.gpu, exc, node) from None
            for i, value in enumerate(outs):
                env[Ref(node.id, i)] = value
            for r in node.inputs:  # free intermediates (not constants) after their last read
                if last.get(r) == node.id and r not in keep and r not in self.consts:
                    env.pop(r, None)
        return env


def _last_use(steps: list[Node]) -> dict[Ref, int]:
    last: dict[Ref, int] = {}
    for node in steps:
        for r in node.inputs:
            last[r] = node.id
    return last


def _gpu_error(gpu: Gpu, exc: Exception, node: Node) -> ExecutionError:
    if gpu.is_oom(exc):
        gpu.free_memory()
        return ExecutionError(f"out of GPU memory ({exc})", node=node.id, op=node.op)
    return ExecutionError(f"{type(exc).__name__}: {exc}", node=node.id, op=node.op)


def _plan(
    graph: Graph,
    values: Mapping[str, Any] | None,
    seed: int,
    precompute_weights: bool,
    gpu: Gpu,
) -> _Plan:
    leaves = _leaf_values(graph, values, seed, np.float32)
    consts: dict[Ref, Any] = {}
    for node in graph.nodes:
        if node.op in ("input", "weight"):
            consts[Ref(node.id, 0)] = gpu.cp.asarray(leaves[node.name or ""])
    weight_only = graph.all_weights()
    steps: list[Node] = []
    precomputed = 0
    for node in graph.nodes:
        if node.op in ("input", "weight", "noop"):
            continue
        if precompute_weights and weight_only[node.id]:
            try:
                outs = _apply(gpu, node, [consts[r] for r in node.inputs])
            except ExecutionError:
                raise
            except Exception as exc:
                raise _gpu_error(gpu, exc, node) from None
            for i, value in enumerate(outs):
                consts[Ref(node.id, i)] = value
            precomputed += 1
        else:
            steps.append(node)
    if precompute_weights:  # a merged weight read by a conv: materialize it at that conv's groups
        for i, node in enumerate(steps):
            if node.op in ("conv2d", "conv2d_bias") and isinstance(
                consts.get(node.inputs[1]), Lazy
            ):
                x_ref, w_ref = node.inputs[:2]
                groups = graph.shape(x_ref)[1] // graph.shape(w_ref)[1]
                key = Ref(-1 - node.id, 0)  # a private constant for this conv
                consts[key] = consts[w_ref].at(groups)
                steps[i] = _with_weight(node, key)
    for ref in consts:  # contiguous constants: folded transposes are not re-laid out per run
        value = consts[ref]
        if not isinstance(value, Lazy):
            consts[ref] = gpu.cp.ascontiguousarray(value)
    return _Plan(gpu, graph, consts, steps, _flat_outputs(graph), precomputed)


def _with_weight(node: Node, ref: Ref) -> Node:
    inputs = (node.inputs[0], ref, *node.inputs[2:])
    return Node(node.id, node.op, node.params, inputs, node.outputs, node.name)


def run_gpu(
    graph: Graph,
    values: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    tf32: bool = False,
) -> list[np.ndarray]:
    """Run ``graph`` on the GPU in fp32 and return its outputs on the host, like
    :func:`relsat.run` (same leaf values by name and seed; noop outputs expand into their inputs).
    ``tf32=False`` keeps matmul and conv in full fp32 so the outputs compare with NumPy's."""
    gpu = load_gpu()
    with gpu.tf32(tf32):
        plan = _plan(graph, values, seed, False, gpu)
        env = plan.run()
    outs = []
    for r in plan.outputs:
        value = env[r]
        if isinstance(value, Lazy):
            raise ExecutionError(
                "a merged weight cannot be a graph output", node=r.node, op="merge"
            )
        outs.append(gpu.cp.asnumpy(value))
    return outs


@dataclass(frozen=True)
class GraphTiming:
    """One :func:`time_graph_detail` measurement: GPU ms per run between CUDA events, host wall
    ms per run (≈ ``ms`` when the run is host-bound), and how it was taken. ``graph_ms`` is the
    ms per replay of the run captured as one CUDA graph (no host launch cost: the GPU's own
    time), None when not asked for or when the capture failed (``graph_error`` says why)."""

    ms: float
    wall_ms: float
    warmup: int
    runs: int
    precomputed: int  # weight-only operators evaluated once beforehand
    operators: int  # operators run each time
    device: str
    graph_ms: float | None = None
    graph_error: str = ""


def time_graph_detail(
    graph: Graph,
    *,
    warmup: int = 100,
    runs: int = 100,
    precompute_weights: bool = True,
    tf32: bool = True,
    seed: int = 0,
    cuda_graph: bool = False,
    graph_warmup: int | None = None,
    graph_runs: int | None = None,
) -> GraphTiming:
    """TASO's end-to-end measurement (§6.4): ``warmup`` untimed runs, then ``runs`` runs between
    two CUDA events; ms per run. With ``precompute_weights`` every weight-only operator is
    evaluated once beforehand (TASO's ``preprocess_weights``). With ``cuda_graph`` the run is
    also captured as a CUDA graph and its replays timed the same way (``graph_ms``;
    ``graph_warmup`` and ``graph_runs`` default to ``warmup`` and ``runs``)."""
    if runs < 1 or warmup < 0:
        raise ValueError("runs must be >= 1 and warmup >= 0")
    gpu = load_gpu()
    cp = gpu.cp
    with gpu.tf32(tf32):
        plan = _plan(graph, None, seed, precompute_weights, gpu)
        for _ in range(warmup):
            plan.run()
        gpu.synchronize()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        t = time.perf_counter()
        start.record()
        for _ in range(runs):
            plan.run()
        stop.record()
        stop.synchronize()
        wall = time.perf_counter() - t
        graph_ms, graph_error = None, ""
        if cuda_graph:
            try:
                graph_ms = _time_captured(
                    gpu,
                    plan,
                    warmup if graph_warmup is None else graph_warmup,
                    runs if graph_runs is None else graph_runs,
                )
            except Exception as exc:  # a kernel that cannot be captured: eager numbers only
                graph_error = f"{type(exc).__name__}: {exc}"
                gpu.synchronize()
    ms = float(cp.cuda.get_elapsed_time(start, stop)) / runs
    return GraphTiming(
        ms,
        1e3 * wall / runs,
        warmup,
        runs,
        plan.precomputed,
        len(plan.steps),
        gpu.name,
        graph_ms,
        graph_error,
    )


def _time_captured(gpu: Gpu, plan: _Plan, warmup: int, runs: int) -> float:
    """Ms per replay of one run of ``plan`` captured as a CUDA graph on a side stream (CuPy's
    and PyTorch's work both on it). The values the replays compute are not read: only the
    time, so buffers the run frees and reuses within itself are fine."""
    cp, torch = gpu.cp, gpu.torch
    stream = cp.cuda.Stream(non_blocking=True)
    with stream, torch.cuda.stream(torch.cuda.ExternalStream(stream.ptr)):
        plan.run()  # warm on this stream: algorithms chosen, pool blocks cached
        stream.synchronize()
        stream.begin_capture()
        try:
            env = plan.run()
        finally:
            captured = stream.end_capture()
        for _ in range(max(warmup, 1)):
            captured.launch(stream)
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        for _ in range(runs):
            captured.launch(stream)
        stop.record(stream)
        stop.synchronize()
    del env
    return float(cp.cuda.get_elapsed_time(start, stop)) / runs


def op_times(
    graph: Graph,
    *,
    warmup: int = 3,
    runs: int = 10,
    precompute_weights: bool = True,
    tf32: bool = True,
) -> list[tuple[Node, float]]:
    """Each operator's GPU ms inside the run of ``graph``, as the run lays out its values (views,
    merged weights): a CUDA-event pair around each step, median of ``runs``. Each run is queued
    behind a spin kernel that outlasts its host-side launches, so the steps run back to back
    as in a captured graph and each event pair brackets GPU work only. The steps are those
    :func:`time_graph_detail` runs (weight-only operators precomputed)."""
    if runs < 1 or warmup < 0:
        raise ValueError("runs must be >= 1 and warmup >= 0")
    gpu = load_gpu()
    cp = gpu.cp
    with gpu.tf32(tf32):
        plan = _plan(graph, None, 0, precompute_weights, gpu)
        for _ in range(warmup):
            plan.run()
        gpu.synchronize()
        t = time.perf_counter()
        plan.run([(cp.cuda.Event(), cp.cuda.Event()) for _ in plan.steps])
        host_ms = 1e3 * (time.perf_counter() - t)
        gpu.synchronize()
        samples: list[list[float]] = [[] for _ in plan.steps]
        for _ in range(runs):
            events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in plan.steps]
            gpu.hold(2.0 * host_ms + 1.0)
            plan.run(events)
            gpu.synchronize()
            for k, (start, stop) in enumerate(events):
                samples[k].append(float(cp.cuda.get_elapsed_time(start, stop)))
    return [(node, float(np.median(ms))) for node, ms in zip(plan.steps, samples, strict=True)]


def time_graph(
    graph: Graph,
    *,
    warmup: int = 100,
    runs: int = 100,
    precompute_weights: bool = True,
    tf32: bool = True,
) -> float:
    """Milliseconds per run of ``graph`` on the GPU (:func:`time_graph_detail`'s ``ms``)."""
    return time_graph_detail(
        graph, warmup=warmup, runs=runs, precompute_weights=precompute_weights, tf32=tf32
    ).ms
