"""ONNX operators → relsat operators: one handler per ONNX op_type, in :data:`HANDLERS`.

A handler ``fn(ctx, node, attrs)`` (:data:`~relsat.onnx.context.Handler`) returns ``{ONNX output
name: relsat tensor}`` for the outputs it maps, or raises :class:`~relsat.onnx.context.Unmapped`
when this node is kept as an opaque node instead (dilated conv, Gemm with alpha != 1, a pooling
window relsat cannot express, non-float tensors, ...). Partial work of a handler that gives up is
dead code that :meth:`Graph.reachable` drops.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from onnx import NodeProto, TensorProto

from relsat.graph.builder import Tensor
from relsat.graph.ops import conv_out_size, same_padding
from relsat.onnx.context import Handler, ImportContext, Unmapped, attrs_of, encode_tensor

__all__ = ["HANDLERS"]


# ---------------------------------------------------------------------------------------------
# Helpers


def _padding(
    imp: ImportContext,
    attrs: Mapping[str, Any],
    size: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    ceil_mode: bool = False,
) -> tuple[str | None, list[int]]:
    """TASO's padding mode for these ONNX pads ("SAME", "VALID", or None) and the pads."""
    auto = attrs.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads_begin, pads_end = [], []
        for h, k, s in zip(size, kernel, stride, strict=True):
            total = max((math.ceil(h / s) - 1) * s + k - h, 0)
            small = total // 2
            first = small if auto == "SAME_UPPER" else total - small
            pads_begin.append(first)
            pads_end.append(total - first)
        pads = pads_begin + pads_end
    elif auto == "VALID":
        pads = [0] * (2 * len(size))
    else:
        pads = list(attrs.get("pads", [0] * (2 * len(size))))
    modes = set()
    for i, (h, k, s) in enumerate(zip(size, kernel, stride, strict=True)):
        top, bottom = pads[i], pads[i + len(size)]
        span = h + top + bottom - k
        out = span // s + 1
        if ceil_mode and -(-span // s) + 1 != out:
            return None, pads
        ok = set()
        if top == 0 and out == conv_out_size(h, k, s, "VALID"):
            ok.add("VALID")
        if top == same_padding(h, k, s) and out == conv_out_size(h, k, s, "SAME"):
            ok.add("SAME")
        modes.add(frozenset(ok))
    common = frozenset.intersection(*modes)
    # Both can hold (a 1x1 kernel, a window that needs no padding): the windows are the same,
    # and SAME is what TASO's conv rules spell, so a pointwise conv meets its 3x3 siblings.
    if "SAME" in common:
        return "SAME", pads
    if "VALID" in common:
        return "VALID", pads
    return None, pads


def _pad_opaque(imp: ImportContext, x: Tensor, pads: list[int]) -> Tensor:
    """An ONNX Pad (zeros) of the spatial dims of ``x``, kept opaque."""
    full = [0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]]
    opset = imp.opset
    shape = [
        x.shape[0],
        x.shape[1],
        x.shape[2] + pads[0] + pads[2],
        x.shape[3] + pads[1] + pads[3],
    ]
    attrs: dict[str, Any] = {"mode": "constant"}
    types = {"mode": "STRING"}
    layout: list[Any] = ["t"]
    if opset < 11:
        attrs["pads"] = full
        types["pads"] = "INTS"
    else:
        layout.append(encode_tensor(np.array(full, dtype=np.int64), TensorProto.INT64))
    attrs["_onnx"] = {
        "domain": "",
        "opset": opset,
        "types": types,
        "inputs": layout,
        "outputs": [1],
    }
    return imp.g.opaque("Pad", [x], [shape], attrs)[0]


# ---------------------------------------------------------------------------------------------
# Handlers


