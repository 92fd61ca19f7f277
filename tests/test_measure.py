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

    def conv2d(self, x, w, stride, padding, activation):  # type: ignore[no-untyped-def]
        params = {"stride": stride, "padding": padding, "activation": activation}
        node = types.SimpleNamespace(id=0, op="conv2d", params=params)
        return kernels._conv2d(node, [x, w])[0]

    def pool(self, x, op, kernel, stride, padding, activation):  # type: ignore[no-untyped-def]
        params = {"kernel": kernel, "stride": stride, "padding": padding, "activation": activation}
        node = types.SimpleNamespace(id=0, op=op, params=params)
        return kernels._pool(node, [x])[0]


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


@gpu
@pytest.mark.parametrize("name", models.BENCHMARKS)
def test_run_gpu_matches_numpy(cupy, name: str) -> None:
    from relsat.gpu.executor import run_gpu

    graph = models.load(name)
    want = relsat.run(graph)
    got = run_gpu(graph)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        scale = float(np.abs(w).max()) or 1.0
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4 * scale)


@gpu
def test_time_graph(cupy) -> None:
    from relsat.gpu.executor import time_graph, time_graph_detail

    graph = models.load("nasrnn")
    assert time_graph(graph, warmup=3, runs=5) > 0
    detail = time_graph_detail(graph, warmup=1, runs=2)
    assert detail.precomputed > 0 and detail.operators > 0
