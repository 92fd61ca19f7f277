"""The GPU as relsat uses it: CuPy, PyTorch (cuDNN, cuBLAS) and optionally NVIDIA's cuDNN
frontend, loaded and checked once per process (:func:`load_gpu`), and the op primitives that the
executor (:mod:`relsat.gpu.executor`) runs and the measured cost model (:mod:`relsat.gpu.measure`)
times: activations, batchnorm, matmul, conv (SAME padding as TASO passes it to cuDNN, cropped to
the declared size; grouped), pools, a spin kernel to queue timed runs behind, TF32 on or off.

No CUDA library is imported until :func:`load_gpu` runs; without a GPU it raises
:class:`~relsat.errors.GpuUnavailableError` with the reason.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from functools import cache
from typing import Any

import numpy as np

from relsat.errors import GpuUnavailableError
from relsat.gpu import fused
from relsat.graph.ops import conv_out_size, same_padding

__all__ = ["Gpu", "load_gpu"]

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
        self._relu_paths: dict[tuple, str] = {}

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
        (any shape holding one value per output channel) when given, then activation; a ReLU
        the faster way for the shape (:meth:`_relu_conv`)."""
        f = self.torch.nn.functional
        groups = x.shape[1] // w.shape[1]
        pads, (ho, wo) = _pads(x.shape, w.shape[2:], stride, padding)
        tx, tw = self.t(x).contiguous(), self.t(w).contiguous()
        tb = None if bias is None else self.t(bias).reshape(-1).contiguous()
        if activation == "RELU":
            y = self._relu_conv(tx, tw, tb, stride, pads, groups)[0]()
        else:
            y = self._activate_t(f.conv2d(tx, tw, tb, stride, pads, 1, groups), activation)
        return self.cp.from_dlpack(y[:, :, :ho, :wo].contiguous())

    def _relu_conv(
        self,
        tx: Any,
        tw: Any,
        tb: Any,
        stride: tuple[int, int],
        pads: tuple[int, ...],
        groups: int,
    ) -> tuple[Callable[[], Any], str]:
        """Conv (+ bias) + ReLU the faster way for this shape on this GPU, and which way:
        ``"fused"``, cuDNN's fused conv-bias-ReLU, which runs the one algorithm cuDNN fuses;
        or ``"separate"``, the conv algorithm ``cudnn.benchmark`` picks, then an in-place ReLU.
        Each shape is timed both ways once (outside a CUDA-graph capture) and the faster kept:
        TASO's "fastest algorithm", with the ReLU as one of the choices."""
        t, f = self.torch, self.torch.nn.functional

        def separate() -> Any:
            return f.conv2d(tx, tw, tb, stride, pads, 1, groups).relu_()

        if not hasattr(t, "cudnn_convolution_relu"):
            return separate, "separate"

        def fused_relu() -> Any:
            return t.cudnn_convolution_relu(tx, tw, tb, stride, pads, (1, 1), groups)

        ways = {"fused": fused_relu, "separate": separate}
        key = (
            tuple(tx.shape),
            tuple(tw.shape),
            tb is not None,
            tuple(stride),
            tuple(pads),
            groups,
            bool(t.backends.cudnn.allow_tf32),
        )
        way = self._relu_paths.get(key)
        if way is None:
            if t.cuda.is_current_stream_capturing():  # no timing inside a capture
                return fused_relu, "fused"
            way = min(ways, key=lambda w: self._time_torch(ways[w]))
            self._relu_paths[key] = way
        return ways[way], way

    def _time_torch(self, fn: Callable[[], object], runs: int = 10) -> float:
        """Ms per call of ``fn`` (PyTorch work): ``runs`` back-to-back calls queued behind a
        spin kernel, between two events, after two untimed calls."""
        t = self.torch
        for _ in range(2):  # cudnn.benchmark picks its algorithm here
            fn()
        start, stop = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
        t.cuda.synchronize()
        self.hold(2.0)
        start.record()
        for _ in range(runs):
            fn()
        stop.record()
        stop.synchronize()
        return float(start.elapsed_time(stop)) / runs

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
        f = self.torch.nn.functional
        groups = x.shape[1] // w.shape[1]
        pads, _ = _pads(x.shape, w.shape[2:], stride, padding)
        tx, tw, tb = self.t(x), self.t(w), self.t(bias)
        tb4 = tb.reshape(1, o, 1, 1)
        if activation == "NONE":  # conv, then a bias-add kernel (§6.1)
            return (
                lambda: f.conv2d(tx, tw, None, stride, pads, 1, groups).add_(tb4),
                "measured:torch-cudnn:conv+bias-add",
            )
        if activation == "RELU":  # as the executor runs it: the faster way for this shape
            run, way = self._relu_conv(tx, tw, tb, stride, pads, groups)
            how = "fused-conv-bias-relu" if way == "fused" else "conv+bias,relu-separate"
            return run, f"measured:torch-cudnn:{how}"
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


@cache
def load_gpu(backend: str = "auto") -> Gpu:
    """The process's :class:`Gpu` for ``backend`` (loaded once; raises
    :class:`~relsat.gpu.measure.GpuUnavailableError` with the reason when impossible)."""
    return Gpu(backend)
