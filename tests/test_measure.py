"""The measured cost model and the GPU executor.

CPU-side logic runs everywhere; tests marked ``gpu`` need CuPy, PyTorch and a CUDA device and are
skipped elsewhere. Cost tables and ``TableModel`` (a measured table's lookups and fallbacks,
Parquet round trips, pricing an e-graph through a table) are tests/test_cost.py's.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import math
import os
import subprocess
import sys
import types

import numpy as np
import pytest

import relsat
from relsat import models
from relsat.cost import OpSignature
from relsat.errors import GpuUnavailableError
from relsat.gpu.measure import MeasuredModel, device_slug
from relsat.graph import kernels
from relsat.graph.builder import GraphBuilder

RESHAPE = OpSignature("reshape", (), "2_2", ((4,),), (2, 2))
RELU = OpSignature("relu", (), "", ((1, 64),), (1, 64))
CONV = OpSignature("conv2d", (1, 1, 0, 2), "", ((1, 64, 56, 56), (64, 64, 3, 3)), (1, 64, 56, 56))
MATMUL = OpSignature("matmul", (0,), "", ((64, 1024), (1024, 1024)), (64, 1024))


def _has_gpu() -> bool:
    try:
        cupy = importlib.import_module("cupy")
        return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:
        return False


HAS_GPU = _has_gpu()


# --- everywhere ----------------------------------------------------------------------------


#: Run in a fresh interpreter with CUDA hidden and CuPy made unimportable (as on a machine
#: without either, whatever this one has): the GPU modules import, and measuring refuses with a
#: typed error that says why.
_WITHOUT_CUPY = """
import sys

class NoCupy:
    def find_spec(self, name, path=None, target=None):
        if name == "cupy" or name.startswith("cupy."):
            raise ImportError("hidden by the test")
        return None

sys.meta_path.insert(0, NoCupy())
import relsat, relsat.gpu.measure, relsat.gpu.executor
from relsat.errors import GpuUnavailableError, RelsatError

try:
    relsat.gpu.measure.MeasuredModel()
except GpuUnavailableError as exc:
    assert isinstance(exc, RelsatError)
    print("reason:", exc.reason)
else:
    sys.exit("MeasuredModel() did not raise")
