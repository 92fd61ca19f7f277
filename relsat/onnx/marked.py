"""Import with symbolic dims: :func:`relsat.onnx.load_symbolic`.

The dims are planned (:func:`relsat.onnx.symbolic.plan`: a marker and a pricing value each),
the model's shape computations folded at two marker assignments
(:func:`relsat.onnx.shapefold.fold`; other markers when a static size turns out divisible by
one), and the folded model imported at the first markers (:class:`~relsat.onnx.importer.
Importer`, which folds nothing that reads a dim any further).

Exporters do not always give equal dims one name: torch's dynamo exporter names the batch of
``input_ids`` ``s21`` and that of ``attention_mask`` ``s35``. Dims at the same position of
several inputs with the same pricing value are made one dim when the model itself requires it:
onnxruntime runs the original with them equal and fails with them apart (a fact about the
model, not an assumption of relsat's). Dims a model does not tie stay apart.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from relsat.graph.graph import Graph
from relsat.onnx.data import read_array
from relsat.onnx.errors import DynamicShapeError, OnnxError, SymbolicDimError
from relsat.onnx.importer import Importer, read_model, skeleton
from relsat.onnx.shapefold import FOLD_LIMIT, MarkerClash, fold
from relsat.onnx.symbolic import Dims, choose_markers, plan, static_numbers

__all__ = ["MARKER_TRIES", "load_symbolic", "tied_dims"]

#: Marker sets tried before giving up on keeping the dims symbolic.
MARKER_TRIES = 4


def load_symbolic(
    path_or_model: Any,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    batch: int | None = None,
) -> tuple[Graph, Dims | None]:
    """See :func:`relsat.onnx.load_symbolic`."""
    model, path = read_model(path_or_model)
    dims = plan(model, input_shapes, batch, path=path)
    if dims is None:
        return Importer(model, path, input_shapes or {}, batch).run(), None
    same = tied_dims(path_or_model, dims)
    if same:
        dims = plan(model, input_shapes, batch, path=path, same=same)
        assert dims is not None
    return _import(
        model,
        path,
        dims,
        lambda avoid: plan(model, input_shapes, batch, avoid=avoid, path=path, same=same),
    )


def _import(
    model: onnx.ModelProto, path: str | None, dims: Dims, replan: Any
) -> tuple[Graph, Dims]:
    data_dir = os.path.dirname(os.path.abspath(path)) if path else None
    tensors = {t.name: t for t in model.graph.initializer}
    cache: dict[str, np.ndarray | None] = {}

    def const(name: str) -> np.ndarray | None:
        if name not in cache:
            t = tensors.get(name)
            small = t is not None and math.prod(t.dims) <= FOLD_LIMIT
            cache[name] = read_array(t, data_dir, path) if small else None  # type: ignore[arg-type]
        return cache[name]

    avoid: set[int] = set()
    static = static_numbers(model)
    for _ in range(MARKER_TRIES):
        values = [d.value for d in dims.dims]
        taken = [d.marker for d in dims.dims]
        other = dims.with_markers(choose_markers(values, avoid, static, taken=taken))
        try:
            folded = fold(model, dims, other, skeleton=skeleton, const=const)
            break
        except MarkerClash as clash:
            avoid.add(clash.marker)
            dims = replan(avoid)
    else:
        raise SymbolicDimError(
            "static sizes of the model are divisible by every prime tried for its dynamic dims "
            f"({', '.join(dims.names)})",
            dims=dims.names,
            path=path,
        )
    try:
        graph = Importer(folded.model, path, {}, None, symbolic=folded.symbolic).run()
    except DynamicShapeError as exc:
        raise SymbolicDimError(
            f"{exc.reason} (with dims {', '.join(dims.names)} symbolic)",
            dims=dims.names,
            path=path,
            node=exc.node,
            op_type=exc.op_type,
        ) from None
    for n in graph.weights:  # a constant whose size follows a dim cannot be written back
        if any(dims.is_symbolic(d) for d in n.shape):
            spelled = "x".join(dims.spell(d) for d in n.shape)
            raise SymbolicDimError(
                f"a constant of shape {spelled} is computed from the input's dims",
                dims=dims.names,
                path=path,
                tensor=n.name,
            )
    return graph, dims


def tied_dims(model: Any, dims: Dims) -> dict[str, str]:
    """Dim name → the name of the dim it must equal, for dims at one position of several inputs
    with one pricing value that the model ties (see the module docstring)."""
    groups: dict[tuple[int, int], list[str]] = {}
    for d in dims.dims:
        for axis in sorted({a for _, a in d.axes}):
            groups.setdefault((axis, d.value), [])
            if d.name not in groups[(axis, d.value)]:
                groups[(axis, d.value)].append(d.name)
    same: dict[str, str] = {}
    from relsat.onnx.verification import runs_at

    for names in groups.values():
        names = [n for n in names if n not in same]
        if len(names) < 2:
            continue
        value = max(dims.dim(names[0]).value, 1) + 1
        together = {n: value for n in names}
        apart = {**together, **{n: value + 1 for n in names[1:]}}
        try:
            ok = runs_at(model, [dims.shapes(together), dims.shapes(apart)])
        except OnnxError:
            continue
        if ok == [True, False]:
            same.update((n, names[0]) for n in names[1:])
    return same
