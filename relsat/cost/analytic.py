"""The analytic cost model: a roofline per kernel from FLOPs and bytes, for a named device.

The default without a GPU. An operator runs as one or more kernels, following how TASO times it
(``reference/SEMANTICS.md`` §6.1); each kernel costs

    launch_overhead + max(compute, memory)
    compute = gemm_flops_padded / (tensor_flops · compute_efficiency)
              + other_flops / (flops · compute_efficiency)
    memory  = bytes / (bandwidth · bandwidth_efficiency)

with fp32 data (4 bytes an element). Counts, with ``out`` the output's element count:

=================  ====================================================  ===========================
op                 FLOPs                                                 bytes (× 4)
=================  ====================================================  ===========================
conv2d             2·N·O·H'·W'·(C/g)·kh·kw (+ activation epilogue)       input + weight + output
matmul             2·batch·m·k·n                                         a + b + output
conv2d_bias        as conv2d, + out for the bias (one fused kernel)      + bias
matmul_bias        as matmul, + out for the bias and activation          + bias
ewadd, ewmul       out                                                   a + b + output
relu/sigmoid/tanh  1 / 4 / 4 per element (relu6: 2)                      input + output
poolmax, poolavg   out·kh·kw                                             input + output
concat             0 (one copy kernel per input)                         2 · that input
batchnorm          4 per element                                         all inputs + output
ewsub/ewdiv/ewpow  out (ewpow: 8 per element)                            a + b + output
sqrt, erf          4 / 10 per element                                    input + output
reducemean         input                                                 input + output
softmax            5 per element                                         2 · input + output
layernorm          8 per element (skiplayernorm: 9)                      all inputs + output
gelu, gelu_tanh    12 / 10 per element (biasgelu, biasgelu_tanh: 13, 11) all inputs + output
quickgelu          6 per element (alpha·x, sigmoid, ·x)                  input + output
scalar             0 (a constant: zero-cost)                             0
nanzero            1 per element                                         input + output
reciprocal, neg    1 per element (cos, sin: 10)                          input + output
slice, repeatkv    0 (a copy)                                            2 · output
turnpairs/repeat2  0 (a copy)                                            2 · output
rmsnorm, rotary    6 per element                                         all inputs + output
instancenorm       8 per element (groupnorm: 8)                          all inputs + output
attention          2·B·H·S·T·(D + Dv) GEMM, + 7·B·H·S·T (scale, bias,    q + kt + v + bias + output
                   softmax, guard; fused: scores never leave the cache)
gqa                as attention over the query heads                     q + kt + v + bias + output
opaque             0 (memory-bound)                                      output
=================  ====================================================  ===========================

Kernels beyond the main one, as TASO measures them: a conv *without* fused activation is timed
with a separate bias-add kernel (so ``conv+ReLU ≤ conv``, the relation TENSAT's choices rely on,
§6.1); a matmul or pool with a fused activation runs a separate activation kernel (so fused is
never dearer than a separate activation op). The zero-cost ops (:data:`ZERO_COST`) cost 0.

Conv and matmul run on tensor cores (TF32 where the device has it: TASO enables tensor-op math
on fp32 data). Their GEMM dimensions (per group for a grouped conv: M = N·H'·W', N = O/g,
K = (C/g)·kh·kw) are rounded up to the MMA granularity ``gemm_tile`` (16×16×8, after TF32's
m16n8k8 instruction) before dividing by the peak: this is what makes a conv with many thin groups
slow for its FLOPs, the effect behind TASO's ``merge_gconv`` rewrite.

Efficiency factors (assumptions, not measurements): dense cuBLAS/cuDNN GEMMs reach roughly 60-80 %
of peak on large problems, STREAM-like copies roughly 80-90 % of peak DRAM bandwidth; the defaults
are 0.7 and 0.8. The launch overhead (5 µs) is the floor of a CUDA-event-timed tiny kernel on
recent GPUs, also an assumption; a measured table (:mod:`relsat.cost.table`) replaces all of this.

>>> m = AnalyticModel("h100")
>>> round(m.cost(OpSignature("relu", (), "", ((1, 1024, 1024),), (1, 1024, 1024))), 4)
0.0081
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from relsat.cost.model import ZERO_COST, CostModel, OpSignature
from relsat.errors import SettingsError, check_choice, check_int

__all__ = ["DEVICES", "AnalyticModel", "Device", "Kernel", "kernels"]

BYTES = 4  # fp32
#: FLOPs per element of an activation, by TASO's activation code (1 sigmoid, 2 ReLU, 3 tanh).
ACTIVATION_FLOPS = {0: 0, 1: 4, 2: 1, 3: 4, 4: 2}
_ACT_OPS = {"sigmoid": 1, "relu": 2, "tanh": 3, "relu6": 4}


@dataclass(frozen=True)
class Device:
    """Peak numbers of one GPU: fp32 FLOP/s on CUDA cores, FLOP/s of the tensor cores on fp32
    data (TF32, or the fp32 peak where the GPU has no TF32), DRAM bytes/s, and the fixed cost of a
    kernel launch in ms. ``source`` cites where the numbers come from."""

    name: str
    flops: float
    tensor_flops: float
    bandwidth: float
    launch_overhead_ms: float = 0.005
    source: str = ""


#: Devices by name. NVIDIA quotes tensor-core peaks "with sparsity" (2:4 structured) in its
#: datasheets; the dense peak used here is half that figure.
DEVICES: dict[str, Device] = {
    d.name: d
    for d in (
        Device(
            "h100",
            flops=66.9e12,
            tensor_flops=494.7e12,  # TF32 dense; the datasheet's 989 TFLOPS is with sparsity
            bandwidth=3.35e12,
            source="NVIDIA H100 Tensor Core GPU datasheet and Hopper architecture whitepaper "
            "(H100 SXM5 80 GB: FP32 67 TFLOPS, TF32 989 TFLOPS with sparsity, HBM3 3.35 TB/s)",
        ),
        Device(
            "h200",
            flops=66.9e12,
            tensor_flops=494.7e12,
            bandwidth=4.8e12,
            source="NVIDIA H200 Tensor Core GPU datasheet (H200 SXM 141 GB: FP32 67 TFLOPS, "
            "TF32 989 TFLOPS with sparsity, HBM3e 4.8 TB/s)",
        ),
        Device(
            "a100",
            flops=19.5e12,
            tensor_flops=156e12,
            bandwidth=2.039e12,
            source="NVIDIA A100 Tensor Core GPU datasheet (A100 SXM 80 GB: FP32 19.5 TFLOPS, "
            "TF32 156 TFLOPS dense, HBM2e 2039 GB/s)",
        ),
        Device(
            "v100",
            flops=15.7e12,
            tensor_flops=15.7e12,  # Volta's tensor cores take fp16 only: fp32 runs on CUDA cores
            bandwidth=900e9,
            source="NVIDIA Tesla V100 datasheet (V100 SXM2: FP32 15.7 TFLOPS, HBM2 900 GB/s); "
            "TASO's original evaluation GPU",
        ),
        Device(
            "t4",
            flops=8.1e12,
            tensor_flops=8.1e12,  # 65 TFLOPS is fp16 mixed precision: TASO runs fp32 on T4
            bandwidth=320e9,
            source="NVIDIA T4 datasheet (FP32 8.1 TFLOPS, FP16/FP32 mixed 65 TFLOPS, "
            "GDDR6 320 GB/s); TENSAT's evaluation GPU",
        ),
        Device(
            "cpu",
            flops=150e9,
            tensor_flops=150e9,
            bandwidth=20e9,
            launch_overhead_ms=0.002,
            source="a generic 2-core x86-64 server CPU with AVX2 FMA (2 cores x 2 FMA units x 8 "
            "fp32 lanes x 2 FLOP x ~2.4 GHz, ~20 GB/s of DRAM bandwidth per socket share, "
            "~2 us of onnxruntime dispatch per node): the fallback price of the onnxruntime cost "
            "model for units it cannot time, not a measurement",
        ),
    )
}


@dataclass(frozen=True)
class Kernel:
    """One kernel's work: FLOPs on CUDA cores, GEMM FLOPs (actual and rounded up to the tile) on
    tensor cores, and bytes moved."""

    bytes: float
    flops: float = 0.0
    gemm_flops: float = 0.0
    gemm_padded: float = 0.0

    @property
    def total_flops(self) -> float:
        return self.flops + self.gemm_flops


def kernels(sig: OpSignature, gemm_tile: tuple[int, int, int] = (16, 16, 8)) -> list[Kernel]:
    """The kernels ``sig`` runs as (none for a zero-cost op); raises :class:`CostError`.

    >>> k = kernels(OpSignature("matmul", (0,), "", ((2, 3), (3, 5)), (2, 5)))
    >>> [(x.gemm_flops, x.bytes) for x in k]
    [(60.0, 124.0)]
    """
    op, p, ins, out = sig.op, sig.params, sig.inputs, sig.output
    if op in ZERO_COST:
        return []
    n_out = math.prod(out)
    if op in ("ewadd", "ewmul"):
        _arity(sig, 2)
        return [Kernel(bytes=_bytes(*ins, out), flops=n_out)]
    if op in _ACT_OPS:
        _arity(sig, 1)
        return [_activation(_ACT_OPS[op], n_out)]
    if op == "matmul":
        return _matmul(sig, gemm_tile)
    if op == "linear":  # x [..., K] @ w [K, N]: one GEMM over the flattened rows
        _arity(sig, 2)
        x, w = sig.inputs
        flat = (math.prod(x[:-1]), x[-1])
        plain = replace(sig, params=(0,), inputs=(flat, w), output=(flat[0], w[-1]))
        return _matmul(plain, gemm_tile)
    if op == "conv2d":
        return _conv(sig, gemm_tile)
    if op in ("conv2d_bias", "matmul_bias"):
        return _fused_bias(sig, gemm_tile)
    if op in ("poolmax", "poolavg"):
        _arity(sig, 1, rank=4)
        pool = Kernel(bytes=_bytes(ins[0], out), flops=n_out * max(p[0], 1) * max(p[1], 1))
        return [pool, *_fused_activation(sig, p[5], n_out)]
    if op == "concat":
        if not ins:
            raise sig.error("concat of no inputs")
        return [Kernel(bytes=2 * _bytes(x)) for x in ins]
    if op == "batchnorm":
        if not ins:
            raise sig.error("batchnorm of no inputs")
        return [Kernel(bytes=_bytes(*ins, out), flops=4 * n_out)]
    if op == "opaque":
        return [Kernel(bytes=_bytes(out))]
    if op in ("scalar", "same"):  # same: no computation, exported as nothing
        return []
    if op in _ELEMENTWISE_FLOPS:
        if not ins:
            raise sig.error(f"{op} of no inputs")
        extra = _bytes(ins[0]) if op == "softmax" else 0.0  # a second pass over the input
        return [Kernel(bytes=_bytes(*ins, out) + extra, flops=_ELEMENTWISE_FLOPS[op] * n_out)]
    if op in ("attention", "gqa"):  # gqa reads each key/value head once per group
        return _attention(sig, gemm_tile)
    if op == "mha":  # the packed projection (one GEMM with its bias), then the attention
        return _mha(sig, gemm_tile)
    if op in ("slice", "repeatkv", "turnpairs", "repeat2", "expand"):  # a copy (of its output)
        return [Kernel(bytes=2 * _bytes(out))]
    if op == "reducemean":
        _arity(sig, 1)
        return [Kernel(bytes=_bytes(ins[0], out), flops=math.prod(ins[0]))]
    raise sig.error("unknown operator")


#: FLOPs per output element of the element-wise and normalization ops (transformer operators).
_ELEMENTWISE_FLOPS = {
    "ewsub": 1,
    "ewdiv": 1,
    "ewpow": 8,
    "sqrt": 4,
    "erf": 10,
    "softmax": 5,
    "layernorm": 8,
    "skiplayernorm": 9,
    "gelu": 12,
    "gelu_tanh": 10,
    "biasgelu": 13,
    "biasgelu_tanh": 11,
    "quickgelu": 6,
    "nanzero": 1,
    "reciprocal": 1,
    "neg": 1,
    "cos": 10,
    "sin": 10,
    "rmsnorm": 6,
    "rotary": 6,
    "instancenorm": 8,
    "groupnorm": 8,
}


def _bytes(*shapes: Sequence[int]) -> float:
    return float(BYTES * sum(math.prod(s) for s in shapes))


def _arity(sig: OpSignature, n: int, rank: int | None = None) -> None:
    if len(sig.inputs) != n:
        raise sig.error(f"expected {n} input(s), got {len(sig.inputs)}")
    if rank is not None and any(len(s) != rank for s in (*sig.inputs, sig.output)):
        raise sig.error(f"expected {rank}-D inputs and output")


def _activation(code: int, elements: int) -> Kernel:
    return Kernel(bytes=float(2 * BYTES * elements), flops=ACTIVATION_FLOPS[code] * elements)


def _fused_activation(sig: OpSignature, code: int, elements: int) -> list[Kernel]:
    """TASO runs a fused activation of a matmul or pool as a separate kernel."""
    if code <= 0:
        return []
    if code not in ACTIVATION_FLOPS:
        raise sig.error(f"unknown activation code {code}")
    return [_activation(code, elements)]


def _round_up(x: int, tile: int) -> int:
    return -(-x // tile) * tile


def _gemm(batch: int, m: int, n: int, k: int, tile: tuple[int, int, int]) -> tuple[float, float]:
    """Actual and tile-rounded FLOPs of ``batch`` GEMMs of ``m×k`` by ``k×n``."""
    tm, tn, tk = tile
    padded = 2.0 * batch * _round_up(m, tm) * _round_up(n, tn) * _round_up(k, tk)
    return 2.0 * batch * m * n * k, padded


def _matmul(sig: OpSignature, tile: tuple[int, int, int]) -> list[Kernel]:
    _arity(sig, 2)
    a, b = sig.inputs
    if len(a) < 2 or len(a) != len(b) or a[-1] != b[-2] or a[:-2] != b[:-2]:
        raise sig.error("matmul needs equal ranks >= 2, matching k and batch dims")
    flops, padded = _gemm(math.prod(a[:-2]), a[-2], b[-1], a[-1], tile)
    main = Kernel(bytes=_bytes(a, b, sig.output), gemm_flops=flops, gemm_padded=padded)
    return [main, *_fused_activation(sig, sig.params[0], math.prod(sig.output))]


def _attention(sig: OpSignature, tile: tuple[int, int, int]) -> list[Kernel]:
    """One fused kernel: the two batched GEMMs (scores, then probabilities @ v) and the
    element-wise work on the [B, H, S, T] scores, which stay in the kernel."""
    _arity(sig, 4)
    q, kt, v, _ = sig.inputs
    if len(q) != 4 or len(kt) != 4 or len(v) != 4:
        raise sig.error("attention needs 4-D q, kt, v")
    batch, s, d, t, dv = q[0] * q[1], q[2], q[3], kt[3], v[3]
    f1, p1 = _gemm(batch, s, t, d, tile)
    f2, p2 = _gemm(batch, s, dv, t, tile)
    return [
        Kernel(
            bytes=_bytes(*sig.inputs, sig.output),
            flops=7 * batch * s * t,
            gemm_flops=f1 + f2,
            gemm_padded=p1 + p2,
        )
    ]


def _mha(sig: OpSignature, tile: tuple[int, int, int]) -> list[Kernel]:
    """com.microsoft Attention: ``x [B, S, E] @ w [E, 3N] + b`` as one GEMM, then the
    attention of ``heads`` heads of ``D = N / heads`` (:func:`_attention`'s kernel)."""
    _arity(sig, 4)
    (batch, seq, embed), w, b, mask = sig.inputs
    heads = max(int(sig.params[0]), 1)
    d = w[-1] // 3 // heads
    flat = (batch * seq, embed)
    projection = replace(sig, op="matmul_bias", params=(0,), inputs=(flat, w, b))
    projection = replace(projection, output=(flat[0], w[-1]))
    q = (batch, heads, seq, d)
    attention = replace(sig, op="attention", inputs=(q, (batch, heads, d, seq), q, mask))
    return [*_fused_bias(projection, tile), *_attention(attention, tile)]


def _conv(sig: OpSignature, tile: tuple[int, int, int]) -> list[Kernel]:
    _arity(sig, 2, rank=4)
    (n, c, _, _), (o, cw, kh, kw) = sig.inputs
    _, _, h_out, w_out = sig.output
    if cw <= 0 or c % cw or o % (c // cw):
        raise sig.error(
            "conv2d: input channels must be a multiple of the weight's, and the "
            "output channels of the group count"
        )
    groups = c // cw
    flops, padded = _gemm(groups, n * h_out * w_out, o // groups, cw * kh * kw, tile)
    n_out = math.prod(sig.output)
    act = sig.params[3]
    if act not in ACTIVATION_FLOPS:
        raise sig.error(f"unknown activation code {act}")
    conv = Kernel(
        bytes=_bytes(*sig.inputs, sig.output),
        flops=ACTIVATION_FLOPS[act] * n_out,  # fused epilogue (cuDNN conv-bias-activation)
        gemm_flops=flops,
        gemm_padded=padded,
    )
    if act:
        return [conv]
    # TASO times an unfused conv together with a bias-add kernel (§6.1).
    bias = Kernel(bytes=float(BYTES * (2 * n_out + o)), flops=n_out)
    return [conv, bias]


def _fused_bias(sig: OpSignature, tile: tuple[int, int, int]) -> list[Kernel]:
    """A conv or GEMM with its bias and activation in the epilogue: one kernel that reads the
    bias and spends an add (and the activation) per output element."""
    if len(sig.inputs) != 3:
        raise sig.error(f"expected 3 inputs, got {len(sig.inputs)}")
    base = replace(sig, op=sig.op.removesuffix("_bias"), inputs=sig.inputs[:2])
    main = (_conv if sig.op == "conv2d_bias" else _matmul)(base, tile)[0]
    n_out = math.prod(sig.output)
    act = sig.params[3] if sig.op == "conv2d_bias" else sig.params[0]
    if act not in ACTIVATION_FLOPS:
        raise sig.error(f"unknown activation code {act}")
    epilogue = n_out * (1 + (0 if sig.op == "conv2d_bias" else ACTIVATION_FLOPS[act]))
    return [replace(main, bytes=main.bytes + _bytes(sig.inputs[2]), flops=main.flops + epilogue)]


class AnalyticModel(CostModel):
    """Roofline costs (ms) for ``device`` (a name in :data:`DEVICES`, or a :class:`Device`).

    ``compute_efficiency`` and ``bandwidth_efficiency`` are the fractions of peak reached;
    ``gemm_tile`` the (M, N, K) granularity GEMM dimensions are rounded up to (three integers
    >= 1). An unknown device or an efficiency outside (0, 1] raises
    :class:`~relsat.errors.SettingsError`.
    """

    name = "analytic"

    def __init__(
        self,
        device: str | Device = "h100",
        *,
        compute_efficiency: float = 0.7,
        bandwidth_efficiency: float = 0.8,
        gemm_tile: tuple[int, int, int] = (16, 16, 8),
    ) -> None:
        if isinstance(device, str):
            check_choice("device", device, tuple(DEVICES))
            device = DEVICES[device]
        for option, value in (
            ("compute_efficiency", compute_efficiency),
            ("bandwidth_efficiency", bandwidth_efficiency),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
                raise SettingsError(option, value, "a number in (0, 1]")
        if not isinstance(gemm_tile, tuple) or len(gemm_tile) != 3:
            raise SettingsError("gemm_tile", gemm_tile, "three integers >= 1 (M, N, K)")
        for size in gemm_tile:
            check_int("gemm_tile", size, 1)
        self.spec = device
        self.device = device.name
        self.compute_efficiency = compute_efficiency
        self.bandwidth_efficiency = bandwidth_efficiency
        self.gemm_tile = gemm_tile

    def __repr__(self) -> str:
        return (
            f"AnalyticModel({self.device!r}, compute_efficiency={self.compute_efficiency}, "
            f"bandwidth_efficiency={self.bandwidth_efficiency}, gemm_tile={self.gemm_tile})"
        )

    def kernel_ms(self, k: Kernel) -> float:
        """One kernel's time: launch overhead plus the roofline bound."""
        d = self.spec
        compute = (k.gemm_padded / d.tensor_flops + k.flops / d.flops) / self.compute_efficiency
        memory = k.bytes / (d.bandwidth * self.bandwidth_efficiency)
        return d.launch_overhead_ms + 1e3 * max(compute, memory)

    def cost(self, sig: OpSignature) -> float:
        return float(sum(self.kernel_ms(k) for k in kernels(sig, self.gemm_tile)))