"""


def test_imports_without_cuda() -> None:
    env = os.environ | {"CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-c", _WITHOUT_CUPY],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "reason: CuPy cannot be imported" in proc.stdout


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_no_gpu_is_a_typed_error_with_a_reason() -> None:
    with pytest.raises(GpuUnavailableError) as info:
        MeasuredModel()
    assert info.value.reason
    assert isinstance(info.value, relsat.RelsatError)


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_lazy_model_needs_the_gpu_only_for_real_work() -> None:
    model = MeasuredModel("h100", lazy=True)
    assert model.cost(RESHAPE) == 0.0  # zero-cost: no GPU touched
    assert model.device == "h100"
    with pytest.raises(GpuUnavailableError):
        model.cost(RELU)


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_executor_without_gpu_raises() -> None:
    from relsat.gpu.executor import run_gpu

    with pytest.raises(GpuUnavailableError):
        run_gpu(models.load("nasrnn"))


def test_model_arguments_are_checked() -> None:
    with pytest.raises(ValueError):
        MeasuredModel(lazy=True, backend="opencl")
    with pytest.raises(ValueError):
        MeasuredModel(lazy=True, runs=0)
    with pytest.raises(ValueError):
        MeasuredModel(lazy=True, batch=0)


def test_device_slug() -> None:
    assert device_slug("NVIDIA H200") == "h200"
    assert device_slug("NVIDIA H100 80GB HBM3") == "h100"


class _NumpyStandIn:
    """NumPy in CuPy's place and relsat.graph.kernels' conv/pool in PyTorch's: exercises the GPU
    executor's graph walking (plan, lazy merged weights, weight precomputation) on the CPU.
    It checks logic only; it measures nothing."""

    def __init__(self) -> None:
        from relsat.gpu.executor import Gpu

        names = {k: getattr(np, k) for k in dir(np) if not k.startswith("_")}
        self.cp = types.SimpleNamespace(**names, asnumpy=np.asarray)
        self.activate = functools.partial(Gpu.activate, self)
        self._sigmoid = lambda x, out=None: kernels._activate(x, "SIGMOID")

    def tf32(self, on: bool) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def is_oom(self, exc: BaseException) -> bool:
        return False

    def batchnorm(self, x, scale, bias, mean, var, eps):  # type: ignore[no-untyped-def]
        node = types.SimpleNamespace(params={"epsilon": eps})
        return kernels._batchnorm(node, [x, scale, bias, mean, var])[0]

    def matmul(self, a, b, activation):  # type: ignore[no-untyped-def]
        return kernels._activate(np.matmul(a, b), activation)

    def conv2d(self, x, w, stride, padding, activation):  # type: ignore[no-untyped-def]
        params = {"stride": stride, "padding": padding, "activation": activation}
        node = types.SimpleNamespace(id=0, op="conv2d", params=params)
        return kernels._conv2d(node, [x, w])[0]

    def pool(self, x, op, kernel, stride, padding, activation):  # type: ignore[no-untyped-def]
        params = {"kernel": kernel, "stride": stride, "padding": padding, "activation": activation}
        node = types.SimpleNamespace(id=0, op=op, params=params)
        return kernels._pool(node, [x])[0]


def fused_graph() -> tuple[relsat.Graph, dict[str, np.ndarray]]:
    """Every fused and transformer operator the executor runs in PyTorch (relsat.gpu.fused),
    conv with its bias, and an attention mask that masks one batch entirely (its rows give 0)."""
    b = GraphBuilder()
    x = b.input([2, 8, 32], name="x")
    mask = b.input([2, 1, 1, 8], name="mask")
    att = b.mha(x, b.weight([32, 96], name="wqkv"), b.weight([96], name="bqkv"), mask, 4, 0.35)
    lin = b.reshape(b.linear(att, b.weight([32, 32], name="wo")), [16, 32])
    bias64 = b.weight([64], name="b64")
    mb = b.matmul_bias(lin, b.weight([32, 64], name="w1"), bias64, "RELU")
    mb_tanh = b.matmul_bias(lin, b.weight([32, 64], name="w2"), bias64, "TANH")
    g, gt, bg = b.gelu(mb), b.gelu(mb_tanh, "tanh"), b.biasgelu(mb_tanh, bias64)
    bgt = b.biasgelu(mb, bias64, "tanh")  # FastGelu with its bias
    scale, shift = b.weight([64], name="scale"), b.weight([64], name="shift")
    ln = b.layernorm(g, scale, shift)
    sk2 = b.skiplayernorm(gt, bg, b.weight([128], name="packed2"))
    sk3 = b.skiplayernorm(ln, sk2, b.weight([192], name="packed3"))
    rms = b.rmsnorm(sk3, scale)
    two = b.scalar(2.0)
    pos = b.add(b.sigmoid(rms), b.relu6(g))
    pieces = b.sub(b.div(b.sqrt(pos), b.pow(pos, two)), b.reciprocal(pos))
    trig = b.add(b.neg(b.cos(pieces)), b.mul(b.sin(pieces), b.erf(pieces)))
    soft = b.same(b.nanzero(b.softmax(b.add(trig, b.reducemean(trig)))))
    q, kt, v = (b.input([2, 4, 8, 8], name=n) for n in ("q", "kt", "v"))
    kt2, v2 = b.input([2, 2, 8, 8], name="kt2"), b.input([2, 2, 8, 8], name="v2")
    cos, sin = b.input([8, 4], name="cos"), b.input([8, 4], name="sin")
    qr = b.rotary(q, cos, sin)
    kr = b.rotary(b.transpose(kt, [0, 1, 3, 2]), cos, sin, interleaved=True)
    a1 = b.attention(qr, b.transpose(kr, [0, 1, 3, 2]), v, mask, 0.5)
    a2 = b.gqa(q, kt2, v2, mask, 0.5)
    a3 = b.attention(q, b.repeatkv(kt2, 2), b.repeatkv(v2, 2), mask, 0.5)
    cut = b.slice(a1, 2, 1, 5)
    img = b.input([1, 8, 10, 10], name="img")
    w3 = b.weight([16, 8, 3, 3], name="w3")
    cb = b.weight([1, 16, 1, 1], name="cb")
    convs = [b.conv2d_bias(img, w3, cb, 1, "SAME", act) for act in ("RELU", "NONE", "TANH")]
    convs.append(b.conv2d_bias(img, w3, cb, 2, "VALID", "SIGMOID"))
    pairs = b.ewmul(b.turnpairs(q), b.repeat2(cos))  # GPT-J's interleaved rotary pieces
    quick = b.quickgelu(rms, 1.702)  # CLIP's quick_gelu (alpha 1: SiLU)
    s16, b16 = b.weight([16], name="s16"), b.weight([16], name="b16")
    norms = [b.groupnorm(convs[0], s16, b16, 4), b.instancenorm(convs[1], s16, b16, 1e-6)]
    graph = b.build(att, ln, sk3, rms, soft, a1, a2, a3, cut, *convs, pairs, quick, *norms, bgt)
    masked = np.zeros((2, 1, 1, 8), np.float32)
    masked[0, ..., 5:] = -np.inf
    masked[1] = -np.inf
    return graph, {"mask": masked}


class _CpuTorch:
    """PyTorch without cuDNN's fused conv-bias-ReLU (a CUDA-only call): the executor's conv
    takes its other path, PyTorch's conv2d."""

    def __init__(self, torch) -> None:  # type: ignore[no-untyped-def]
        self._torch = torch

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        if name == "cudnn_convolution_relu":
            raise AttributeError(name)
        return getattr(self._torch, name)