def _conv(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    """A Conv is conv2d, or conv2d_bias with its bias input. (A following activation, bias add
    or BatchNormalization is fused by rules: rules/bias.rules.)"""
    x = imp.tensor(node.input[0])
    w_shape = imp.static_shape(node.input[1])
    if x.rank != 4 or w_shape is None or len(w_shape) != 4:
        raise Unmapped
    if any(d != 1 for d in a.get("dilations", [1, 1])):
        raise Unmapped
    kernel, stride = w_shape[2:], list(a.get("strides", [1, 1]))
    if x.shape[1] != a.get("group", 1) * w_shape[1]:
        raise Unmapped
    mode, pads = _padding(imp, a, x.shape[2:], kernel, stride)
    bias_name = node.input[2] if len(node.input) > 2 else ""
    bias = _channel_bias(imp, bias_name) if bias_name else None
    if mode is None:
        x = _pad_opaque(imp, x, pads)
        mode = "VALID"
    w, name = imp.tensor(node.input[1]), node.output[0]
    if bias is None:
        return {name: imp.g.conv2d(x, w, stride, mode, name=name)}
    return {name: imp.g.conv2d_bias(x, w, bias, stride, mode, name=name)}


def _clip_bounds(imp: ImportContext, node: NodeProto) -> tuple[float, float] | None:
    """A Clip's (min, max) when both are known constants (attributes before opset 11)."""
    a = attrs_of(node)
    if "min" in a or "max" in a:
        return float(a.get("min", -np.inf)), float(a.get("max", np.inf))
    bounds = []
    for i in (1, 2):
        name = node.input[i] if len(node.input) > i else ""
        value = imp.const(name)
        if name and (value is None or value.size != 1):
            return None
        bounds.append(float(value.reshape(-1)[0]) if value is not None else None)
    low, high = bounds
    return (-np.inf if low is None else low), (np.inf if high is None else high)


def _channel_bias(imp: ImportContext, name: str) -> Tensor:
    """A Conv's per-channel bias as a [1, C, 1, 1] tensor (a weight when constant)."""
    arr = imp.const(name)
    if arr is not None:
        if arr.dtype != np.float32:
            raise Unmapped
        return imp.derived_weight(name, "4d", lambda: arr.reshape(1, -1, 1, 1))
    t = imp.tensor(name)
    return imp.g.reshape(t, [1, t.shape[0], 1, 1])


def _pool(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    x = imp.tensor(node.input[0])
    if x.rank != 4 or (len(node.output) > 1 and node.output[1] and imp.readers(node.output[1])):
        raise Unmapped
    if any(d != 1 for d in a.get("dilations", [1, 1])):
        raise Unmapped
    kernel, stride = list(a["kernel_shape"]), list(a.get("strides", [1, 1]))
    mode, pads = _padding(imp, a, x.shape[2:], kernel, stride, bool(a.get("ceil_mode", 0)))
    is_max = node.op_type == "MaxPool"
    if mode is None or (not is_max and any(pads) and a.get("count_include_pad", 0)):
        raise Unmapped
    pool = imp.g.maxpool2d if is_max else imp.g.avgpool2d
    return {node.output[0]: pool(x, kernel, stride, mode, name=node.output[0])}


def _global_pool(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    x = imp.tensor(node.input[0])
    if x.rank != 4:
        raise Unmapped
    pool = imp.g.maxpool2d if node.op_type == "GlobalMaxPool" else imp.g.avgpool2d
    return {node.output[0]: pool(x, x.shape[2:], 1, "VALID", name=node.output[0])}


def _gemm(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    c_name = node.input[2] if len(node.input) > 2 else ""
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    w_value, c = imp.const(node.input[1]), imp.const(c_name)
    # alpha and beta are folded into the constant they scale (alpha·(A·B) = A·(alpha·B)).
    if (alpha != 1.0 and w_value is None) or (c_name and beta != 1.0 and c is None):
        raise Unmapped
    x = imp.tensor(node.input[0])
    if alpha == 1.0:
        w = imp.tensor(node.input[1])
    else:
        if w_value is None or not imp.is_float(node.input[1]):
            raise Unmapped
        w_scaled = w_value * np.float32(alpha)
        w = imp.derived_weight(node.input[1], f"x{alpha:g}", lambda: w_scaled)
    if a.get("transA", 0):
        x = imp.g.transpose(x, (1, 0))
    if a.get("transB", 0):
        w = imp.g.transpose(w, (1, 0))
    name, n = node.output[0], w.shape[-1]
    scale = "" if beta == 1.0 else f"_x{beta:g}"
    if c_name and c is not None and c.dtype == np.float32 and c.size == n and c.shape[-1:] == (n,):
        bias = imp.derived_weight(c_name, "1d" + scale, lambda: c.reshape(n) * np.float32(beta))
        return {name: imp.g.matmul_bias(x, w, bias, name=name)}
    y = imp.g.matmul(x, w, name=None if c_name else name)
    if not c_name:
        return {name: y}
    if beta == 1.0:
        return {name: imp.g.add(y, imp.tensor(c_name), name=name)}
    if c is None or not imp.is_float(c_name):
        raise Unmapped
    c_scaled = c * np.float32(beta)
    addend = imp.derived_weight(c_name, scale[1:], lambda: c_scaled)
    return {name: imp.g.add(y, addend, name=name)}


def _matmul(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    """A MatMul is matmul; [..., K] @ [K, N] folds the leading dims into rows around it. (A
    following bias add is fused by rules: rules/bias.rules.)"""
    x, w = imp.tensor(node.input[0]), imp.tensor(node.input[1])
    name = node.output[0]
    folded = x.rank > 2 and w.rank == 2  # [..., K] @ [K, N]: fold the leading dims into rows
    if not folded and not (x.rank >= 2 and x.rank == w.rank and x.shape[:-2] == w.shape[:-2]):
        raise Unmapped
    if not folded:
        return {name: imp.g.matmul(x, w, name=name)}
    rows = imp.g.reshape(x, [math.prod(x.shape[:-1]), x.shape[-1]])
    y = imp.g.matmul(rows, w)
    return {name: imp.g.reshape(y, [*x.shape[:-1], w.shape[1]], name=name)}


def _binary(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    x, y = imp.tensor(node.input[0]), imp.tensor(node.input[1])
    op = imp.g.add if node.op_type == "Add" else imp.g.mul
    return {node.output[0]: op(x, y, name=node.output[0])}


def _sum(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    """Sum of one or more tensors (the ONNX model zoo's residual joins) as a chain of adds."""
    total, *rest = (imp.tensor(n) for n in node.input)
    for i, x in enumerate(rest, 1):
        total = imp.g.add(total, x, name=node.output[0] if i == len(rest) else None)
    return {node.output[0]: total}


def _clip(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    if _clip_bounds(imp, node) != (0.0, 6.0) or not imp.is_float(node.output[0]):
        raise Unmapped
    return {node.output[0]: imp.g.relu6(imp.tensor(node.input[0]), name=node.output[0])}


def _unary(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    fn = {"Relu": imp.g.relu, "Tanh": imp.g.tanh, "Sigmoid": imp.g.sigmoid}[node.op_type]
    return {node.output[0]: fn(imp.tensor(node.input[0]), name=node.output[0])}


def _concat(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    xs = [imp.tensor(n) for n in node.input]
    if len(xs) == 1:
        return {node.output[0]: xs[0]}
    axis = a["axis"] % xs[0].rank
    return {node.output[0]: imp.g.concat(axis, xs, name=node.output[0])}


def _split(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    x = imp.tensor(node.input[0])
    axis = a.get("axis", 0) % x.rank
    shapes = [imp.inferred_shape(o) for o in node.output]
    if any(s is None for s in shapes) or any(not o for o in node.output):
        raise Unmapped
    if len(shapes) == 1:
        return {node.output[0]: x}
    sizes = [s[axis] for s in shapes]  # type: ignore[index]
    pieces = imp.g.split(x, axis, sizes, name=node.name or node.output[0])
    return dict(zip(node.output, pieces, strict=True))


def _reshape_to(
    imp: ImportContext, x: Tensor, name: str, shape: Sequence[int] | None
) -> dict[str, Tensor]:
    """``x`` reshaped to ``shape`` (None: as ONNX infers ``name``); ``x`` itself at its own
    shape. (The layout chains around repeated heads and merged heads are rules:
    rules/decoder.rules, rules/layout.rules.)"""
    if shape is None:
        shape = imp.inferred_shape(name)
    if shape is None:
        raise Unmapped
    if list(shape) == list(x.shape):
        return {name: x}
    return {name: imp.g.reshape(x, shape, name=name)}


def _reshape(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    x = imp.view_input(node.input[0])
    spec = imp.const(node.input[1])
    shape: list[int] | None = None
    if spec is not None:
        if a.get("allowzero", 0) and 0 in spec.tolist():
            raise Unmapped
        shape = [x.shape[i] if d == 0 else int(d) for i, d in enumerate(spec.tolist())]
        if -1 in shape:
            known = math.prod(d for d in shape if d != -1)
            shape[shape.index(-1)] = math.prod(x.shape) // max(known, 1)
    return _reshape_to(imp, x, node.output[0], shape)


def _flatten(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    x = imp.view_input(node.input[0])
    axis = a.get("axis", 1) + x.rank if a.get("axis", 1) < 0 else a.get("axis", 1)  # [-r, r]
    shape = [math.prod(x.shape[:axis]), math.prod(x.shape[axis:])]
    return _reshape_to(imp, x, node.output[0], shape)


def _squeeze(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    return _reshape_to(imp, imp.tensor(node.input[0]), node.output[0], None)


def _transpose(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    x = imp.tensor(node.input[0])
    perm = a.get("perm", list(range(x.rank))[::-1])
    return {node.output[0]: imp.g.transpose(x, perm, name=node.output[0])}


def _identity(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    if len(node.output) > 1 and node.output[1] and imp.readers(node.output[1]):
        raise Unmapped  # Dropout's mask is read
    return {node.output[0]: imp.tensor(node.input[0])}


def _pad_nothing(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    """A Pad whose pads are all constant zeros returns its input, whatever its mode (Swin's
    window padding of a size the window divides; an opaque Pad would be written back)."""
    pads = a.get("pads")  # an attribute before opset 11, an input since
    if pads is None:
        pads = imp.const(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    if pads is None or np.any(np.asarray(pads) != 0):
        raise Unmapped
    return {node.output[0]: imp.tensor(node.input[0])}


def _batchnorm(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    extra = [o for o in node.output[1:] if o and imp.readers(o)]
    if a.get("training_mode", 0) or extra:
        raise Unmapped
    if len(node.input) != 5:
        raise Unmapped
    x, scale, bias, mean, var = (imp.tensor(n) for n in node.input)
    eps = a.get("epsilon", 1e-5)
    y = imp.g.batchnorm(x, scale, bias, mean, var, epsilon=eps, name=node.output[0])
    return {node.output[0]: y}


#: ONNX op_type → handler (default domain only).
HANDLERS: dict[str, Handler] = {
    "Conv": _conv,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _global_pool,
    "GlobalMaxPool": _global_pool,
    "Gemm": _gemm,
    "MatMul": _matmul,
    "Add": _binary,
    "Mul": _binary,
    "Sum": _sum,
    "Relu": _unary,
    "Tanh": _unary,
    "Sigmoid": _unary,
    "Clip": _clip,
    "Concat": _concat,
    "Split": _split,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Squeeze": _squeeze,
    "Unsqueeze": _squeeze,
    "Transpose": _transpose,
    "Identity": _identity,
    "Dropout": _identity,
    "Pad": _pad_nothing,
    "BatchNormalization": _batchnorm,
}
