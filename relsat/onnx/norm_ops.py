"""Normalizations of images between ONNX and relsat: InstanceNormalization and GroupNormalization.

Import (:data:`HANDLERS`): InstanceNormalization of a float tensor ``[N, C, D1, ...]`` (rank 3
or more) with a ``[C]`` scale and bias and an epsilon above 0 is ``instancenorm``;
GroupNormalization of opset 21 (a scale and a bias per channel, ``num_groups`` dividing the
channels, ``stash_type`` float32) is ``groupnorm``; onnx's checker refuses a model with the
GroupNormalization of opsets 18-20 (one scale per group, deprecated), so none is read. Anything
else stays opaque. torch writes ``nn.GroupNorm`` as InstanceNormalization between two
Reshapes below opset 21 (a scale of ones, a bias of zeros; the weight and bias a Mul and an Add
after it): ``rules/norm.rules`` fuses that into ``groupnorm`` and spells a ``groupnorm`` out the
same way, and the prices decide which is written.

Export (:func:`emit`): ``instancenorm`` as InstanceNormalization; ``groupnorm`` as
GroupNormalization at opset 21 and above (the exporter writes the model at 21 when the graph
holds one and its opaque nodes mean the same there), else spelled as torch spells it: Reshape to
``[N, G, L]``, InstanceNormalization with ones and zeros, Reshape back, Mul and Add by the
weight and bias viewed ``[C, 1, ...]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from onnx import NodeProto

from relsat.graph.builder import Tensor
from relsat.graph.graph import Node, Ref
from relsat.onnx.context import ExportContext, Handler, ImportContext, Unmapped

__all__ = ["EXPORTED", "FUSED", "GROUPNORM_OPSET", "HANDLERS", "emit"]

#: The first opset whose GroupNormalization takes a scale and a bias per channel.
GROUPNORM_OPSET = 21

# ---------------------------------------------------------------------------------------------
# Import


def _image(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> tuple[Tensor, float]:
    """The input ``[N, C, D1, ...]`` of a normalization and its epsilon (> 0)."""
    x = imp.tensor(node.input[0])
    eps = float(a.get("epsilon", 1e-5))
    if x.rank < 3 or not eps > 0:
        raise Unmapped
    return x, eps


def _vector(imp: ImportContext, node: NodeProto, i: int, n: int) -> Tensor:
    """Input ``i`` of ``node``, a float ``[n]`` tensor."""
    name = node.input[i] if len(node.input) > i else ""
    if not name or not imp.is_float(name):
        raise Unmapped
    t = imp.tensor(name)
    if t.shape != (n,):
        raise Unmapped
    return t


def _instancenorm(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    x, eps = _image(imp, node, a)
    c = x.shape[1]
    scale, bias = _vector(imp, node, 1, c), _vector(imp, node, 2, c)
    return {node.output[0]: imp.g.instancenorm(x, scale, bias, eps, name=node.output[0])}


def _groupnorm(imp: ImportContext, node: NodeProto, a: Mapping[str, Any]) -> dict[str, Tensor]:
    x, eps = _image(imp, node, a)
    groups, c = int(a.get("num_groups", 0)), x.shape[1]
    if groups < 1 or c % groups or a.get("stash_type", 1) != 1 or imp.opset < GROUPNORM_OPSET:
        raise Unmapped
    scale, bias = _vector(imp, node, 1, c), _vector(imp, node, 2, c)
    out = imp.g.groupnorm(x, scale, bias, groups, eps, name=node.output[0])
    return {node.output[0]: out}


#: Default-domain ONNX op_type → handler.
HANDLERS: dict[str, Handler] = {
    "InstanceNormalization": _instancenorm,
    "GroupNormalization": _groupnorm,
}

# ---------------------------------------------------------------------------------------------
# Export

#: The relsat ops :func:`emit` writes as one onnxruntime operator, with that operator
#: (GroupNormalization at opset 21, spelled out below it; onnxruntime's CPU provider runs it as
#: its function body), so that ``relsat rules check`` runs the rules holding one there too.
FUSED = {"instancenorm": "InstanceNormalization", "groupnorm": "GroupNormalization"}
#: The relsat ops :func:`emit` writes.
EXPORTED = frozenset(FUSED)


def emit(
    ex: ExportContext, op: str, params: Any, ins: list[str], outs: list[str], node: Node
) -> None:
    """Write relsat op ``op`` (one of :data:`EXPORTED`) as ONNX nodes of exporter ``ex``."""
    eps = float(params["epsilon"])
    if op == "instancenorm":
        ex.emit(FUSED[op], ins, outs, epsilon=eps)
    elif ex.opset >= GROUPNORM_OPSET:
        ex.emit(FUSED[op], ins, outs, num_groups=int(params["groups"]), epsilon=eps)
    else:
        _groupnorm_spelled(ex, ins, outs[0], node, int(params["groups"]), eps)


def _groupnorm_spelled(
    ex: ExportContext, ins: list[str], out: str, node: Node, groups: int, eps: float
) -> None:
    """GroupNorm as torch writes it below opset 21 (what ``rules/norm.rules`` fuses)."""
    x, scale, bias = ins
    shape = ex.graph.shape(node.inputs[0])
    n, c = shape[0], shape[1]
    rest = int(np.prod(shape)) // (n * groups)
    view, normed, back, scaled = (ex.fresh(f"{out}_{s}") for s in ("groups", "normed", "back", "w"))
    key = ("groupnorm-ones-zeros", groups)  # the instance norm's scale and bias: shared
    if key not in ex.memo:
        ex.memo[key] = ex.float_array("ones", np.ones(groups, np.float32))
        ex.memo[(*key, 0)] = ex.float_array("zeros", np.zeros(groups, np.float32))
    ones, zeros = ex.memo[key], ex.memo[(*key, 0)]
    ex.emit("Reshape", [x, ex.const("shape", [n, groups, rest])], [view])
    ex.emit("InstanceNormalization", [view, ones, zeros], [normed], epsilon=eps)
    ex.emit("Reshape", [normed, ex.const("shape", list(shape))], [back])
    channel = [c] + [1] * (len(shape) - 2)  # [C, 1, ...]: broadcast over x's channels
    weight, offset = (
        _channel_view(ex, name, ref, channel)
        for name, ref in zip((scale, bias), node.inputs[1:], strict=True)
    )
    ex.emit("Mul", [back, weight], [scaled])
    ex.emit("Add", [scaled, offset], [out])


def _channel_view(ex: ExportContext, name: str, ref: Ref, channel: list[int]) -> str:
    """A ``[C]`` vector viewed ``[C, 1, ...]``: an initializer when it is computed from weights,
    else a Reshape."""
    folded = ex.folded(ref)
    if folded is not None:
        return ex.float_array(f"{name}_channels", np.asarray(folded).reshape(channel))
    viewed = ex.fresh(f"{name}_channels")
    ex.emit("Reshape", [name, ex.const("shape", channel)], [viewed])
    return viewed