class _TorchStandIn(_NumpyStandIn):
    """The stand-in with PyTorch (CPU) for the fused kernels and the executor's own conv,
    sharing NumPy's buffers through DLPack as the GPU shares CuPy's."""

    def __init__(self, torch) -> None:  # type: ignore[no-untyped-def]
        from relsat.gpu.executor import Gpu

        super().__init__()
        self.torch = _CpuTorch(torch)
        self.t = torch.from_dlpack
        self.cp.from_dlpack = np.from_dlpack
        self.conv2d = functools.partial(Gpu.conv2d, self)
        self._relu_conv = functools.partial(Gpu._relu_conv, self)
        self._relu_paths: dict = {}
        self.matmul = functools.partial(Gpu.matmul, self)
        self._activate_t = functools.partial(Gpu._activate_t, self)


class _FusedReluTorch:
    """PyTorch (CPU) with a stand-in for cuDNN's fused conv-bias-ReLU and a settable capture."""

    def __init__(self, torch) -> None:  # type: ignore[no-untyped-def]
        self._torch = torch
        self.capturing = False
        self.backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(allow_tf32=True))
        self.cuda = types.SimpleNamespace(is_current_stream_capturing=lambda: self.capturing)

    def cudnn_convolution_relu(self, x, w, b, stride, pads, dilation, groups):  # type: ignore[no-untyped-def]
        f = self._torch.nn.functional
        return f.conv2d(x, w, b, stride, pads, dilation, groups).relu()

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._torch, name)


@pytest.mark.parametrize("faster", ["fused", "separate"])
def test_conv_relu_takes_the_faster_way_per_shape(faster: str) -> None:
    """A conv + ReLU runs cuDNN's fused kernel or the benchmarked conv then a ReLU, whichever
    timed faster for its shape; the choice is timed once per shape and never inside a capture."""
    torch = pytest.importorskip("torch")
    from relsat.gpu.device import Gpu

    gpu = _TorchStandIn(torch)
    fake = _FusedReluTorch(torch)
    gpu.torch = fake
    timed: list[str] = []

    def time_way(fn) -> float:  # type: ignore[no-untyped-def]
        way = "fused" if fn.__name__ == "fused_relu" else "separate"
        timed.append(way)
        return 1.0 if way == faster else 2.0

    gpu._time_torch = time_way
    x, w = torch.randn(1, 4, 6, 6), torch.randn(8, 4, 3, 3)
    want = torch.nn.functional.conv2d(x, w, None, (1, 1), (1, 1)).relu()
    run, way = Gpu._relu_conv(gpu, x, w, None, (1, 1), (1, 1), 1)
    assert way == faster and sorted(timed) == ["fused", "separate"]
    torch.testing.assert_close(run(), want)
    assert Gpu._relu_conv(gpu, x, w, None, (1, 1), (1, 1), 1)[1] == faster
    assert len(timed) == 2  # kept per shape
    fake.capturing = True  # a new shape inside a capture: the fused kernel, untimed
    assert Gpu._relu_conv(gpu, x[:, :, :4, :4], w, None, (1, 1), (1, 1), 1)[1] == "fused"
    assert len(timed) == 2
    y = gpu.conv2d(x.numpy(), w.numpy(), (1, 1), "SAME", "RELU")  # the executor's conv
    np.testing.assert_allclose(y, want.numpy(), rtol=1e-5, atol=1e-5)


def _assert_matches(got: list[np.ndarray], want: list[np.ndarray], rtol: float) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape, i
        scale = float(np.nanmax(np.abs(w))) or 1.0
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale, err_msg=f"output {i}")


