"""The measured cost model: each operator signature timed on this machine's NVIDIA GPU.

:class:`MeasuredModel` runs one operator instance on random fp32 buffers: ``warmup`` (default 8)
untimed runs, then ``runs`` (default 32) CUDA-event pairs, each around ``batch`` (default 8)
back-to-back runs, and keeps the **median** divided by ``batch``. That is TASO's protocol
(``reference/SEMANTICS.md`` §6.1: its loop between one event pair) with the median instead of
the mean. One run per event pair (``batch=1``) charges each run the pair's own overhead, and
summed over a graph such prices overestimated its CUDA-graph replay up to 2.4× on an H200
(bench/history/gpu.md):

==========================  ==================================================================
op                          how it runs (and the ``source`` recorded for it)
==========================  ==================================================================
ewadd, ewmul, activations   CuPy element-wise kernels (``measured:cupy``)
concat, batchnorm           CuPy copy / one fused element-wise kernel (``measured:cupy``)
scalar                      CuPy, as the executor makes it (``measured:cupy``)
matmul                      cuBLAS through ``cupy.matmul``, then the fused activation as a
                            separate kernel, as TASO does (``measured:cupy-cublas``)
conv2d                      cuDNN. Through NVIDIA's cuDNN frontend (``cudnn``) when it imports
                            and builds the graph: all engine plans built, the fastest of the first
                            8 kept, conv+bias+activation as one fused graph
                            (``measured:cudnn-frontend``). Otherwise PyTorch's cuDNN path on the
                            same CuPy buffers (DLPack) with ``cudnn.benchmark`` choosing the
                            algorithm. A fused ReLU runs the way the executor runs it, the
                            faster for the shape of cuDNN's fused conv-bias-ReLU
                            (``torch.cudnn_convolution_relu``) and conv+bias then a ReLU;
                            conv+bias then the activation in the same timed region for
                            sigmoid/tanh (``measured:torch-cudnn`` plus a suffix saying which).
                            A conv without activation is timed as conv plus a bias-add kernel,
                            as TASO does, so conv+ReLU ≤ conv holds as in TENSAT.
poolmax, poolavg            PyTorch on the CuPy buffers (``avg_pool2d(count_include_pad=False)``),
                            the fused activation in the same timed region (``measured:torch``)
fused and transformer ops   the executor's kernel on the operator's one-node graph
(conv2d_bias, matmul_bias,  (:mod:`relsat.gpu.fused`: PyTorch's cuDNN conv with bias, cuBLAS
layernorm, gelu, attention, addmm, layer_norm, gelu, scaled_dot_product_attention, ...;
mha, rmsnorm, rotary, ...)  ``measured:torch``)
zero-cost ops               0 ms without touching the GPU (``zero-cost``)
opaque                      :class:`~relsat.errors.CostError`: no backend can run it
==========================  ==================================================================

To keep host-side launch latency out of the numbers, a short spin kernel is queued before the
timed runs so that they queue up behind it and each event pair times the GPU alone. Matmul and
conv use TF32 tensor cores (``tf32=True``, TASO's ``CUDNN_TENSOR_OP_MATH``).

Nothing here imports CUDA libraries at import time: ``import relsat.gpu.measure`` works on a
machine without a GPU, and :class:`MeasuredModel` then raises :class:`GpuUnavailableError` with
the reason (``lazy=True`` defers that to the first signature that needs the GPU).

>>> MeasuredModel(lazy=True, device_name="h100").cost(
...     OpSignature("reshape", (), "2_2", ((4,),), (2, 2)))
0.0
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from relsat.cost.analytic import DEVICES
from relsat.cost.model import ZERO_COST, CostModel, OpSignature
from relsat.cost.table import CostTable
from relsat.errors import CostError, RelsatError
from relsat.graph.ops import ACTIVATIONS, PADDINGS

if TYPE_CHECKING:
    from relsat.gpu.device import Gpu

__all__ = [
    "BACKENDS",
    "MeasuredModel",
    "Measurement",
    "device_slug",
    "measure_signatures",
    "time_ms",
]

#: Conv backends: "auto" (the cuDNN frontend if it works, else PyTorch's cuDNN path) or either.
BACKENDS = ("auto", "cudnn-frontend", "torch")


@dataclass(frozen=True)
class Measurement:
    """One signature's time (ms) and what measured it (the cost table's ``source``)."""

    ms: float
    source: str


def device_slug(name: str) -> str:
    """The cost-table device name for a GPU name: a known device if the name contains one.

    >>> device_slug("NVIDIA H100 80GB HBM3"), device_slug("Tesla T4"), device_slug("Some GPU 9")
    ('h100', 't4', 'some-gpu-9')
    """
    lower = name.lower()
    for known in DEVICES:
        if re.search(rf"(?<![a-z0-9]){known}(?![0-9])", lower):
            return known
    return re.sub(r"[^a-z0-9]+", "-", lower).strip("-")


def time_ms(gpu: Gpu, fn: Callable[[], object], *, warmup: int, runs: int, batch: int = 1) -> float:
    """The median of ``runs`` CUDA-event timings of ``batch`` back-to-back calls of ``fn``,
    divided by ``batch``, after ``warmup`` untimed calls.

    The timed calls are queued behind a spin kernel long enough to cover their host-side launch
    cost, so each event pair brackets GPU work only (when the GPU is the bottleneck). With
    ``batch`` > 1 (TASO's loop between one event pair) the calls run back to back as a graph's
    kernels do, and the event pair's own overhead is shared among them.
    """
    if batch < 1:
        raise ValueError("batch must be >= 1")
    cp = gpu.cp
    t = time.perf_counter()
    for _ in range(max(warmup, 1)):  # at least one: cudnn.benchmark picks its algorithm there
        fn()
    host_ms = 1e3 * (time.perf_counter() - t) / max(warmup, 1)
    gpu.synchronize()
    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(runs)]
    gpu.hold(min(100.0, 2.0 * runs * batch * host_ms + 0.1))
    for start, stop in events:
        start.record()
        for _ in range(batch):
            fn()
        stop.record()
    events[-1][1].synchronize()
    return float(statistics.median(cp.cuda.get_elapsed_time(s, e) for s, e in events)) / batch


class MeasuredModel(CostModel):
    """Costs (ms) measured on the GPU; see the module docstring for the protocol.

    ``device_name`` labels the rows (default: from the GPU's name, e.g. ``"h100"``); ``backend``
    is one of :data:`BACKENDS`. Each signature is measured once per model (cached). ``failures``
    maps the signatures :func:`measure_signatures` skipped to the reason.
    """

    name = "measured"

    def __init__(
        self,
        device_name: str | None = None,
        *,
        backend: str = "auto",
        warmup: int = 8,
        runs: int = 32,
        batch: int = 8,
        tf32: bool = True,
        lazy: bool = False,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
        if warmup < 0 or runs < 1 or batch < 1:
            raise ValueError("warmup must be >= 0, runs >= 1 and batch >= 1")
        self.backend = backend
        self.warmup = warmup
        self.runs = runs
        self.batch = batch
        self.tf32 = tf32
        self._device = device_name
        self._gpu: Gpu | None = None
        self._cache: dict[OpSignature, Measurement] = {}
        self.failures: dict[OpSignature, str] = {}
        if not lazy:
            _ = self.gpu

    def __repr__(self) -> str:
        return (
            f"MeasuredModel({self._device!r}, backend={self.backend!r}, warmup={self.warmup}, "
            f"runs={self.runs}, batch={self.batch}, tf32={self.tf32})"
        )

    @property
    def gpu(self) -> Gpu:
        """The loaded GPU libraries (loads them; :class:`GpuUnavailableError` if impossible)."""
        if self._gpu is None:
            from relsat.gpu.device import load_gpu

            self._gpu = load_gpu(self.backend)
        return self._gpu

    @property
    def device(self) -> str:
        """The cost-table device name (from the GPU's name unless given)."""
        if self._device is None:
            self._device = device_slug(self.gpu.name)
        return self._device

    @device.setter
    def device(self, value: str) -> None:
        self._device = value

    @property
    def source(self) -> str:
        """A summary; each row's exact backend is in :meth:`measure`'s result."""
        return f"measured:{self._gpu.conv_backend}" if self._gpu is not None else "measured"

    def cost(self, sig: OpSignature) -> float:
        return self.measure(sig).ms

    def _time(self, gpu: Gpu, sig: OpSignature) -> tuple[float, str]:
        fn, source = _bench(gpu, sig)  # its buffers are freed when this returns
        return time_ms(gpu, fn, warmup=self.warmup, runs=self.runs, batch=self.batch), source

    def measure(self, sig: OpSignature) -> Measurement:
        """Time one signature (cached). Raises :class:`CostError` for an op no backend runs or
        a shape that does not fit in GPU memory, :class:`GpuUnavailableError` without a GPU."""
        if sig.op in ZERO_COST:
            return Measurement(0.0, "zero-cost")
        if sig in self._cache:
            return self._cache[sig]
        gpu = self.gpu
        try:
            with gpu.tf32(self.tf32):
                ms, source = self._time(gpu, sig)
        except Exception as exc:
            if isinstance(exc, RelsatError):
                raise
            if gpu.is_oom(exc):
                gpu.free_memory()
                raise sig.error(f"out of GPU memory ({exc})", model=self.name) from None
            raise sig.error(f"{type(exc).__name__}: {exc}", model=self.name) from None
        result = Measurement(ms, source)
        self._cache[sig] = result
        return result


def _activation(sig: OpSignature, code: int) -> str:
    if not 0 <= code < len(ACTIVATIONS):
        raise sig.error(f"unknown activation code {code}", model="measured")
    return ACTIVATIONS[code]


def _padding(sig: OpSignature, code: int) -> str:
    if not 0 <= code < len(PADDINGS):
        raise sig.error(f"unknown padding code {code}", model="measured")
    return PADDINGS[code]


#: Inputs of the operators :func:`_bench` times with a closure of its own.
_ARITY = {
    **dict.fromkeys(("ewadd", "ewmul", "matmul", "conv2d"), 2),
    **dict.fromkeys(("relu", "tanh", "sigmoid", "poolmax", "poolavg"), 1),
    "batchnorm": 5,
}


def _bench(gpu: Gpu, sig: OpSignature) -> tuple[Callable[[], object], str]:
    """A closure running ``sig``'s op once on fresh random buffers, and the backend's source."""
    cp, op, p = gpu.cp, sig.op, sig.params
    arity = _ARITY.get(op)  # the operators timed here; the others' units check their own
    if arity is not None and len(sig.inputs) != arity:
        raise sig.error(f"expected {arity} input(s), got {len(sig.inputs)}", model="measured")
    if op == "opaque":
        raise sig.error("an opaque operator has no GPU kernel to measure", model="measured")
    ins = [gpu.random(s) for s in sig.inputs]
    if op in ("ewadd", "ewmul"):
        out = cp.empty(sig.output, cp.float32)
        ufunc = cp.add if op == "ewadd" else cp.multiply
        return (lambda: ufunc(ins[0], ins[1], out=out)), "measured:cupy"
    if op in ("relu", "tanh", "sigmoid"):
        act_out = cp.empty_like(ins[0])
        return (lambda: gpu.activate(ins[0], op.upper(), out=act_out)), "measured:cupy"
    if op == "matmul":
        act = _activation(sig, p[0])
        mm_out = cp.empty(sig.output, cp.float32)

        def matmul() -> None:
            cp.matmul(ins[0], ins[1], out=mm_out)
            gpu.activate(mm_out, act, out=mm_out)  # TASO: a separate activation kernel

        return matmul, "measured:cupy-cublas" + ("" if act == "NONE" else "+activation")
    if op == "conv2d":
        return gpu.bench_conv(
            ins[0], ins[1], (p[0], p[1]), _padding(sig, p[2]), _activation(sig, p[3])
        )
    if op in ("poolmax", "poolavg"):
        fn = gpu.bench_pool(
            ins[0], op, (p[0], p[1]), (p[2], p[3]), _padding(sig, p[4]), _activation(sig, p[5])
        )
        return fn, "measured:torch"
    if op == "concat":
        cat_out = cp.empty(sig.output, cp.float32)
        return (lambda: cp.concatenate(ins, axis=p[0], out=cat_out)), "measured:cupy"
    if op == "batchnorm":
        eps = float(sig.s) if sig.s else 1e-5
        x, scale, bias, mean, var = ins
        return (lambda: gpu.batchnorm(x, scale, bias, mean, var, eps)), "measured:cupy"
    return _bench_unit(gpu, sig)


def _bench_unit(gpu: Gpu, sig: OpSignature) -> tuple[Callable[[], object], str]:
    """Any other operator: the executor's own kernel for it, on the one-operator graph of
    ``sig`` (so a fused operator is timed as the executor runs it)."""
    from relsat.cost.ort import unit_graph
    from relsat.gpu import fused
    from relsat.gpu.executor import _apply

    if sig.op not in fused.KERNELS and sig.op not in ("conv2d_bias", "scalar"):
        raise sig.error("unknown operator", model="measured")
    graph = unit_graph(sig)
    node = graph.nodes[-1]
    args = [gpu.random(s) for s in sig.inputs]
    backend = "cupy" if sig.op == "scalar" else "torch"
    return (lambda: _apply(gpu, node, args)), f"measured:{backend}"


def measure_signatures(
    sigs: Iterable[OpSignature],
    model: MeasuredModel,
    table: CostTable | None = None,
    *,
    skip_errors: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> CostTable:
    """Measure every signature with ``model`` and store the rows (device ``model.device``, each
    with its backend as ``source``) in ``table`` (default: a new in-memory one), which is
    returned. With ``skip_errors`` a :class:`CostError` skips the signature and is recorded in
    ``model.failures``; a missing GPU (:class:`GpuUnavailableError`) always raises."""
    table = table if table is not None else CostTable()
    todo: Sequence[OpSignature] = list(dict.fromkeys(sigs))
    rows: dict[str, tuple[list[OpSignature], list[float]]] = {}
    for i, sig in enumerate(todo):
        try:
            m = model.measure(sig)
        except CostError as exc:
            if not skip_errors:
                raise
            model.failures[sig] = exc.reason
            continue
        group = rows.setdefault(m.source, ([], []))
        group[0].append(sig)
        group[1].append(m.ms)
        if progress is not None:
            progress(i + 1, len(todo))
    for source, (group_sigs, ms) in rows.items():
        table.insert(model.device, group_sigs, ms, source)
    return table
