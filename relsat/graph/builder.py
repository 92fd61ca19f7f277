"""The graph builder: :class:`GraphBuilder` builds a :class:`~relsat.graph.graph.graph.Graph` call
by
call, in the style of TASO's Python front end; every call checks shapes and parameters and raises
:class:`~relsat.errors.GraphError` naming the node, the op and the input shapes:

>>> g = GraphBuilder()
>>> x = g.input([1, 64, 56, 56])
>>> y = g.conv2d(x, g.weight([64, 64, 3, 3]), padding="SAME", activation="RELU")
>>> g.build(y).shape(g.build(y).outputs[0])
(1, 64, 56, 56)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from relsat.errors import GraphError
from relsat.graph.graph import Graph, Node, Ref
from relsat.graph.ops import ACTIVATIONS, PADDINGS, OpError, Params, TensorType, f32, infer

__all__ = ["GraphBuilder", "Tensor", "canonical_attrs"]


def canonical_attrs(attrs: Mapping[str, Any]) -> str:
    """Opaque-op attributes as canonical JSON text (sorted keys, no spaces): hashable, stable."""
    try:
        return json.dumps(dict(attrs), sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise GraphError(
            f"opaque attributes are not JSON-serializable: {exc}", op="opaque"
        ) from None


@dataclass(frozen=True)
class Tensor:
    """A builder handle to one output of a node under construction."""

    builder: GraphBuilder = field(repr=False, compare=False)
    ref: Ref
    type: TensorType

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def rank(self) -> int:
        return self.type.rank

    def dim(self, i: int) -> int:
        return self.type.shape[i]

    def __add__(self, other: Tensor) -> Tensor:
        return self.builder.add(self, other)

    def __mul__(self, other: Tensor) -> Tensor:
        return self.builder.mul(self, other)

    def __matmul__(self, other: Tensor) -> Tensor:
        return self.builder.matmul(self, other)


def _activation(value: str | int) -> str:
    if isinstance(value, int) and 0 <= value < len(ACTIVATIONS):
        return ACTIVATIONS[value]
    return str(value).upper()


def _padding(value: str | int) -> str:
    if isinstance(value, int) and 0 <= value < len(PADDINGS):
        return PADDINGS[value]
    return str(value).upper()


def _pair(value: int | Sequence[int]) -> tuple[int, ...]:
    return (value, value) if isinstance(value, int) else tuple(value)


class GraphBuilder:
    """Builds a :class:`Graph` call by call, in the style of TASO's Python API."""

    def __init__(self) -> None:
        self._nodes: list[Node] = []
        self._values: dict[str, np.ndarray] = {}
        self._names: set[str] = set()
        self._counts = {"input": 0, "weight": 0}

    # --- generic --------------------------------------------------------------------------

    def add_node(
        self,
        op: str,
        inputs: Sequence[Tensor],
        params: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
    ) -> tuple[Tensor, ...]:
        """Append one node after validating it; returns one handle per output."""
        node_id = len(self._nodes)
        for t in inputs:
            if not isinstance(t, Tensor) or t.builder is not self:
                raise GraphError(
                    "input is not a tensor of this graph", node=node_id, op=op, name=name
                )
        p = Params(params or {})
        in_types = [t.type for t in inputs]
        shapes = [t.shape for t in inputs]
        try:
            outputs = infer(op, p, in_types)
        except OpError as exc:
            raise GraphError(str(exc), node=node_id, op=op, name=name, shapes=shapes) from None
        if op != "noop" and any(self._nodes[t.ref.node].op == "noop" for t in inputs):
            raise GraphError(
                "a noop output (no tensor) can only feed another noop",
                node=node_id,
                op=op,
                name=name,
                shapes=shapes,
            )
        if op == "conv2d":
            self._check_merged_weight(inputs, node_id, name)
        node = Node(node_id, op, p, tuple(t.ref for t in inputs), outputs, name)
        self._nodes.append(node)
        return tuple(Tensor(self, Ref(node_id, i), t) for i, t in enumerate(outputs))

    def producer(self, t: Tensor) -> tuple[Node, tuple[Tensor, ...]]:
        """The node that computes ``t`` and handles to its inputs: how a graph under
        construction spelled ``t`` (an importer reading through shape ops)."""
        node = self._nodes[t.ref.node]
        ins = tuple(Tensor(self, r, self._nodes[r.node].outputs[r.index]) for r in node.inputs)
        return node, ins

    def _one(
        self, op: str, inputs: Sequence[Tensor], name: str | None = None, **params: Any
    ) -> Tensor:
        return self.add_node(op, inputs, params, name=name)[0]

    def _leaf(self, op: str, shape: Sequence[int], name: str | None) -> Tensor:
        if name is None:
            prefix = "input" if op == "input" else "w"
            while f"{prefix}{self._counts[op]}" in self._names:
                self._counts[op] += 1
            name = f"{prefix}{self._counts[op]}"
        if name in self._names:
            raise GraphError(f"duplicate tensor name {name!r}", node=len(self._nodes), op=op)
        try:
            shape = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise GraphError(
                f"shape {shape!r} is not a list of integers",
                node=len(self._nodes),
                op=op,
                name=name,
            ) from None
        tensor = self._one(op, [], name, shape=shape)
        self._names.add(name)
        self._counts[op] += 1
        return tensor

    def _check_merged_weight(
        self, inputs: Sequence[Tensor], node_id: int, name: str | None
    ) -> None:
        """conv(x, merge(w, c)): the conv w had before merging must have been valid too."""
        ref, count = inputs[1].ref, 1
        while self._nodes[ref.node].op == "merge":
            count *= self._nodes[ref.node].params["count"]
            ref = self._nodes[ref.node].inputs[0]
        if count == 1:
            return
        o, cw = self._nodes[ref.node].outputs[ref.index].shape[:2]
        old_groups = inputs[0].shape[1] // cw
        if o % old_groups:
            raise GraphError(
                f"merged weight: {o} output channels not divisible by the "
                f"{old_groups} groups before merging",
                node=node_id,
                op="conv2d",
                name=name,
                shapes=[inputs[0].shape, inputs[1].shape],
            )

    # --- leaves ---------------------------------------------------------------------------

    def input(self, shape: Sequence[int], name: str | None = None) -> Tensor:
        """A graph input (named ``input<k>`` unless ``name`` is given)."""
        return self._leaf("input", shape, name)

    def weight(
        self, shape: Sequence[int], name: str | None = None, value: np.ndarray | None = None
    ) -> Tensor:
        """A constant (named ``w<k>``); ``value`` gives real data, else executors draw it."""
        tensor = self._leaf("weight", shape, name)
        if value is not None:
            arr = np.asarray(value, dtype=np.float32)
            if arr.shape != tensor.shape:
                raise GraphError(
                    f"value shape {list(arr.shape)} differs from declared shape",
                    node=tensor.ref.node,
                    op="weight",
                    shapes=[tensor.shape],
                )
            self._values[self._nodes[tensor.ref.node].name or ""] = arr
        return tensor

    # --- operators ------------------------------------------------------------------------

    def conv2d(
        self,
        x: Tensor,
        w: Tensor,
        stride: int | Sequence[int] = 1,
        padding: str | int = "SAME",
        activation: str | int = "NONE",
        name: str | None = None,
    ) -> Tensor:
        """Grouped conv: groups = x channels / w dim 1; output ``[N, w.O, H', W']``."""
        return self._one(
            "conv2d",
            [x, w],
            name,
            stride=_pair(stride),
            padding=_padding(padding),
            activation=_activation(activation),
        )

    def conv2d_bias(
        self,
        x: Tensor,
        w: Tensor,
        bias: Tensor,
        stride: int | Sequence[int] = 1,
        padding: str | int = "SAME",
        activation: str | int = "NONE",
        name: str | None = None,
    ) -> Tensor:
        """``conv2d(x, w) + bias`` then the activation, as one fused op; ``bias`` is
        ``[1, O, 1, 1]``. (Seven parameters: the op's three inputs and its three parameters, as
        :meth:`conv2d` takes them, plus the name.)"""
        return self._one(
            "conv2d_bias",
            [x, w, bias],
            name,
            stride=_pair(stride),
            padding=_padding(padding),
            activation=_activation(activation),
        )

    def matmul(
        self, a: Tensor, b: Tensor, activation: str | int = "NONE", name: str | None = None
    ) -> Tensor:
        return self._one("matmul", [a, b], name, activation=_activation(activation))

    def matmul_bias(
        self,
        a: Tensor,
        b: Tensor,
        bias: Tensor,
        activation: str | int = "NONE",
        name: str | None = None,
    ) -> Tensor:
        """``a @ b + bias`` then the activation, as one fused op; ``bias`` is ``[N]``."""
        return self._one("matmul_bias", [a, b, bias], name, activation=_activation(activation))

    def add(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """TENSAT's ``ewadd``."""
        return self._one("ewadd", [a, b], name)

    def mul(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """TENSAT's ``ewmul``."""
        return self._one("ewmul", [a, b], name)

    ewadd = add
    ewmul = mul

    def relu(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._one("relu", [x], name)

    def relu6(self, x: Tensor, name: str | None = None) -> Tensor:
        """``min(max(x, 0), 6)`` (ONNX ``Clip(0, 6)``)."""
        return self._one("relu6", [x], name)

    def tanh(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._one("tanh", [x], name)

    def sigmoid(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._one("sigmoid", [x], name)

    def dropout(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._one("dropout", [x], name)

    def maxpool2d(
        self,
        x: Tensor,
        kernel: int | Sequence[int],
        stride: int | Sequence[int],
        padding: str | int = "VALID",
        activation: str | int = "NONE",
        name: str | None = None,
    ) -> Tensor:
        """2-D max pooling (TENSAT's ``poolmax``)."""
        return self._pool("poolmax", x, kernel, stride, padding, activation, name)

    def avgpool2d(
        self,
        x: Tensor,
        kernel: int | Sequence[int],
        stride: int | Sequence[int],
        padding: str | int = "VALID",
        activation: str | int = "NONE",
        name: str | None = None,
    ) -> Tensor:
        """2-D average pooling, padding excluded from the divisor (TENSAT's ``poolavg``)."""
        return self._pool("poolavg", x, kernel, stride, padding, activation, name)

    def _pool(
        self,
        op: str,
        x: Tensor,
        kernel: int | Sequence[int],
        stride: int | Sequence[int],
        padding: str | int,
        activation: str | int,
        name: str | None,
    ) -> Tensor:
        return self._one(
            op,
            [x],
            name,
            kernel=_pair(kernel),
            stride=_pair(stride),
            padding=_padding(padding),
            activation=_activation(activation),
        )

    def concat(self, axis: int, inputs: Sequence[Tensor], name: str | None = None) -> Tensor:
        return self._one("concat", list(inputs), name, axis=axis)

    def split(
        self, x: Tensor, axis: int, sizes: Sequence[int], name: str | None = None
    ) -> tuple[Tensor, ...]:
        """Cut ``x`` along ``axis`` into pieces of the given sizes."""
        return self.add_node("split", [x], {"axis": axis, "sizes": tuple(sizes)}, name=name)

    def split_at_concat(
        self, x: Tensor, axis: int, name: str | None = None
    ) -> tuple[Tensor, Tensor]:
        """TENSAT's ``split``: two pieces, cut at the most recent concat boundary on ``axis``."""
        if not -x.rank <= axis < x.rank:
            raise GraphError(
                f"axis {axis} out of range",
                node=len(self._nodes),
                op="split",
                name=name,
                shapes=[x.shape],
            )
        history = x.type.splits[axis % x.rank]
        if not history:
            raise GraphError(
                f"no concat boundary recorded on axis {axis}",
                node=len(self._nodes),
                op="split",
                name=name,
                shapes=[x.shape],
            )
        mid = history[-1]
        a, b = self.split(x, axis, [mid, x.shape[axis] - mid], name=name)
        return a, b

    def reshape(self, x: Tensor, shape: Sequence[int], name: str | None = None) -> Tensor:
        return self._one("reshape", [x], name, shape=tuple(shape))

    def expand(self, x: Tensor, shape: Sequence[int], name: str | None = None) -> Tensor:
        """``x`` broadcast to ``shape`` (ONNX Expand)."""
        return self._one("expand", [x], name, shape=tuple(shape))

    def transpose(
        self, x: Tensor, perm: Sequence[int], shuffle: bool = True, name: str | None = None
    ) -> Tensor:
        return self._one("transpose", [x], name, perm=tuple(perm), shuffle=shuffle)

    def enlarge(self, w: Tensor, ref: Tensor, name: str | None = None) -> Tensor:
        return self._one("enlarge", [w, ref], name)

    def merge(self, w: Tensor, count: int, name: str | None = None) -> Tensor:
        """TASO's ``merge_gconv``: the weight of the consuming conv with groups / count."""
        return self._one("merge", [w], name, count=count)

    merge_gconv = merge

    def noop(self, *xs: Tensor, name: str | None = None) -> Tensor:
        """Join several outputs under one root (TENSAT's BERT)."""
        return self._one("noop", list(xs), name)

    def batchnorm(
        self,
        x: Tensor,
        scale: Tensor,
        bias: Tensor,
        mean: Tensor,
        var: Tensor,
        epsilon: float = 1e-5,
        name: str | None = None,
    ) -> Tensor:
        """Inference batch normalization (ONNX BatchNormalization): its five inputs, its
        epsilon and the name, as ONNX orders them."""
        return self._one("batchnorm", [x, scale, bias, mean, var], name, epsilon=f32(epsilon))

    # --- transformer operators --------------------------------------------------------------

    def scalar(self, value: float, name: str | None = None) -> Tensor:
        """A float32 constant of shape ``[]`` (rank 0); ``value`` is rounded to float32."""
        return self._one("scalar", [], name, value=f32(value))

    def sub(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """``a - b`` (broadcasting)."""
        return self._one("ewsub", [a, b], name)

    def div(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """``a / b`` (broadcasting)."""
        return self._one("ewdiv", [a, b], name)

    def pow(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """``a ** b`` (broadcasting; ONNX ``Pow``)."""
        return self._one("ewpow", [a, b], name)

    ewsub = sub
    ewdiv = div
    ewpow = pow

    def sqrt(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._one("sqrt", [x], name)

    def erf(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._one("erf", [x], name)

    def reducemean(self, x: Tensor, name: str | None = None) -> Tensor:
        """The mean over the last axis, kept as a dim of size 1."""
        return self._one("reducemean", [x], name)

    def softmax(self, x: Tensor, name: str | None = None) -> Tensor:
        """Softmax over the last axis."""
        return self._one("softmax", [x], name)

    def layernorm(
        self,
        x: Tensor,
        scale: Tensor,
        bias: Tensor,
        epsilon: float = 1e-5,
        name: str | None = None,
    ) -> Tensor:
        """Layer normalization over the last axis; ``scale`` and ``bias`` are ``[N]``."""
        return self._one("layernorm", [x, scale, bias], name, epsilon=f32(epsilon))

    def skiplayernorm(
        self,
        x: Tensor,
        skip: Tensor,
        scale_bias: Tensor,
        epsilon: float = 1e-5,
        name: str | None = None,
    ) -> Tensor:
        """``layernorm(x + skip)`` as one fused op; ``scale_bias`` is scale and bias packed as one
        ``[2N]`` tensor (``concat(0, [scale, bias])``), ``skip`` the shape of ``x``."""
        return self._one("skiplayernorm", [x, skip, scale_bias], name, epsilon=f32(epsilon))

    def gelu(self, x: Tensor, approximate: str = "none", name: str | None = None) -> Tensor:
        """GELU: exact (erf, ``approximate="none"``) or the tanh approximation (``"tanh"``)."""
        if approximate not in ("none", "tanh"):
            raise GraphError(
                f"approximate={approximate!r} must be 'none' or 'tanh'", op="gelu", name=name
            )
        return self._one("gelu" if approximate == "none" else "gelu_tanh", [x], name)

    def biasgelu(
        self, x: Tensor, bias: Tensor, approximate: str = "none", name: str | None = None
    ) -> Tensor:
        """``gelu(x + bias)`` as one fused op, exact (erf, ``approximate="none"``: BiasGelu) or
        the tanh approximation (``"tanh"``: FastGelu with its bias); ``bias`` is ``[N]``."""
        if approximate not in ("none", "tanh"):
            raise GraphError(
                f"approximate={approximate!r} must be 'none' or 'tanh'", op="biasgelu", name=name
            )
        return self._one("biasgelu" if approximate == "none" else "biasgelu_tanh", [x, bias], name)

    def quickgelu(self, x: Tensor, alpha: float = 1.702, name: str | None = None) -> Tensor:
        """``x * sigmoid(alpha * x)`` as one fused op (CLIP's quick_gelu; SiLU at ``alpha=1``);
        ``alpha`` is rounded to float32."""
        return self._one("quickgelu", [x], name, alpha=f32(alpha))

    def nanzero(self, x: Tensor, name: str | None = None) -> Tensor:
        """``x`` with NaN replaced by 0 (ONNX ``Where(IsNaN(x), 0, x)``)."""
        return self._one("nanzero", [x], name)

    def same(self, x: Tensor, name: str | None = None) -> Tensor:
        """``x`` itself (a rule's right-hand side that is one of its variables); exported as
        nothing."""
        return self._one("same", [x], name)

    def attention(
        self,
        q: Tensor,
        kt: Tensor,
        v: Tensor,
        bias: Tensor,
        scale: float,
        name: str | None = None,
    ) -> Tensor:
        """Scaled dot-product attention as one fused op: ``nanzero(softmax(q @ kt * scale +
        bias)) @ v`` on head-split tensors, ``q`` ``[B, H, S, D]``, ``kt`` the keys transposed
        ``[B, H, D, T]``, ``v`` ``[B, H, T, Dv]``, ``bias`` (the additive mask) broadcast to
        ``[B, H, S, T]``; a row masked entirely (all ``-inf``) gives zeros."""
        return self._one("attention", [q, kt, v, bias], name, scale=f32(scale))

    def mha(
        self,
        x: Tensor,
        w: Tensor,
        b: Tensor,
        bias: Tensor,
        heads: int,
        scale: float,
        name: str | None = None,
    ) -> Tensor:
        """Multi-head self-attention with packed input projections (com.microsoft Attention):
        ``x [B, S, E] @ w [E, 3 * heads * D] + b`` split into q, k and v, each into ``heads``
        heads, then :meth:`attention` (``scale``, ``bias`` broadcast to ``[B, heads, S, S]``),
        the heads merged back: ``[B, S, heads * D]``."""
        return self._one("mha", [x, w, b, bias], name, heads=heads, scale=f32(scale))

    def linear(self, x: Tensor, w: Tensor, name: str | None = None) -> Tensor:
        """``x [..., K] @ w [K, N]`` over any leading dims (ONNX MatMul with a 2-D weight)."""
        return self._one("linear", [x, w], name)

    # --- LLM decoder operators ---------------------------------------------------------------

    def gqa(
        self,
        q: Tensor,
        kt: Tensor,
        v: Tensor,
        bias: Tensor,
        scale: float,
        name: str | None = None,
    ) -> Tensor:
        """Grouped-query attention as one fused op: :meth:`attention` with ``kt`` ``[B, Hkv, D,
        T]`` and ``v`` ``[B, Hkv, T, Dv]``, ``Hkv`` dividing ``q``'s heads ``H``; key/value head
        ``j`` serves query heads ``j * H / Hkv`` to ``(j + 1) * H / Hkv - 1``."""
        return self._one("gqa", [q, kt, v, bias], name, scale=f32(scale))

    def repeatkv(self, x: Tensor, count: int, name: str | None = None) -> Tensor:
        """Each head of ``x`` ``[B, H, T, D]`` repeated ``count`` times in place, ``[B,
        H * count, T, D]`` (transformers' ``repeat_kv``)."""
        return self._one("repeatkv", [x], name, count=count)

    def reciprocal(self, x: Tensor, name: str | None = None) -> Tensor:
        """``1 / x`` (ONNX ``Reciprocal``)."""
        return self._one("reciprocal", [x], name)

    def neg(self, x: Tensor, name: str | None = None) -> Tensor:
        """``-x`` (ONNX ``Neg``)."""
        return self._one("neg", [x], name)

    def turnpairs(self, x: Tensor, name: str | None = None) -> Tensor:
        """The pairs ``(x[2i], x[2i+1])`` of the last axis (even) turned to ``(-x[2i+1],
        x[2i])`` (GPT-J's ``rotate_every_two``)."""
        return self._one("turnpairs", [x], name)

    def repeat2(self, x: Tensor, name: str | None = None) -> Tensor:
        """Each entry of the last axis twice in place, ``[..., N]`` → ``[..., 2N]``."""
        return self._one("repeat2", [x], name)

    def cos(self, x: Tensor, name: str | None = None) -> Tensor:
        """``cos(x)`` (ONNX ``Cos``)."""
        return self._one("cos", [x], name)

    def sin(self, x: Tensor, name: str | None = None) -> Tensor:
        """``sin(x)`` (ONNX ``Sin``)."""
        return self._one("sin", [x], name)

    def slice(
        self, x: Tensor, axis: int, start: int, end: int, step: int = 1, name: str | None = None
    ) -> Tensor:
        """``x[start:end:step]`` along ``axis`` (negative: from the last);
        ``0 <= start < end <= dim``, ``step >= 1``."""
        if isinstance(axis, int) and -x.rank <= axis < 0:
            axis += x.rank
        return self._one("slice", [x], name, axis=axis, start=start, end=end, step=step)

    def rmsnorm(
        self, x: Tensor, scale: Tensor, epsilon: float = 1e-6, name: str | None = None
    ) -> Tensor:
        """RMS normalization over the last axis as one fused op: ``x / sqrt(mean(x^2) +
        epsilon) * scale``, ``scale`` ``[N]``."""
        return self._one("rmsnorm", [x, scale], name, epsilon=f32(epsilon))

    def rotary(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        interleaved: bool = False,
        name: str | None = None,
    ) -> Tensor:
        """Rotary position embedding over the last axis (``D`` even) as one fused op; ``cos``
        and ``sin`` are the half-width tables ``[..., D/2]``, broadcast to ``x`` without
        enlarging it. Not interleaved (Llama): ``x * [cos, cos] + [-x2, x1] * [sin, sin]`` with
        ``x1, x2`` the halves of ``x``; interleaved (GPT-J): the pairs ``(x[2i], x[2i+1])``
        rotate by ``(cos[i], sin[i])``."""
        return self._one("rotary", [x, cos, sin], name, interleaved=int(bool(interleaved)))

    # --- normalizations of images ------------------------------------------------------------

    def instancenorm(
        self,
        x: Tensor,
        scale: Tensor,
        bias: Tensor,
        epsilon: float = 1e-5,
        name: str | None = None,
    ) -> Tensor:
        """Instance normalization of ``x`` ``[N, C, D1, ...]`` (ONNX ``InstanceNormalization``):
        each sample's channel normalized over its positions, then ``* scale + bias``, ``[C]``
        each."""
        return self._one("instancenorm", [x, scale, bias], name, epsilon=f32(epsilon))

    def groupnorm(
        self,
        x: Tensor,
        scale: Tensor,
        bias: Tensor,
        groups: int,
        epsilon: float = 1e-5,
        name: str | None = None,
    ) -> Tensor:
        """Group normalization of ``x`` ``[N, C, D1, ...]`` as one fused op (ONNX
        ``GroupNormalization``, opset 21; ``torch.nn.GroupNorm``): each sample's ``groups``
        groups of ``C / groups`` channels normalized over the group and the positions, then
        ``* scale + bias`` per channel, ``[C]`` each."""
        return self._one("groupnorm", [x, scale, bias], name, groups=groups, epsilon=f32(epsilon))

    def opaque(
        self,
        type: str,
        inputs: Sequence[Tensor],
        shapes: Sequence[Sequence[int]],
        attrs: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> tuple[Tensor, ...]:
        """An operator relsat does not rewrite: kept with its type, attributes and shapes."""

        params = {
            "type": type,
            "attrs": canonical_attrs(attrs or {}),
            "shapes": tuple(tuple(s) for s in shapes),
        }
        return self.add_node("opaque", list(inputs), params, name=name)

    # --- finish ---------------------------------------------------------------------------

    def build(self, *outputs: Tensor | Iterable[Tensor]) -> Graph:
        """The graph whose outputs are ``outputs`` (tensors, or iterables of tensors)."""
        flat: list[Tensor] = []
        for o in outputs:
            flat.extend([o] if isinstance(o, Tensor) else list(o))
        if not flat:
            raise GraphError("a graph needs at least one output")
        for t in flat:
            if not isinstance(t, Tensor) or t.builder is not self:
                raise GraphError("graph output is not a tensor of this graph")
        self._check_merge_consumers()
        return Graph(self._nodes, [t.ref for t in flat], self._values)

    def _check_merge_consumers(self) -> None:
        """A merged weight means something only as (part of) a conv's weight (SEMANTICS §2)."""
        shaping = {"concat", "enlarge", "merge", "split"}
        for n in self._nodes:
            for pos, r in enumerate(n.inputs):
                if self._nodes[r.node].op != "merge":
                    continue
                if not ((n.op == "conv2d" and pos == 1) or n.op in shaping):
                    raise GraphError(
                        "a merged weight can only feed a conv weight "
                        "(directly or through concat/enlarge/split)",
                        node=n.id,
                        op=n.op,
                        name=n.name,
                    )