def test_fused_kernels_on_torch_cpu(monkeypatch) -> None:
    """relsat.gpu.fused's PyTorch kernels compute what relsat.graph.kernels computes (on the
    CPU: the same code runs on the GPU's buffers)."""
    torch = pytest.importorskip("torch")
    import relsat.gpu.executor as gpu_module

    stand_in = _TorchStandIn(torch)
    monkeypatch.setattr(gpu_module, "load_gpu", lambda backend="auto": stand_in)
    graph, values = fused_graph()
    want = relsat.run(graph, values, dtype=np.float32)
    assert np.all(want[0][1] == 0) and np.all(want[5][1] == 0)  # the masked batch gives 0
    _assert_matches(gpu_module.run_gpu(graph, values), want, 1e-4)


def test_fused_signatures_are_measured_by_the_executor_kernel() -> None:
    """Every fused signature reaches a kernel (the GPU decides the time): none is 'unknown'."""
    from relsat.cost import enode_signatures
    from relsat.engine.egraph import EGraph
    from relsat.gpu import fused
    from relsat.gpu.measure import _bench_unit

    graph, _ = fused_graph()
    _, sigs = enode_signatures(EGraph.from_graph(graph))
    ops = {s.op for s in sigs}
    assert set(fused.KERNELS) <= ops  # every kernel of the executor's is in the GPU tests' graph
    for op in ops - set(fused.KERNELS) - {"conv2d_bias", "scalar"}:
        assert op in (
            "input",
            "weight",
            "noop",
            "reshape",
            "transpose",
            "ewadd",
            "ewmul",
            "sigmoid",
            "relu",
            "tanh",
        ), op
    from relsat.cost.ort import unit_graph

    for sig in sigs:  # each rebuilds as the one-node graph the GPU times (mha: heads and scale)
        if sig.op not in ("input", "weight", "noop"):
            assert unit_graph(sig).nodes[-1].op == sig.op
    (mha,) = (n for n in graph.nodes if n.op == "mha")
    (mha_sig,) = (s for s in sigs if s.op == "mha")
    assert unit_graph(mha_sig).nodes[-1].params == mha.params
    with pytest.raises(relsat.errors.CostError, match="unknown operator"):
        _bench_unit(None, OpSignature("opaque", (), "", ((2,),), (2,)))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["nasrnn", "squeezenet-optimized"])
def test_executor_graph_walking_on_numpy(monkeypatch, name: str) -> None:
    import relsat.gpu.executor as gpu_module

    stand_in = _NumpyStandIn()
    monkeypatch.setattr(gpu_module, "load_gpu", lambda backend="auto": stand_in)
    graph = models.load(name.removesuffix("-optimized"))
    if name.endswith("-optimized"):  # rule-made enlarge, concat and split
        graph = relsat.optimize(graph, relsat.Options(verify=False)).graph
    want = relsat.run(graph, dtype=np.float32)
    for got in (
        gpu_module.run_gpu(graph),
        [np.asarray(v) for v in _precomputed_outputs(gpu_module, graph, stand_in)],
    ):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _precomputed_outputs(gpu_module, graph, stand_in):  # type: ignore[no-untyped-def]
    plan = gpu_module._plan(graph, None, 0, True, stand_in)
    env = plan.run()
    return [env[r] for r in plan.outputs]


def test_executor_merged_weights_on_numpy(monkeypatch) -> None:
    import relsat.gpu.executor as gpu_module

    stand_in = _NumpyStandIn()
    monkeypatch.setattr(gpu_module, "load_gpu", lambda backend="auto": stand_in)
    b = GraphBuilder()
    x = b.input([1, 8, 6, 6], name="x")
    w1, w3 = b.weight([8, 2, 1, 1], name="w1"), b.weight([8, 2, 3, 3], name="w3")
    merged = b.merge(b.concat(0, [b.enlarge(w1, w3), w3]), 2)
    y = b.conv2d(x, merged, stride=1, padding="SAME", activation="RELU")
    graph = b.build(y)
    want = relsat.run(graph, dtype=np.float32)
    np.testing.assert_allclose(gpu_module.run_gpu(graph)[0], want[0], rtol=1e-5, atol=1e-5)
    (got,) = _precomputed_outputs(gpu_module, graph, stand_in)
    np.testing.assert_allclose(got, want[0], rtol=1e-5, atol=1e-5)


# --- on a GPU ------------------------------------------------------------------------------

gpu = pytest.mark.gpu


@pytest.fixture(scope="module")
def cupy():
    cp = pytest.importorskip("cupy")
    if not HAS_GPU:
        pytest.skip("no CUDA device")
    return cp


