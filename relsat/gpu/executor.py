"""The GPU executor: a whole :class:`~relsat.graph.graph.Graph` on an NVIDIA GPU, and its real
runtime.

Values are CuPy fp32 arrays. Element-wise ops, concat, split, reshape, transpose, enlarge, merge
and batchnorm run in CuPy; matmul (cuBLAS), conv2d, conv2d_bias and the pools run through
PyTorch's cuBLAS and cuDNN paths on the same buffers (DLPack, no copies); the other fused and
transformer operators
(Gemm, LayerNorm, GELU, attention, ...) run as PyTorch's kernels (:mod:`relsat.gpu.fused`).
``opaque`` has no GPU kernel (:class:`~relsat.errors.ExecutionError`). The semantics are
:mod:`relsat.graph.kernels`' (SAME padding as TASO passes it to cuDNN, cropped to the declared
size; grouped conv; average pooling excludes the padding; ``merge`` materialized with the group
count of the conv that consumes it).

* :func:`run_gpu` runs a graph and copies its outputs back (compare with :func:`relsat.run`);
* :func:`time_graph` is TASO's end-to-end measurement (100 warm-ups, then 100 timed runs between
  two CUDA events, ms per run), weight-only subgraphs evaluated once beforehand by default.
* :class:`Gpu` (:func:`load_gpu`) holds the loaded libraries and the op primitives the measured
  cost model (:mod:`relsat.gpu.measure`) times.

Runs are eager Python: each op costs a few microseconds of host time to launch, so a graph of
many tiny ops is host-bound; :class:`GraphTiming` gives the wall time beside the GPU time, and
with ``cuda_graph=True`` the time of the run captured once as a CUDA graph and replayed (the
GPU's own time; CuPy's and PyTorch's kernels are captured on one stream).
No CUDA library is imported until a function needs it; without a GPU they raise
:class:`~relsat.gpu.measure.GpuUnavailableError`.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from relsat.errors import ExecutionError, GpuUnavailableError
from relsat.gpu import fused
from relsat.graph.execute import _flat_outputs, _leaf_values
from relsat.graph.graph import Graph, Node, Ref
from relsat.graph.kernels import Lazy, _at, _merged
from relsat.graph.ops import conv_out_size, same_padding

__all__ = ["Gpu", "GraphTiming", "load_gpu", "run_gpu", "time_graph", "time_graph_detail"]

_HOLD_SRC = r"""
extern "C" __global__ void relsat_hold(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


def _pads(
    shape: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...], padding: str
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per spatial dim: (symmetric pad TASO passes to cuDNN, declared output extent)."""
    pads, outs = [], []
    for size, k, s in zip(shape[2:], kernel, stride, strict=True):
        pads.append(same_padding(size, k, s) if padding == "SAME" else 0)
        outs.append(conv_out_size(size, k, s, padding))
    return tuple(pads), tuple(outs)


class Gpu:
    """CuPy, PyTorch (cuDNN) and optionally the cuDNN frontend, loaded and checked.

    ``conv_backend`` is ``"cudnn-frontend"`` or ``"torch-cudnn"`` (what measured convs use; the
    executor always runs convs through PyTorch). ``name`` is the GPU's name.
    """

    def __init__(self, backend: str = "auto") -> None:
        self.cp = _import_cupy()
        self.torch = _import_torch()
        self.cudnn: Any = None
        self.cudnn_handle: Any = None
        self.cudnn_reason = "not asked for"
        if backend in ("auto", "cudnn-frontend"):
            self.cudnn, self.cudnn_handle, self.cudnn_reason = _import_cudnn_frontend(self.cp)
            if self.cudnn is None and backend == "cudnn-frontend":
                raise GpuUnavailableError(f"cuDNN frontend unusable: {self.cudnn_reason}")
        self.conv_backend = "cudnn-frontend" if self.cudnn is not None else "torch-cudnn"
        props = self.cp.cuda.runtime.getDeviceProperties(self.cp.cuda.Device().id)
        name = props["name"]
        self.name: str = name.decode() if isinstance(name, bytes) else str(name)
        # Events are recorded on CuPy's stream, torch ops run on torch's: they must be one.
        self.same_stream = (
            self.torch.cuda.current_stream().cuda_stream == self.cp.cuda.get_current_stream().ptr
        )
        self._hold: Any = None
        self._sigmoid: Any = None
        self._batchnorm: Any = None

    # --- plumbing -------------------------------------------------------------------------

    def versions(self) -> dict[str, str]:
        """The GPU's name and what ran on it: driver, CUDA runtime, CuPy, PyTorch, cuDNN."""
        cp, t = self.cp, self.torch
        out = {"gpu": self.name, "cupy": cp.__version__, "torch": t.__version__}
        out["torch_cuda"] = str(t.version.cuda)
        out["cudnn"] = str(t.backends.cudnn.version())
        for key, get in (
            ("cuda_runtime", cp.cuda.runtime.runtimeGetVersion),
            ("cuda_driver_api", cp.cuda.runtime.driverGetVersion),
        ):
            with suppress(Exception):
                out[key] = str(get())
        with suppress(Exception):
            import pynvml

            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
            out["driver"] = driver.decode() if isinstance(driver, bytes) else str(driver)
        if self.cudnn is not None:
            with suppress(Exception):
                out["cudnn_frontend"] = str(self.cudnn.__version__)
        return out

    def synchronize(self) -> None:
        self.cp.cuda.Device().synchronize()

    def hold(self, ms: float) -> None:
        """Queue a kernel that spins about ``ms`` on the GPU (a no-op if it cannot compile)."""
        if self._hold is None:
            try:
                self._hold = self.cp.RawKernel(_HOLD_SRC, "relsat_hold")
                self._hold.compile()
            except Exception:  # NVRTC missing: time without it
                self._hold = False
        if self._hold:
            try:
                khz = int(self.cp.cuda.Device().attributes["ClockRate"])
            except Exception:
                khz = 2_000_000
            self._hold((1,), (1,), (np.int64(ms * khz),))

    @contextmanager
    def tf32(self, on: bool) -> Iterator[None]:
        """TF32 tensor-core math for fp32 matmul and conv (cuBLAS via CuPy, cuDNN via torch)."""
        t = self.torch
        old = (t.backends.cuda.matmul.allow_tf32, t.backends.cudnn.allow_tf32)
        rl: Any = None
        try:
            from cupy._core import _routines_linalg

            rl = _routines_linalg
            old_cp = rl.get_compute_type(np.float32)
            rl.set_compute_type(
                np.float32,
                getattr(rl, "COMPUTE_TYPE_TF32", 7) if on else getattr(rl, "COMPUTE_TYPE_FP32", 4),
            )
        except Exception:  # an older/newer CuPy without this knob: leave its default
            rl = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t.backends.cuda.matmul.allow_tf32 = on
            t.backends.cudnn.allow_tf32 = on
        try:
            yield
        finally:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t.backends.cuda.matmul.allow_tf32, t.backends.cudnn.allow_tf32 = old
            if rl is not None:
                rl.set_compute_type(np.float32, old_cp)

    def is_oom(self, exc: BaseException) -> bool:
        """Whether ``exc`` is CuPy's or PyTorch's out-of-memory error."""
        oom = (self.cp.cuda.memory.OutOfMemoryError, self.torch.cuda.OutOfMemoryError)
        return isinstance(exc, oom)

    def free_memory(self) -> None:
        self.cp.get_default_memory_pool().free_all_blocks()
        self.torch.cuda.empty_cache()

    def random(self, shape: tuple[int, ...]) -> Any:
        """A fp32 buffer: N(0, 1), or U[0.5, 1.5) for rank 1 (batchnorm variances)."""
        cp = self.cp
        if len(shape) == 1:
            return cp.random.uniform(0.5, 1.5, shape).astype(cp.float32)
        return cp.random.standard_normal(shape, dtype=cp.float32)

    def t(self, x: Any) -> Any:
        """A CuPy array as a torch tensor (same memory)."""
        return self.torch.from_dlpack(x)

    # --- primitives ----------------------------------------------------------------------

    def activate(self, x: Any, activation: str, out: Any = None) -> Any:
        """A CuPy activation (``out`` may be ``x``)."""
        cp = self.cp
        if activation == "RELU":
            return cp.maximum(x, 0, out=out)
        if activation == "TANH":
            return cp.tanh(x, out=out)
        if activation == "RELU6":
            return cp.clip(x, 0, 6, out=out)
        if activation == "SIGMOID":
            if self._sigmoid is None:
                self._sigmoid = cp.ElementwiseKernel(
                    "T x", "T y", "y = 1 / (1 + exp(-x))", "relsat_sigmoid"
                )
            return self._sigmoid(x, out) if out is not None else self._sigmoid(x)
        if out is not None and out is not x:
            out[...] = x
            return out
        return x

    def _activate_t(self, y: Any, activation: str) -> Any:
        return fused.activate(self.torch, y, activation)

    def batchnorm(self, x: Any, scale: Any, bias: Any, mean: Any, var: Any, eps: float) -> Any:
        """Inference batch normalization over channel dim 1, one fused kernel."""
        cp = self.cp
        if self._batchnorm is None:
            self._batchnorm = cp.ElementwiseKernel(
                "T x, T s, T b, T m, T v, float32 eps",
                "T y",
                "y = (x - m) * (s / sqrt(v + eps)) + b",
                "relsat_batchnorm",
            )
        shape = (1, -1) + (1,) * (x.ndim - 2)
        args = [a.reshape(shape) for a in (scale, bias, mean, var)]
        return self._batchnorm(x, *args, np.float32(eps))

    def matmul(self, a: Any, b: Any, activation: str) -> Any:
        """Batched ``a @ b`` (cuBLAS through PyTorch: CuPy's cuBLAS calls refuse to be captured
        in a CUDA graph), then the activation."""
        y = self.torch.matmul(self.t(a), self.t(b))
        return self.cp.from_dlpack(fused.activate(self.torch, y, activation))

    def conv2d(
        self,
        x: Any,
        w: Any,
        stride: tuple[int, int],
        padding: str,
        activation: str,
        bias: Any = None,
    ) -> Any:
        """Grouped conv (groups = C / weight dim 1) with TASO's SAME padding, plus ``bias``
        (any shape holding one value per output channel) when given, then activation; cuDNN's
        fused conv-bias-ReLU for a ReLU."""
        t, f = self.torch, self.torch.nn.functional
        groups = x.shape[1] // w.shape[1]
        pads, (ho, wo) = _pads(x.shape, w.shape[2:], stride, padding)
        tx, tw = self.t(x).contiguous(), self.t(w).contiguous()
        tb = None if bias is None else self.t(bias).reshape(-1).contiguous()
        if activation == "RELU" and hasattr(t, "cudnn_convolution_relu"):
            y = t.cudnn_convolution_relu(tx, tw, tb, stride, pads, (1, 1), groups)
        else:
            y = self._activate_t(f.conv2d(tx, tw, tb, stride, pads, 1, groups), activation)
        return self.cp.from_dlpack(y[:, :, :ho, :wo].contiguous())

    def pool(
        self,
        x: Any,
        op: str,
        kernel: tuple[int, int],
        stride: tuple[int, int],
        padding: str,
        activation: str,
    ) -> Any:
        """Max or average (padding excluded) pooling with TASO's SAME padding, then activation."""
        y = self._pool_t(self.t(x), op, kernel, stride, padding, activation, x.shape)
        return self.cp.from_dlpack(y.contiguous())

    def _pool_t(
        self,
        tx: Any,
        op: str,
        kernel: tuple[int, int],
        stride: tuple[int, int],
        padding: str,
        activation: str,
        shape: tuple[int, ...],
    ) -> Any:
        f = self.torch.nn.functional
        pads, (ho, wo) = _pads(shape, kernel, stride, padding)
        if op == "poolmax":
            y = f.max_pool2d(tx, kernel, stride, pads)
        else:
            y = f.avg_pool2d(tx, kernel, stride, pads, count_include_pad=False)
        return self._activate_t(y[:, :, :ho, :wo], activation)

    # --- closures for the measured cost model ----------------------------------------------

    def bench_pool(
        self,
        x: Any,
        op: str,
        kernel: tuple[int, int],
        stride: tuple[int, int],
        padding: str,
        activation: str,
    ) -> Callable[[], object]:
        """One pool (+ its fused activation) on ``x``, as a no-argument closure."""
        tx = self.t(x)
        return lambda: self._pool_t(tx, op, kernel, stride, padding, activation, x.shape)

    def bench_conv(
        self, x: Any, w: Any, stride: tuple[int, int], padding: str, activation: str
    ) -> tuple[Callable[[], object], str]:
        """One conv as TASO times it (with a bias; fused activation fused), and its source."""
        o = w.shape[0]
        bias = self.random((o,))
        if self.cudnn is not None:
            fn = self._cudnn_conv(x, w, bias, stride, padding, activation)
            if fn is not None:
                return fn, "measured:cudnn-frontend"
        t, f = self.torch, self.torch.nn.functional
        groups = x.shape[1] // w.shape[1]
        pads, _ = _pads(x.shape, w.shape[2:], stride, padding)
        tx, tw, tb = self.t(x), self.t(w), self.t(bias)
        tb4 = tb.reshape(1, o, 1, 1)
        if activation == "NONE":  # conv, then a bias-add kernel (§6.1)
            return (
                lambda: f.conv2d(tx, tw, None, stride, pads, 1, groups).add_(tb4),
                "measured:torch-cudnn:conv+bias-add",
            )
        if activation == "RELU" and hasattr(t, "cudnn_convolution_relu"):
            return (
                lambda: t.cudnn_convolution_relu(tx, tw, tb, stride, pads, (1, 1), groups),
                "measured:torch-cudnn:fused-conv-bias-relu",
            )
        return (
            lambda: self._activate_t(f.conv2d(tx, tw, tb, stride, pads, 1, groups), activation),
            "measured:torch-cudnn:conv+bias,activation-separate",
        )

    def _cudnn_conv(
        self, x: Any, w: Any, bias: Any, stride: tuple[int, int], padding: str, activation: str
    ) -> Callable[[], object] | None:
        """A cuDNN frontend graph (conv, + bias + activation when fused), its fastest plan of
        the first 8 chosen by timing; None when the frontend cannot build it."""
        cudnn, cp = self.cudnn, self.cp
        try:
            f32 = cudnn.data_type.FLOAT
            g = cudnn.pygraph(
                io_data_type=f32,
                intermediate_data_type=f32,
                compute_data_type=f32,
                handle=self.cudnn_handle,
            )
            n, _, h, wd = x.shape
            o, _, kh, kw = w.shape
            pre, (ho, wo) = _pads(x.shape, (kh, kw), stride, padding)
            # exact declared size: pad after = TensorFlow's total minus the pad before
            post = tuple(
                (out - 1) * s + k - size - p
                for out, s, k, size, p in zip((ho, wo), stride, (kh, kw), (h, wd), pre, strict=True)
            )
            xt = g.tensor(name="x", dim=list(x.shape), stride=_strides(x), data_type=f32)
            wt = g.tensor(name="w", dim=list(w.shape), stride=_strides(w), data_type=f32)
            y = g.conv_fprop(
                image=xt,
                weight=wt,
                pre_padding=list(pre),
                post_padding=[max(p, 0) for p in post],
                stride=list(stride),
                dilation=[1, 1],
                compute_data_type=f32,
            )
            b4 = bias.reshape(1, o, 1, 1)
            pack = {xt: x.data.ptr, wt: w.data.ptr}
            if activation != "NONE":
                bt = g.tensor(name="b", dim=[1, o, 1, 1], stride=[o, 1, 1, 1], data_type=f32)
                y = g.bias(input=y, bias=bt)
                y = {"RELU": g.relu, "TANH": g.tanh, "SIGMOID": g.sigmoid}[activation](input=y)
                pack[bt] = b4.data.ptr
            y.set_output(True).set_data_type(f32)
            g.validate()
            g.build_operation_graph()
            g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
            g.check_support()
            g.build_plans(cudnn.build_plan_policy.ALL)
            out = cp.empty(tuple(int(d) for d in y.get_dim()) or (n, o, ho, wo), cp.float32)
            pack[y] = out.data.ptr
            plans = min(int(g.get_execution_plan_count()), 8)
            best, best_ms, best_ws = -1, float("inf"), cp.empty(1, cp.uint8)
            for i in range(plans):
                try:
                    ws = cp.empty(max(int(g.get_workspace_size_plan_at_index(i)), 1), cp.uint8)
                    g.execute_plan_at_index(pack, ws.data.ptr, index=i, handle=self.cudnn_handle)
                    start, stop = cp.cuda.Event(), cp.cuda.Event()
                    start.record()
                    for _ in range(3):
                        g.execute_plan_at_index(
                            pack, ws.data.ptr, index=i, handle=self.cudnn_handle
                        )
                    stop.record()
                    stop.synchronize()
                    ms = cp.cuda.get_elapsed_time(start, stop)
                except Exception:
                    continue
                if ms < best_ms:
                    best, best_ms, best_ws = i, ms, ws
        except Exception as exc:
            self.cudnn_reason = f"{type(exc).__name__}: {exc}"
            return None
        if best < 0:
            self.cudnn_reason = "no execution plan ran"
            return None
        ws_ptr, handle = best_ws.data.ptr, self.cudnn_handle

        def run() -> None:
            g.execute_plan_at_index(pack, ws_ptr, index=best, handle=handle)
            if activation == "NONE":
                cp.add(out, b4, out=out)  # TASO's separate bias-add kernel (§6.1)

        run.keep = (x, w, b4, out, best_ws)  # type: ignore[attr-defined]  # buffers stay alive
        return run


def _strides(x: Any) -> list[int]:
    return [s // x.itemsize for s in x.strides]


def _import_cupy() -> Any:
    try:
        import cupy
    except Exception as exc:
        raise GpuUnavailableError(
            f"CuPy cannot be imported ({type(exc).__name__}: {exc})"
        ) from None
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:
        raise GpuUnavailableError(f"CUDA is not usable ({type(exc).__name__}: {exc})") from None
    if count < 1:
        raise GpuUnavailableError("no CUDA device")
    return cupy


def _import_torch() -> Any:
    """PyTorch with a CUDA device and cuDNN: relsat's path to cuDNN convs and pools."""
    try:
        import torch
    except Exception as exc:
        raise GpuUnavailableError(
            f"PyTorch (for cuDNN conv/pool) cannot be imported ({type(exc).__name__}: {exc})"
        ) from None
    if not torch.cuda.is_available():
        raise GpuUnavailableError("PyTorch sees no CUDA device")
    if not torch.backends.cudnn.is_available():
        raise GpuUnavailableError("cuDNN cannot be loaded by PyTorch")
    torch.backends.cudnn.enabled = True
    torch.backends.cudnn.benchmark = True  # pick the fastest algorithm per shape (TASO: Find)
    return torch


def _import_cudnn_frontend(cp: Any) -> tuple[Any, Any, str]:
    try:
        import cudnn

        handle = cudnn.create_handle()
        cudnn.set_stream(handle=handle, stream=cp.cuda.get_current_stream().ptr)
    except Exception as exc:
        return None, None, f"{type(exc).__name__}: {exc}"
    return cudnn, handle, ""


# ---------------------------------------------------------------------------------------------
# The executor


def _apply(gpu: Gpu, node: Node, args: list[Any]) -> tuple[Any, ...]:
    """The outputs of ``node`` (CuPy arrays, or :class:`~relsat.graph.kernels.Lazy` merged
    weights)."""
    cp, p, op = gpu.cp, node.params, node.op
    if op == "conv2d":
        x, w = args
        if isinstance(x, Lazy):
            raise ExecutionError("a merged weight cannot be a conv input", node=node.id, op=op)
        groups = x.shape[1] // w.shape[1]
        return (gpu.conv2d(x, _at(w, groups), p["stride"], p["padding"], p["activation"]),)
    if op == "conv2d_bias":
        x, w, b = args
        if isinstance(x, Lazy) or isinstance(b, Lazy):
            raise ExecutionError("a merged weight cannot be a conv input", node=node.id, op=op)
        groups = x.shape[1] // w.shape[1]
        w = _at(w, groups)
        return (gpu.conv2d(x, w, p["stride"], p["padding"], p["activation"], bias=b),)
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

    def run(self) -> dict[Ref, Any]:
        env = dict(self.consts)
        keep = set(self.outputs)
        last = _last_use(self.steps)
        for node in self.steps:
            try:
                outs = _apply(self.gpu, node, [env[r] for r in node.inputs])
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


@cache
def load_gpu(backend: str = "auto") -> Gpu:
    """The process's :class:`Gpu` for ``backend`` (loaded once; raises
    :class:`~relsat.gpu.measure.GpuUnavailableError` with the reason when impossible)."""
    return Gpu(backend)
