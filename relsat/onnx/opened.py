"""Dims an operator computes from values: each kept symbolic, a dim of its own.

NonZero's count, a Reshape to a shape given as an input, a Reduce over axes given as one, a
Resize to sizes given as one, NonMaxSuppression's selected boxes: ONNX shape inference leaves
such an output's dims open, and nothing at import time can fix them, for they follow the values
of each run. Each open dim becomes a dim of its own, like an input's dynamic dim
(:mod:`relsat.onnx.symbolic`): a marker in the e-graph, so that no rewrite depends on its value,
and a pricing value, what onnxruntime computes for it at the pricing shape on the inputs the
checks draw (``Options.inputs`` where given). Its name is the output's ``dim_param`` where the
model declares one, else ``<tensor>_dim<axis>``. The written model reads it off the tensor at
run time (``Shape``: :mod:`relsat.onnx.symbolize`) and names it on an output.

A dim ONNX does infer stays what it is: static, or an input's dim. An output that is empty at
the pricing shape, or that onnxruntime cannot compute there, is not opened: the import then
fails as before, naming the output.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import onnx

from relsat.onnx.dimplan import remarked
from relsat.onnx.errors import DynamicShapeError
from relsat.onnx.symbolic import Dim, Dims, Opened

__all__ = [
    "MAX_OPENED",
    "RunShapes",
    "declared_dims",
    "empty_at_zero",
    "opened_output",
    "with_opened",
]

#: Outputs opened in one import at most (each one more import).
MAX_OPENED = 32

Found = tuple[Opened, tuple[Dim, ...]]


class RunShapes:
    """The model as given (a path or a proto) and the user's input values; the shapes
    onnxruntime computes for its tensors at an input shape, taken in one run (every node output
    ONNX leaves open there asked for) the first time one is needed and kept for the outputs
    opened after it."""

    def __init__(self, model: Any, given: Mapping[str, Any] | None) -> None:
        self.model, self.given = model, given
        self.taken: dict[tuple[tuple[str, tuple[int, ...]], ...], dict[str, tuple[int, ...]]] = {}
        self._proto: onnx.ModelProto | None = None

    def proto(self) -> onnx.ModelProto:
        """The model without its external data (its inputs and nodes)."""
        if self._proto is None:
            if isinstance(self.model, onnx.ModelProto):
                self._proto = self.model
            else:
                self._proto = onnx.load(self.model, load_external_data=False)
        return self._proto

    def shape(self, name: str, shapes: Mapping[str, Sequence[int]]) -> tuple[int, ...] | None:
        """Tensor ``name``'s shape when the model runs at input ``shapes``; None when it does
        not run there."""
        from relsat.onnx.verification import output_shapes

        key = tuple(sorted((k, tuple(int(d) for d in v)) for k, v in shapes.items()))
        if key not in self.taken:
            names = self._open_at(shapes)
            self.taken[key] = output_shapes(self.model, names, shapes, self.given) or {}
        if name not in self.taken[key]:  # the run of every output failed: this one alone
            alone = output_shapes(self.model, [name], shapes, self.given)
            self.taken[key].update(alone or {})
        return self.taken[key].get(name)

    def _open_at(self, shapes: Mapping[str, Sequence[int]]) -> list[str]:
        """The node outputs whose dims ONNX's shape inference leaves open with the inputs at
        ``shapes`` (those computed from values, and what follows from them): what the run
        asks for, rather than every activation of a large model."""
        from relsat.onnx.importer import skeleton

        fixed = onnx.ModelProto()
        fixed.CopyFrom(skeleton(self.proto()))
        for vi in fixed.graph.input:
            if vi.name in shapes:
                for d, v in zip(vi.type.tensor_type.shape.dim, shapes[vi.name], strict=False):
                    d.Clear()
                    d.dim_value = int(v)
        del fixed.graph.value_info[:]
        outputs = [o for n in fixed.graph.node for o in n.output if o]
        try:
            inferred = onnx.shape_inference.infer_shapes(fixed, data_prop=True).graph
        except Exception:  # onnx's inference errors: ask for every output
            return outputs
        known = {
            vi.name
            for vi in [*inferred.value_info, *inferred.output]
            if vi.type.tensor_type.HasField("shape")
            and all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)
        }
        return [o for o in outputs if o not in known]


def opened_output(
    runs: RunShapes,
    dims: Dims,
    error: DynamicShapeError,
    declared: Mapping[str, Sequence[str]],
) -> Found | None:
    """The output ``error`` names, opened: its layout and its new dims, valued by onnxruntime
    running the model (``runs``) at ``dims``' pricing shape (or with the input dims it declares
    empty at 0); None when it cannot be (no output named, a rank that disagrees, an empty or
    uncomputable tensor there). ``declared``: the graph outputs' ``dim_param`` names by axis
    ("" for none)."""
    name = error.output
    if name is None or error.inferred is None or any(o.tensor == name for o in dims.opened):
        return None
    elem, inferred = error.inferred
    real = None
    for shapes in (dims.shapes(), empty_at_zero(dims, runs.proto())):
        real = runs.shape(name, shapes) if shapes else None
        if real is not None:
            break
    if not elem or real is None:
        return None
    if inferred is not None and len(inferred) != len(real):
        return None
    taken = {*dims.names, *(s.name for s in dims.sums)}
    layout: list[int | str] = []
    new: list[Dim] = []
    for axis, value in enumerate(real):
        known = inferred[axis] if inferred is not None else None
        kept = _known(dims, known) if known is not None else None
        if kept is not None:
            layout.append(kept)
            continue
        if value == 0:  # relsat prices no empty tensor
            return None
        label = _label(name, axis, declared.get(name, ()), taken)
        taken.add(label)
        new.append(Dim(label, 0, int(value), ((name, axis),)))
        layout.append(label)
    if not new:
        return None
    return Opened(name, elem, tuple(layout), error.op_type or ""), tuple(new)


def empty_at_zero(dims: Dims, model: onnx.ModelProto) -> dict[str, tuple[int, ...]] | None:
    """The pricing shape with the input dims ``model`` declares of length 0 (an empty ``axes``)
    at 0, where it runs (relsat prices them as dynamic dims); None when it declares none."""
    empty = {
        (vi.name, axis)
        for vi in model.graph.input
        for axis, d in enumerate(vi.type.tensor_type.shape.dim)
        if d.HasField("dim_value") and d.dim_value == 0
    }
    if not empty:
        return None
    return {
        name: tuple(0 if (name, axis) in empty else v for axis, v in enumerate(shape))
        for name, shape in dims.shapes().items()
    }


def _known(dims: Dims, value: int) -> int | str | None:
    """A dim ONNX infers, as a layout entry: the number when static, the dim's name when it is
    exactly one input dim; None (open it) for anything else computed from dims."""
    f = dims.factor(value)
    if f is None:
        return value
    coef, powers = f
    if coef == 1 and len(powers) == 1 and powers[0][1] == 1 and powers[0][0] in dims.names:
        return powers[0][0]
    return None


def _label(tensor: str, axis: int, declared: Sequence[str], taken: set[str]) -> str:
    base = declared[axis] if axis < len(declared) and declared[axis] else f"{tensor}_dim{axis}"
    label, k = base, 1
    while label in taken:
        label, k = f"{base}_{k}", k + 1
    return label


def with_opened(dims: Dims, found: Iterable[Found], model: Any, avoid: Iterable[int] = ()) -> Dims:
    """``dims`` with the opened outputs ``found`` and their dims, markers chosen again."""
    found = list(found)
    if not found:
        return dims
    extra = tuple(d for _, made in found for d in made)
    out = replace(dims, dims=(*dims.dims, *extra), opened=(*dims.opened, *(o for o, _ in found)))
    return remarked(out, set(avoid), model)


def declared_dims(model: onnx.ModelProto) -> dict[str, tuple[str, ...]]:
    """Each graph output's ``dim_param`` names by axis (``""`` where it has none)."""
    return {
        vi.name: tuple(d.dim_param for d in vi.type.tensor_type.shape.dim)
        for vi in model.graph.output
        if vi.type.WhichOneof("value") == "tensor_type"
    }