@gpu
def test_measures_conv_and_matmul(cupy) -> None:
    from relsat.gpu.measure import measure_signatures

    model = MeasuredModel(runs=32)
    assert model.gpu.same_stream
    for sig in (CONV, MATMUL, RELU):
        m = model.measure(sig)
        assert m.ms > 0 and math.isfinite(m.ms)
        assert m.source.startswith("measured:")
    assert model.measure(CONV).source.split(":")[1] in ("cudnn-frontend", "torch-cudnn")
    table = measure_signatures([CONV, MATMUL, RESHAPE], model)
    assert len(table) == 3 and table.get(model.device, RESHAPE) == 0.0
    looped = MeasuredModel(runs=8, batch=4)  # TASO's loop: 4 back-to-back runs per event pair
    assert 0 < looped.measure(RELU).ms < math.inf


@gpu
@pytest.mark.parametrize("name", models.BENCHMARKS)
def test_run_gpu_matches_numpy(cupy, name: str) -> None:
    from relsat.gpu.executor import run_gpu

    graph = models.load(name)
    want = relsat.run(graph, dtype=np.float32)  # the GPU's leaf values (float32 draws)
    got = run_gpu(graph)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        scale = float(np.abs(w).max()) or 1.0
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4 * scale)


@gpu
def test_run_gpu_fused_operators_match_numpy(cupy) -> None:
    from relsat.gpu.executor import run_gpu

    graph, values = fused_graph()
    _assert_matches(run_gpu(graph, values), relsat.run(graph, values, dtype=np.float32), 1e-3)


@gpu
def test_measures_fused_operators(cupy) -> None:
    from relsat.cost import enode_signatures
    from relsat.engine.egraph import EGraph
    from relsat.gpu.measure import measure_signatures

    graph, _ = fused_graph()
    _, sigs = enode_signatures(EGraph.from_graph(graph))
    model = MeasuredModel(runs=8, warmup=2)
    table = measure_signatures(sigs, model)
    assert not model.failures
    assert len(table) == len(sigs)
    for sig in sigs:
        assert math.isfinite(table.get(model.device, sig))


@gpu
def test_time_graph(cupy) -> None:
    from relsat.gpu.executor import op_times, time_graph, time_graph_detail

    graph = models.load("nasrnn")
    assert time_graph(graph, warmup=3, runs=5) > 0
    detail = time_graph_detail(graph, warmup=1, runs=2)
    assert detail.precomputed > 0 and detail.operators > 0
    steps = op_times(graph, warmup=1, runs=2)
    assert len(steps) == detail.operators
    assert all(ms > 0 and math.isfinite(ms) for _, ms in steps)


# --- the shipped measured table ------------------------------------------------------------


def test_shipped_h200_table_says_what_measured_each_row() -> None:
    """relsat/data/costs/h200.parquet (bench/measure_costs.py on an H200): every row names the
    card, the backend and the software versions, and holds a finite time."""
    import json
    from importlib import resources

    import pyarrow.parquet as pq

    ref = resources.files("relsat") / "data" / "costs" / "h200.parquet"
    with resources.as_file(ref) as path:
        rows = pq.read_table(path).to_pylist()
    assert len(rows) > 2000
    for row in rows:
        assert row["device"] == "h200" and "H200" in row["gpu"]
        assert row["source"] == "zero-cost" or row["source"].startswith("measured:")
        assert math.isfinite(row["ms"]) and row["ms"] >= 0
        assert (row["ms"] == 0) == (row["source"] == "zero-cost")
    versions = json.loads(rows[0]["versions"])
    assert {"gpu", "cupy", "torch", "cudnn", "driver"} <= set(versions)


@pytest.mark.parametrize("name", ["squeezenet", "resnext50"])
def test_cost_model_h200_prices_from_the_table(name: str) -> None:
    """``cost_model="h200"`` prices from the shipped table (which holds every signature of the
    benchmarks' explored e-graphs, k_multi 1 and 2, as of its measurement) and counts what it
    had to take from the roofline: nothing, except SqueezeNet's one strided conv with its ReLU
    fused (rules/bias.rules' conv-relu-fuse-any, newer than the table: no GPU has measured it)."""
    result = relsat.optimize(models.load(name), relsat.Options(cost_model="h200"))
    assert result.cost_model == "table h200"
    assert result.cost_fallbacks == (1 if name == "squeezenet" else 0)
    assert result.cost_after <= result.cost_before
