"""GPU kernels of the fused and transformer operators, in PyTorch on the executor's CuPy buffers.

The executor (:mod:`relsat.gpu.executor`) runs TASO's operators in CuPy. The operators relsat
adds for today's models — conv/Gemm with their bias fused, LayerNorm, SkipLayerNorm, GELU and
BiasGelu, attention (``attention``, ``mha``, ``gqa``), RMSNorm, rotary embeddings, instance and
group normalization (``instance_norm``, ``group_norm``) and the
element-wise pieces exporters spell them with — run here as the PyTorch (cuBLAS, cuDNN, fused
CUDA) kernel that does each in one launch where PyTorch has one: ``layer_norm``, ``gelu``,
``scaled_dot_product_attention``. Tensors are shared with CuPy through DLPack (no copies) on the
same stream. The semantics are :mod:`relsat.graph.kernels`' (the NumPy reference); a fully
masked attention row gives 0 as there.

Every function takes ``(torch, node, args)`` with ``args`` torch tensors and returns a tuple of
tensors. Nothing here imports PyTorch: the module is passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from relsat.graph.graph import Node

__all__ = ["KERNELS", "activate"]

Kernel = Callable[[Any, Node, list[Any]], tuple[Any, ...]]


def activate(torch: Any, y: Any, activation: str) -> Any:
    """``y`` with a TASO activation applied in place (a fresh result for RELU6)."""
    if activation == "RELU":
        return y.relu_()
    if activation == "TANH":
        return y.tanh_()
    if activation == "SIGMOID":
        return y.sigmoid_()
    if activation == "RELU6":
        return y.clamp_(0.0, 6.0)
    return y


def _nanzero(torch: Any, x: Any) -> Any:
    return torch.where(torch.isnan(x), torch.zeros((), dtype=x.dtype, device=x.device), x)


def _attend(torch: Any, q: Any, k: Any, v: Any, bias: Any, scale: float) -> Any:
    """nanzero(softmax(q @ k^T * scale + bias)) @ v in PyTorch's fused attention kernel; rows
    whose keys are all masked (-inf) give 0 (some kernels give NaN there, some 0)."""
    f = torch.nn.functional
    mask = bias if bias.dim() > 0 else bias.reshape(1, 1)
    out = f.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype), scale=scale)
    return _nanzero(torch, out)


def _attention(torch: Any, node: Node, args: list[Any]) -> tuple[Any, ...]:
    q, kt, v, bias = args
    return (_attend(torch, q, kt.transpose(-1, -2), v, bias, node.params["scale"]),)


def _gqa(torch: Any, node: Node, args: list[Any]) -> tuple[Any, ...]:
    q, kt, v, bias = args
    count = q.shape[1] // kt.shape[1]
    k, v = (t.repeat_interleave(count, dim=1) for t in (kt.transpose(-1, -2), v))
    return (_attend(torch, q, k, v, bias, node.params["scale"]),)


def _mha(torch: Any, node: Node, args: list[Any]) -> tuple[Any, ...]:
    x, w, b, bias = args
    batch, seq, _ = x.shape
    heads = node.params["heads"]
    qkv = torch.matmul(x, w).add_(b)
    q, k, v = (t.reshape(batch, seq, heads, -1).transpose(1, 2) for t in qkv.chunk(3, dim=-1))
    out = _attend(torch, q, k, v, bias, node.params["scale"])
    return (out.transpose(1, 2).reshape(batch, seq, -1),)


def _layernorm(torch: Any, x: Any, scale: Any, bias: Any, eps: float) -> Any:
    n = x.shape[-1]
    if tuple(scale.shape) == (n,) and tuple(bias.shape) == (n,):
        return torch.nn.functional.layer_norm(x, (n,), scale, bias, eps)
    return torch.nn.functional.layer_norm(x, (n,), None, None, eps) * scale + bias


def _skiplayernorm(torch: Any, node: Node, args: list[Any]) -> tuple[Any, ...]:
    x, skip, packed = args
    n = x.shape[-1]
    summed = x + skip if packed.shape[0] == 2 * n else (x + skip).add_(packed[2 * n :])
    return (_layernorm(torch, summed, packed[:n], packed[n : 2 * n], node.params["epsilon"]),)


def _rmsnorm(torch: Any, node: Node, args: list[Any]) -> tuple[Any, ...]:
    x, scale = args
    ms = (x * x).mean(dim=-1, keepdim=True).add_(node.params["epsilon"])
    return (x * torch.rsqrt(ms) * scale,)


def _rotary(torch: Any, node: Node, args: list[Any]) -> tuple[Any, ...]:
    x, cos, sin = args
    half = x.shape[-1] // 2
    if node.params["interleaved"]:
        rotated = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).reshape(x.shape)
        cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
    else:
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        cos, sin = torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
    return (x * cos + rotated * sin,)


def _slice(torch: Any, node: Node, args: list[Any]) -> tuple[Any, ...]:
    p = node.params
    (x,) = args
    axis = p["axis"] % x.dim()
    index = [slice(None)] * x.dim()
    index[axis] = slice(p["start"], p["end"], p["step"])
    return (x[tuple(index)],)


def _matmul_bias(torch: Any, node: Node, args: list[Any]) -> tuple[Any, ...]:
    a, w, b = args
    if a.dim() == 2 and w.dim() == 2 and b.dim() <= 2:  # one cuBLAS GEMM with the bias
        y = torch.addmm(b, a, w)
    else:
        y = torch.matmul(a, w).add_(b)
    return (activate(torch, y, node.params["activation"]),)


def _unary(fn: Callable[[Any, Any], Any]) -> Kernel:
    return lambda torch, node, args: (fn(torch, args[0]),)


def _binary(name: str) -> Kernel:
    return lambda torch, node, args: (getattr(torch, name)(args[0], args[1]),)


#: op -> kernel, for the operators the executor does not run in CuPy.
KERNELS: dict[str, Kernel] = {
    "matmul_bias": _matmul_bias,
    "relu6": _unary(lambda t, x: x.clamp(0.0, 6.0)),
    "ewsub": _binary("sub"),
    "ewdiv": _binary("div"),
    "ewpow": _binary("pow"),
    "sqrt": _unary(lambda t, x: t.sqrt(x)),
    "erf": _unary(lambda t, x: t.erf(x)),
    "reducemean": _unary(lambda t, x: x.mean(dim=-1, keepdim=True)),
    "softmax": _unary(lambda t, x: t.softmax(x, dim=-1)),
    "layernorm": lambda t, n, a: (_layernorm(t, a[0], a[1], a[2], n.params["epsilon"]),),
    "skiplayernorm": _skiplayernorm,
    "gelu": _unary(lambda t, x: t.nn.functional.gelu(x)),
    "gelu_tanh": _unary(lambda t, x: t.nn.functional.gelu(x, approximate="tanh")),
    "biasgelu": lambda t, n, a: (t.nn.functional.gelu(a[0] + a[1]),),
    "biasgelu_tanh": lambda t, n, a: (t.nn.functional.gelu(a[0] + a[1], approximate="tanh"),),
    "quickgelu": lambda t, n, a: (a[0] * t.sigmoid(n.params["alpha"] * a[0]),),
    "nanzero": _unary(_nanzero),
    "same": _unary(lambda t, x: x),
    "attention": _attention,
    "gqa": _gqa,
    "mha": _mha,
    "linear": lambda t, n, a: (t.matmul(a[0], a[1]),),
    "repeatkv": lambda t, n, a: (a[0].repeat_interleave(n.params["count"], dim=1),),
    "reciprocal": _unary(lambda t, x: t.reciprocal(x)),
    "neg": _unary(lambda t, x: t.neg(x)),
    "turnpairs": _unary(lambda t, x: t.stack([-x[..., 1::2], x[..., 0::2]], -1).reshape(x.shape)),
    "repeat2": _unary(lambda t, x: x.repeat_interleave(2, dim=-1)),
    "cos": _unary(lambda t, x: t.cos(x)),
    "sin": _unary(lambda t, x: t.sin(x)),
    "slice": _slice,
    "rmsnorm": _rmsnorm,
    "rotary": _rotary,
    "instancenorm": lambda t, n, a: (
        t.nn.functional.instance_norm(a[0], weight=a[1], bias=a[2], eps=n.params["epsilon"]),
    ),
    "groupnorm": lambda t, n, a: (
        t.nn.functional.group_norm(
            a[0], n.params["groups"], weight=a[1], bias=a[2], eps=n.params["epsilon"]
        ),
    ),
}
