"""What every module of :mod:`relsat.onnx` shares: its errors and the default export opset.

A leaf module (it imports nothing of the package), so the importer, the exporter and the
external-data reader can raise :class:`OnnxError` without importing each other or the package's
public surface.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relsat.errors import RelsatError

__all__ = [
    "OPSET",
    "DynamicShapeError",
    "EmptyTensorError",
    "OnnxError",
    "PricingShapeError",
    "SymbolicDimError",
    "TooLargeError",
]

#: The default opset of exported models.
OPSET = 17


class OnnxError(RelsatError, ValueError):
    """An ONNX model relsat cannot read, write or run.

    ``path`` names the file, ``node`` the ONNX node (its name, or ``#k`` for the k-th unnamed one),
    ``op_type`` its operator and ``tensor`` the tensor (e.g. a graph input) at fault; any may be
    None. ``reason`` is the message without them. ``settings`` are the settings the message
    names (``input_shapes``, ``batch``), written ``{input_shapes}`` in it: the message reads them
    by their API names, and :meth:`named` by others (the command line's flags).

    >>> e = OnnxError("{input_shapes} gives rank 2", settings=("input_shapes",), tensor="x")
    >>> str(e), e.named({"input_shapes": "--input-shape"})
    ("tensor 'x': input_shapes gives rank 2", "tensor 'x': --input-shape gives rank 2")
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        node: str | None = None,
        op_type: str | None = None,
        tensor: str | None = None,
        settings: tuple[str, ...] = (),
    ) -> None:
        self.template = message
        self.settings = settings
        self.reason = _named(message, settings, {})
        self.path = path
        self.node = node
        self.op_type = op_type
        self.tensor = tensor
        super().__init__(self.named({}))

    def named(self, names: Mapping[str, str]) -> str:
        """The message with each setting it names called as ``names`` says (a setting not in
        ``names`` by its API name)."""
        where = []
        if self.node is not None:
            where.append(f"node {self.node!r}" + (f" ({self.op_type})" if self.op_type else ""))
        elif self.op_type is not None:
            where.append(self.op_type)
        if self.tensor is not None:
            where.append(f"tensor {self.tensor!r}")
        message = _named(self.template, self.settings, names)
        text = f"{', '.join(where)}: {message}" if where else message
        return f"{self.path}: {text}" if self.path else text


def _named(template: str, settings: tuple[str, ...], names: Mapping[str, str]) -> str:
    for s in settings:
        template = template.replace("{" + s + "}", names.get(s, s))
    return template


class DynamicShapeError(OnnxError):
    """An operator's output shape is computed at run time (ONNX shape inference leaves it open).
    ``output`` names that output and ``inferred`` holds what ONNX infers of it (element type, and
    dims with None where open, or None for an open rank), where known:
    :func:`relsat.onnx.load_symbolic` keeps its open dims symbolic (:mod:`relsat.onnx.opened`)."""

    output: str | None = None
    inferred: tuple[int, tuple[int | None, ...] | None] | None = None


class EmptyTensorError(OnnxError):
    """An operator's output is empty (a dim is 0): relsat's tensors have every dim at least 1."""


class SymbolicDimError(OnnxError):
    """A dynamic dim relsat cannot keep symbolic (something computed from it is not a product
    of dims and a constant, or cannot be written back with the dim symbolic). ``dims`` names
    the dims concerned; :func:`relsat.optimize` then optimizes at fixed shapes and says why."""

    def __init__(self, message: str, *, dims: tuple[str, ...] = (), **fields: Any) -> None:
        self.dims = dims
        super().__init__(message, **fields)


class PricingShapeError(OnnxError):
    """The model does not run at the shape its dynamic dims are priced and timed at (a
    sequence longer than its position table, an odd size where it needs an even one): ``dims``
    names the dynamic dims and where they occur; choose the shape with ``input_shapes``."""

    def __init__(self, message: str, *, dims: tuple[str, ...] = (), **fields: Any) -> None:
        self.dims = dims
        super().__init__(message, **fields)


class TooLargeError(OnnxError):
    """A model too large to verify or time on this machine: ``needed`` bytes (an estimate) of
    the ``available`` ones."""

    def __init__(self, message: str, *, needed: int, available: int, **fields: Any) -> None:
        self.needed = needed
        self.available = available
        super().__init__(message, **fields)
