"""What an op's handler sees: the importer and the exporter as two small protocols.

The op tables (:mod:`relsat.onnx.opmap`, :mod:`relsat.onnx.transformer_ops`) depend on this
module only; the importer and the exporter import the tables and satisfy the protocols, never
the reverse.

An import handler ``fn(ctx, node, attrs)`` (:data:`Handler`) returns ``{ONNX output name: relsat
tensor}`` for the outputs it maps, or raises :class:`Unmapped` when the node is kept as an opaque
node instead. It reads tensors and constants and builds relsat ops through :class:`ImportContext`,
one node at a time: a fusion of several nodes is a rule (rules/bias.rules), never a handler. An
export emitter writes ONNX nodes and initializers through :class:`ExportContext`.

Besides, the two ends of the opaque-attribute encoding both handler tables and the importer use:
:func:`attrs_of` (a node's attributes as Python values) and :func:`encode_tensor` (a constant as
JSON).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import numpy as np
import onnx
from onnx import TensorProto, helper

from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Graph, Node, Ref

if TYPE_CHECKING:
    from onnx import NodeProto

__all__ = [
    "ExportContext",
    "Handler",
    "ImportContext",
    "Unmapped",
    "attrs_of",
    "axes_of",
    "decode_tensor",
    "encode_tensor",
]


class Unmapped(Exception):
    """Raised by a handler: this node is kept as an opaque node instead."""


class ImportContext(Protocol):
    """One import as a handler sees it (:class:`relsat.onnx.importer.Importer`)."""

    #: The graph being built: handlers add relsat ops to it.
    g: GraphBuilder
    #: The model's default-domain opset.
    opset: int

    def tensor(self, name: str) -> Tensor:
        """The relsat tensor of float32 ONNX tensor ``name`` (a constant becomes a weight);
        raises :class:`Unmapped` for any other element type or an omitted input."""
        ...

    def view_input(self, name: str) -> Tensor:
        """The tensor a reshape reads: :meth:`tensor`'s, or a boolean one (a mask: relsat's
        reshape moves elements of any type); raises :class:`Unmapped` for any other."""
        ...

    def const(self, name: str) -> np.ndarray | None:
        """The value of ``name`` when it is a constant (initializer, Constant, folded weight)."""
        ...

    def is_float(self, name: str) -> bool:
        """Whether ``name`` is a float32 tensor."""
        ...

    def static_shape(self, name: str) -> tuple[int, ...] | None:
        """The shape of ``name``: as built, as a constant's, else as ONNX infers it."""
        ...

    def inferred_shape(self, name: str) -> tuple[int, ...] | None:
        """The static shape ONNX shape inference gives ``name``, or None."""
        ...

    def weight(self, base: str, value: np.ndarray) -> Tensor:
        """A new weight holding ``value`` (float32), named ``base`` or ``base_<k>``."""
        ...

    def derived_weight(self, name: str, purpose: str, make: Callable[[], np.ndarray]) -> Tensor:
        """The weight ``make()`` computes from constant ``name`` for ``purpose`` (``"1d"``,
        ``"4d"``, …), made once however many nodes ask for it."""
        ...

    def scalar(self, value: float) -> Tensor:
        """A relsat ``scalar`` of ``value``, one per distinct value."""
        ...

    def readers(self, name: str) -> int:
        """How many node inputs and graph outputs read ``name``."""
        ...

    def producer(self, name: str) -> NodeProto | None:
        """The node that writes ``name`` (None for a graph input or an initializer)."""
        ...


#: An import handler: ``fn(ctx, node, attrs)`` (see the module docstring).
Handler: TypeAlias = Callable[[ImportContext, "NodeProto", Mapping[str, Any]], dict[str, Tensor]]


class ExportContext(Protocol):
    """One export as an emitter sees it (:class:`relsat.onnx.exporter.Exporter`)."""

    #: The graph being written.
    graph: Graph
    #: The default-domain opset the model is written at.
    opset: int
    #: Tensors emitted once per export and shared by every emitter that needs the same one (a
    #: rotary table laid out as the fused kernel's cache), by a key of the emitter's choosing.
    memo: dict[Hashable, str]

    def emit(
        self,
        op_type: str,
        inputs: Sequence[str],
        outputs: Sequence[str],
        *,
        domain: str = "",
        **attrs: Any,
    ) -> None:
        """Append one ONNX node (``domain``: declared with :meth:`declare_domain` first)."""
        ...

    def declare_domain(self, domain: str, version: int) -> None:
        """Import ``domain`` at ``version`` in the model (a custom operator set)."""
        ...

    def fresh(self, base: str) -> str:
        """A tensor name not used yet: ``base`` or ``base_<k>``."""
        ...

    def name_of(self, ref: Ref, consumer: Node) -> str:
        """The ONNX name of relsat tensor ``ref`` as ``consumer`` reads it (a weight-only
        tensor: its initializer)."""
        ...

    def folded(self, ref: Ref) -> np.ndarray | None:
        """The value of ``ref`` when it is computed from weights alone (then it is written as an
        initializer), else None."""
        ...

    def const(self, base: str, values: Sequence[int]) -> str:
        """A new int64 initializer holding ``values``; returns its name."""
        ...

    def float_const(self, base: str, value: float) -> str:
        """A new float32 scalar initializer; returns its name."""
        ...

    def float_array(self, base: str, value: np.ndarray) -> str:
        """A new float32 initializer holding ``value``; returns its name."""
        ...


def attrs_of(node: NodeProto) -> dict[str, Any]:
    """A node's attributes as Python values (strings decoded)."""
    out = {}
    for attr in node.attribute:
        value = onnx.helper.get_attribute_value(attr)
        out[attr.name] = value.decode() if isinstance(value, bytes) else value
    return out


def axes_of(node: NodeProto, const: Callable[[str], np.ndarray | None]) -> list[int] | None:
    """The ``axes`` of a node that takes them as input 1 (Unsqueeze and Squeeze from opset 13)
    or as an attribute (before): ``[]`` when it has none, None when they are computed at run
    time (``const`` gives a constant input's value, or None)."""
    if len(node.input) > 1 and node.input[1]:
        axes = const(node.input[1])
        return None if axes is None else [int(a) for a in axes.reshape(-1)]
    for attr in node.attribute:
        if attr.name == "axes":
            return [int(a) for a in attr.ints]
    return []


def encode_tensor(arr: np.ndarray, dtype: int) -> dict[str, Any]:
    """A constant as JSON: ONNX dtype name, dims, flat data."""
    flat = arr.reshape(-1)
    data = [x.decode() if isinstance(x, bytes) else x for x in flat.tolist()]
    return {"dtype": TensorProto.DataType.Name(dtype), "dims": list(arr.shape), "data": data}


def decode_tensor(spec: Mapping[str, Any]) -> np.ndarray:
    """:func:`encode_tensor`'s JSON back as an array (strings as bytes objects)."""
    dtype = TensorProto.DataType.Value(spec["dtype"])
    if dtype == TensorProto.STRING:
        return np.array([s.encode() for s in spec["data"]], dtype=object).reshape(spec["dims"])
    kind = helper.tensor_dtype_to_np_dtype(dtype)
    return np.array(spec["data"], dtype=kind).reshape(spec["dims"])
