"""Random inputs for ONNX models, valid for what each input is: the values verification
(:func:`relsat.onnx.verify`) and timing (:func:`relsat.onnx.latency.compare_latency`) feed.

What an input is, is read off the model (:func:`input_kinds`):

* float tensors (float32, float16, double): N(0, 1);
* integer ids: an integer input that reaches the indices of a ``Gather`` whose data has a known
  shape (an embedding table; through Identity, Cast, Reshape, Unsqueeze, Squeeze, Flatten,
  Expand, Transpose or Slice) is drawn uniformly in ``[0, rows)``, ``rows`` being that data's
  size on the gathered axis (the smallest over all such Gathers);
* masks: another integer input whose name contains ``mask`` is ones then zeros along its last
  axis, each row with a random length of at least 1 (a padded batch; no row is all masked, so
  no softmax over nothing turns into NaN);
* booleans: True or False with probability 1/2;
* any other integer: small non-negative values, uniform in ``[0, 4)``.

>>> drawn = draw({"ids": ("tensor(int64)", [2, 4])}, {"ids": Kind("index", 10)}, seed=0)
>>> drawn["ids"].dtype, bool(drawn["ids"].max() < 10)
(dtype('int64'), True)
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto

__all__ = ["DRAWABLE", "Kind", "draw", "given_at", "input_kinds", "kinds_of", "merge_kinds"]

#: Ops through which an integer input keeps its values (their first input).
_PASS_THROUGH = frozenset(
    {"Identity", "Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Expand", "Transpose"}
    | {"Slice"}
)
#: Upper end (exclusive) of integers drawn for inputs relsat knows nothing about.
SMALL_INTS = 4

_FLOATS = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}
_INT_NAMES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_INTS = {f"tensor({t})": np.dtype(t) for t in _INT_NAMES}
_INT_TYPES = frozenset(TensorProto.DataType.Value(t.upper()) for t in _INT_NAMES)
#: The onnxruntime input types :func:`draw` fills.
DRAWABLE = frozenset({*_FLOATS, *_INTS, "tensor(bool)"})


@dataclass(frozen=True)
class Kind:
    """What an input holds: ``"index"`` (ids below ``high``), ``"mask"``, or ``"small"``."""

    kind: str
    high: int = SMALL_INTS


def input_kinds(model: onnx.ModelProto) -> dict[str, Kind]:
    """The kind of each integer graph input of ``model`` (see the module docstring)."""
    graph = model.graph
    shapes = _known_shapes(graph)
    readers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for pos, name in enumerate(node.input):
            if name:
                readers.setdefault(name, []).append((node, pos))
    inits = {i.name for i in graph.initializer}
    kinds = {}
    for vi in graph.input:
        elem = vi.type.tensor_type.elem_type
        if vi.name in inits or elem not in _INT_TYPES:
            continue
        rows = _gather_rows(vi.name, readers, shapes)
        if rows:
            kinds[vi.name] = Kind("index", max(1, min(rows)))
        elif "mask" in vi.name.lower():
            kinds[vi.name] = Kind("mask")
        else:
            kinds[vi.name] = Kind("small")
    return kinds


def merge_kinds(*kinds: Mapping[str, Kind]) -> dict[str, Kind]:
    """Kinds from several models of one interface: the tightest id range, a mask if any says so."""
    out: dict[str, Kind] = {}
    for mapping in kinds:
        for name, k in mapping.items():
            old = out.get(name)
            if old is None or k.kind == "mask" or (k.kind == "index" and old.kind != "mask"):
                high = min(k.high, old.high) if old is not None and old.kind == k.kind else k.high
                out[name] = Kind(k.kind, high)
    return out


def draw(
    specs: Mapping[str, tuple[str, Sequence[int]]],
    kinds: Mapping[str, Kind],
    *,
    seed: int = 0,
    given: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Values for inputs given as ``name → (onnxruntime type, static shape)``: one generator,
    names in sorted order. ``given`` (the user's sample inputs, ``Options.inputs``) is taken for
    an input wherever its shape is the one asked for (an axes or shape input keeps its values at
    every shape; a dynamic input is drawn at the others). Raises ValueError for a type that
    cannot be drawn (strings, ...) and is not given."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in sorted(specs):
        ort_type, dims = specs[name]
        shape = [int(d) for d in dims]
        sample = given_at(given, name, shape)
        if sample is not None:
            out[name] = sample
        elif ort_type in _FLOATS:  # drawn in the input's own type (float16: via float32)
            kind = np.dtype(_FLOATS[ort_type])
            native: Any = np.float64 if kind == np.float64 else np.float32
            out[name] = rng.standard_normal(shape, dtype=native).astype(kind, copy=False)
        elif ort_type == "tensor(bool)":
            out[name] = rng.integers(0, 2, shape).astype(bool)
        elif ort_type in _INTS:
            out[name] = _integers(rng, shape, kinds.get(name, Kind("small"))).astype(
                _INTS[ort_type]
            )
        else:
            raise ValueError(f"cannot draw inputs of type {ort_type}")
    return out


def given_at(
    given: Mapping[str, np.ndarray] | None, name: str, shape: Sequence[int]
) -> np.ndarray | None:
    """The array ``given`` holds for input ``name`` when its shape is ``shape``, else None."""
    sample = (given or {}).get(name)
    return sample if sample is not None and list(sample.shape) == list(shape) else None


def _integers(rng: np.random.Generator, shape: list[int], kind: Kind) -> np.ndarray:
    if kind.kind != "mask":
        return rng.integers(0, kind.high, shape)
    if not shape:
        return np.ones((), dtype=np.int64)
    n = shape[-1]
    lengths = rng.integers(1, n + 1, [*shape[:-1], 1])
    return (np.arange(n) < lengths).astype(np.int64)


def _known_shapes(graph: onnx.GraphProto) -> dict[str, tuple[int, ...]]:
    """Static shapes the model states: initializers, Constant values, declared value infos."""
    shapes: dict[str, tuple[int, ...]] = {i.name: tuple(i.dims) for i in graph.initializer}
    for vi in [*graph.input, *graph.value_info]:
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            shapes.setdefault(vi.name, tuple(d.dim_value for d in dims))
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                    shapes[node.output[0]] = tuple(attr.t.dims)
    return shapes


def _gather_rows(
    name: str,
    readers: Mapping[str, list[tuple[onnx.NodeProto, int]]],
    shapes: Mapping[str, tuple[int, ...]],
) -> list[int]:
    """Sizes of the gathered axis of every Gather whose indices ``name`` becomes."""
    rows, seen, todo = [], {name}, deque([name])
    while todo:
        for node, pos in readers.get(todo.popleft(), []):
            if node.domain not in ("", "ai.onnx"):
                continue
            if node.op_type == "Gather" and pos == 1:
                data = shapes.get(node.input[0])
                axis = _axis(node)
                if data is not None and -len(data) <= axis < len(data):
                    rows.append(data[axis])
            elif node.op_type in _PASS_THROUGH and pos == 0:
                for out in _outputs(node):
                    if out not in seen:
                        seen.add(out)
                        todo.append(out)
    return rows


def _axis(node: onnx.NodeProto) -> int:
    for attr in node.attribute:
        if attr.name == "axis":
            return int(attr.i)
    return 0


def _outputs(node: onnx.NodeProto) -> Iterable[str]:
    return (o for o in node.output[:1] if o)


def kinds_of(*models: Any) -> dict[str, Kind]:
    """:func:`merge_kinds` of the :func:`input_kinds` of models given as ModelProtos,
    serialized bytes or paths (read without their external data)."""
    return merge_kinds(*(input_kinds(_proto(m)) for m in models))


def _proto(model: Any) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, bytes):
        return onnx.load_from_string(model)
    return onnx.load(os.fspath(model), load_external_data=False)
