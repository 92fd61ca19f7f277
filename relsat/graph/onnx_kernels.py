"""NumPy kernels of the ONNX operators rules match while relsat keeps them opaque.

A rule may name an ONNX operator on its left (``(onnx.Where (onnx.IsNaN ?x) ?z ?x)``,
:mod:`relsat.rewrite.rules`); the rule checker runs such a side, and the pipeline verifies a graph
that still holds one, in the NumPy executor. The executor runs an opaque node with a kernel
registered for its type (:func:`relsat.graph.kernels.register_opaque`) or, for the element-wise
operators of :data:`KERNELS`, with the one here. An imported node keeps its non-float constant
inputs in its attributes (``_onnx.inputs``: ``"t"`` a tensor input, ``""`` an omitted one, a
tensor dict a constant, :mod:`relsat.onnx.importer`) but for a boolean one, a ``Constant`` node
of its own; a kernel sees the ONNX inputs again in order. :data:`SHAPES` says which output
shape each computes, for the rule checker's shape solver.

>>> import numpy as np
>>> KERNELS["Where"]({}, np.array([1.0, 0.0]), np.zeros(2), np.ones(2))[0].tolist()
[0.0, 1.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from relsat.errors import ExecutionError

__all__ = ["BOOLEAN_INPUTS", "BOOLEAN_OUTPUTS", "KERNELS", "SHAPES"]

_Kernel = Callable[..., Sequence[np.ndarray]]

#: ONNX element type names (as the importer records constants) → NumPy dtypes.
_DTYPES = {
    "FLOAT": np.float32,
    "DOUBLE": np.float64,
    "FLOAT16": np.float16,
    "BOOL": np.bool_,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT8": np.uint8,
}


def _operands(attrs: dict[str, Any], tensors: Sequence[np.ndarray]) -> list[np.ndarray | None]:
    """The node's ONNX inputs in order: its tensor inputs and the constants its attributes keep
    (None for an omitted one); a node not imported from ONNX has only tensor inputs."""
    meta = attrs.get("_onnx")
    if meta is None:
        return list(tensors)
    if meta.get("domain", "") not in ("", "ai.onnx"):
        raise ExecutionError(f"no NumPy kernel for an operator of domain {meta['domain']!r}")
    given = iter(tensors)
    out: list[np.ndarray | None] = []
    for entry in meta.get("inputs", ["t"] * len(tensors)):
        if entry == "t":
            out.append(next(given))
        elif isinstance(entry, dict) and entry.get("dtype") in _DTYPES:
            out.append(_array(entry))
        elif isinstance(entry, dict):
            raise ExecutionError(f"a constant input of ONNX type {entry.get('dtype')}")
        else:
            out.append(None)
    return out


def _unary(fn: Callable[[np.ndarray, dict[str, Any]], np.ndarray]) -> _Kernel:
    def kernel(attrs: dict[str, Any], *tensors: np.ndarray) -> tuple[np.ndarray]:
        (x,) = _operands(attrs, tensors)
        assert x is not None
        return (fn(x, attrs),)

    return kernel


def _is_inf(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    positive = np.isposinf(x) if attrs.get("detect_positive", 1) else np.zeros(x.shape, bool)
    negative = np.isneginf(x) if attrs.get("detect_negative", 1) else np.zeros(x.shape, bool)
    return positive | negative


def _where(attrs: dict[str, Any], *tensors: np.ndarray) -> tuple[np.ndarray]:
    cond, then, other = _operands(attrs, tensors)
    assert cond is not None and then is not None and other is not None
    return (np.where(cond.astype(bool), then, other),)


def _logic(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> _Kernel:
    def kernel(attrs: dict[str, Any], *tensors: np.ndarray) -> tuple[np.ndarray]:
        a, b = _operands(attrs, tensors)
        assert a is not None and b is not None
        return (fn(a.astype(bool), b.astype(bool)),)

    return kernel


def _matmul(attrs: dict[str, Any], *tensors: np.ndarray) -> tuple[np.ndarray]:
    a, b = _operands(attrs, tensors)
    assert a is not None and b is not None
    return (np.matmul(a, b),)


def _array(entry: dict[str, Any]) -> np.ndarray:
    """A constant as the importer records it (dtype name, dims, flat data)."""
    return np.array(entry["data"], dtype=_DTYPES[entry["dtype"]]).reshape(entry["dims"])


def _constant(attrs: dict[str, Any]) -> tuple[np.ndarray]:
    """An opaque ``Constant`` (the importer's boolean constants, a mask gather's index)."""
    return (_array(attrs["value"]),)


def _gathernd(attrs: dict[str, Any], *tensors: np.ndarray) -> tuple[np.ndarray]:
    data, index = _operands(attrs, tensors)
    assert data is not None and index is not None
    if attrs.get("batch_dims", 0):
        raise ExecutionError("no NumPy kernel for a GatherND with batch_dims")
    at = np.moveaxis(index.astype(np.int64), -1, 0)
    try:
        return (data[tuple(at)],)
    except IndexError as err:  # onnxruntime refuses it too
        raise ExecutionError(f"GatherND: {err}") from None


def _gather(attrs: dict[str, Any], *tensors: np.ndarray) -> tuple[np.ndarray]:
    data, index = _operands(attrs, tensors)
    assert data is not None and index is not None
    try:
        return (np.take(data, index.astype(np.int64), axis=attrs.get("axis", 0)),)
    except IndexError as err:  # onnxruntime refuses it too
        raise ExecutionError(f"Gather: {err}") from None


def _flatten(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    axis = attrs.get("axis", 1) % (x.ndim + 1)
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def _reshape(attrs: dict[str, Any], *tensors: np.ndarray) -> tuple[np.ndarray]:
    """ONNX Reshape (a 0 copies the input's dim); with no shape (a rule's ``(onnx.Reshape
    ?x)``), to one axis: see :data:`SHAPES`."""
    x, *rest = _operands(attrs, tensors)
    assert x is not None
    if attrs.get("allowzero", 0):
        raise ExecutionError("no NumPy kernel for a Reshape with allowzero")
    if not rest or rest[0] is None:
        return (x.reshape(-1),)
    shape = [int(n) if n else x.shape[i] for i, n in enumerate(rest[0].astype(np.int64))]
    return (x.reshape(shape),)


#: ONNX type (default domain) → NumPy kernel ``fn(attrs, *inputs)``, as
#: :func:`relsat.graph.kernels.register_opaque` takes one.
KERNELS: dict[str, _Kernel] = {
    "Abs": _unary(lambda x, _: np.abs(x)),
    "And": _logic(np.logical_and),
    "Constant": _constant,
    "Flatten": _unary(_flatten),
    "Gather": _gather,
    "GatherND": _gathernd,
    "IsInf": _unary(_is_inf),
    "IsNaN": _unary(lambda x, _: np.isnan(x)),
    "MatMul": _matmul,
    "Or": _logic(np.logical_or),
    "Reshape": _reshape,
    "Where": _where,
}

#: How each operator of :data:`KERNELS` shapes its output: ``unary`` (its input's shape) or
#: ``broadcast`` (its inputs' shapes broadcast, as NumPy broadcasts) or ``matmul`` (a product
#: of the last two axes, the others broadcast: the MatMul relsat's matmul does not cover), or
#: one of the gathers and views at the attributes a rule names (``gathernd``, ``gather``,
#: ``flatten``: :data:`relsat.graph.ops.OPAQUE_INT_ATTRS`), or ``flat`` (a Reshape, whose target
#: is a constant input no rule names, modelled as one to a single axis: the index rules' only
#: target where their sides have one type — the e-graph refuses a right-hand side of another
#: shape). The
#: shape solver draws only the element-wise kinds; a rule over a gather is drawn from its
#: index facts (:mod:`relsat.rewrite.indices`).
SHAPES = {
    "Abs": "unary",
    "And": "broadcast",
    "Flatten": "flatten",
    "Gather": "gather",
    "GatherND": "gathernd",
    "IsInf": "unary",
    "IsNaN": "unary",
    "MatMul": "matmul",
    "Or": "broadcast",
    "Reshape": "flat",
    "Where": "broadcast",
}

#: Operators whose output is boolean (relsat's executor holds it as 0 and 1).
BOOLEAN_OUTPUTS = frozenset({"And", "Constant", "IsInf", "IsNaN", "Or"})

#: ONNX input positions that are boolean, by operator: a rule checker draws 0 and 1 there.
BOOLEAN_INPUTS: dict[str, frozenset[int]] = {
    "And": frozenset({0, 1}),
    "Or": frozenset({0, 1}),
    "Where": frozenset({0}),
}
