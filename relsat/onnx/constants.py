"""Constants computed at import: the nodes whose output is a constant made from constants.

Exporters often write a weight as a small subgraph instead of an initializer: ``Constant`` nodes,
and the ONNX model zoo's ``ConstantOfShape`` of a shape initializer (the "light" models the onnx
wheel ships), or a ``Cast`` of an initializer. :func:`evaluate` computes such a node's value, and
the importer keeps it as a constant like an initializer: a float32 one becomes a weight, so that
the rules on weights (TASO's merge, enlarge, concat of weights) apply to it and the exporter can
write whatever they make of it as initializers.

>>> import onnx
>>> node = onnx.helper.make_node("Cast", ["x"], ["y"], to=onnx.TensorProto.INT64)
>>> evaluate(node, {"x": np.array([1.5, 2.0], dtype=np.float32)}.get)
(array([1, 2]), 7)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import AttributeProto, NodeProto, TensorProto, numpy_helper

__all__ = ["evaluate"]

#: Element types whose values NumPy holds exactly as ONNX defines them (a Cast to another
#: element type — strings, 8-bit floats, bfloat16 — stays an operator).
_NUMERIC = {
    TensorProto.FLOAT,
    TensorProto.DOUBLE,
    TensorProto.FLOAT16,
    TensorProto.INT8,
    TensorProto.INT16,
    TensorProto.INT32,
    TensorProto.INT64,
    TensorProto.UINT8,
    TensorProto.UINT16,
    TensorProto.UINT32,
    TensorProto.UINT64,
    TensorProto.BOOL,
}

_Lookup = Callable[[str], "np.ndarray | None"]


def evaluate(node: NodeProto, const: _Lookup) -> tuple[np.ndarray, int] | None:
    """The value and ONNX element type of ``node``'s one output when ``node`` is a default-domain
    ``Constant`` (a tensor, float(s) or int(s)), or a ``ConstantOfShape`` or ``Cast`` of constants
    (``const(name)``: a tensor's value when constant, else None); otherwise None."""
    if node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return None
    fold = _FOLDS.get(node.op_type)
    return fold(node, const) if fold is not None else None


def _constant(node: NodeProto, const: _Lookup) -> tuple[np.ndarray, int] | None:
    if len(node.attribute) != 1:
        return None
    attr = node.attribute[0]
    value = onnx.helper.get_attribute_value(attr)
    if attr.type == AttributeProto.TENSOR:
        return numpy_helper.to_array(value), value.data_type
    if attr.type in (AttributeProto.FLOAT, AttributeProto.FLOATS):
        return np.array(value, dtype=np.float32), TensorProto.FLOAT
    if attr.type in (AttributeProto.INT, AttributeProto.INTS):
        return np.array(value, dtype=np.int64), TensorProto.INT64
    return None  # a sparse tensor, strings: kept as an operator


def _constant_of_shape(node: NodeProto, const: _Lookup) -> tuple[np.ndarray, int] | None:
    shape = const(node.input[0]) if node.input else None
    if shape is None or shape.ndim != 1 or shape.dtype != np.int64 or (shape < 0).any():
        return None
    fill, dtype = np.zeros(1, dtype=np.float32), TensorProto.FLOAT  # ONNX's default value
    for attr in node.attribute:
        if attr.name == "value" and attr.type == AttributeProto.TENSOR:
            fill, dtype = numpy_helper.to_array(attr.t).reshape(-1), attr.t.data_type
    if dtype not in _NUMERIC or fill.size != 1:
        return None
    return np.full([int(d) for d in shape], fill[0], dtype=fill.dtype), dtype


def _cast(node: NodeProto, const: _Lookup) -> tuple[np.ndarray, int] | None:
    x = const(node.input[0]) if node.input else None
    to = next((a.i for a in node.attribute if a.name == "to"), None)
    if x is None or to not in _NUMERIC or x.dtype.kind not in "biuf":
        return None
    return x.astype(onnx.helper.tensor_dtype_to_np_dtype(to)), int(to)


_FOLDS = {"Constant": _constant, "ConstantOfShape": _constant_of_shape, "Cast": _cast}
