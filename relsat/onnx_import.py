"""ONNX → relsat graph (see :mod:`relsat.onnx` for what is mapped and what stays opaque).

An opaque node's ``attrs`` are its ONNX attributes as plain JSON values (tensors as
``{"dtype", "dims", "data"}``) plus one ``"_onnx"`` entry that :mod:`relsat.onnx_export` reads back:
``domain``, ``opset``, attribute ``types``, the input ``layout`` (per ONNX input: ``"t"`` a relsat
input, in order; ``""`` an omitted optional input; a tensor dict for a non-float constant) and
``outputs`` (per ONNX output: 1 present, 0 omitted).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, NodeProto, TensorProto, numpy_helper

from relsat.errors import GraphError
from relsat.graph import Graph, GraphBuilder, Tensor
from relsat.onnx import DynamicShapeError, OnnxError
from relsat.onnx_ops import HANDLERS, Unmapped, attrs_of, encode_tensor

__all__ = ["Importer", "load_model"]

FLOAT = TensorProto.FLOAT
MIN_OPSET = 7


def _encode_attr(attr: AttributeProto, where: dict[str, Any]) -> Any:
    t = attr.type
    if t in (AttributeProto.GRAPH, AttributeProto.GRAPHS, AttributeProto.SPARSE_TENSOR) or t in (
        AttributeProto.SPARSE_TENSORS,
        AttributeProto.TYPE_PROTO,
        AttributeProto.TYPE_PROTOS,
    ):
        raise OnnxError(
            f"attribute {attr.name!r} of type {AttributeProto.AttributeType.Name(t)} "
            "(subgraphs, sparse tensors) is not supported",
            **where,
        )
    value = onnx.helper.get_attribute_value(attr)
    if t == AttributeProto.TENSOR:
        return encode_tensor(numpy_helper.to_array(value), value.data_type)
    if t == AttributeProto.TENSORS:
        return [encode_tensor(numpy_helper.to_array(v), v.data_type) for v in value]
    if t == AttributeProto.STRING:
        return value.decode()
    if t == AttributeProto.STRINGS:
        return [v.decode() for v in value]
    if t in (AttributeProto.FLOATS, AttributeProto.INTS):
        return list(value)
    return value


def _read(path_or_model: Any) -> tuple[onnx.ModelProto, str | None]:
    if isinstance(path_or_model, onnx.ModelProto):
        return path_or_model, None
    path = os.fspath(path_or_model)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise OnnxError(f"cannot read: {exc.strerror}", path=path) from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError, RuntimeWarning, ...
        raise OnnxError(f"not an ONNX model ({type(exc).__name__}: {exc})", path=path) from None
    if not model.HasField("graph") or not model.graph.node:
        raise OnnxError("not an ONNX model (no graph or no nodes)", path=path)
    return model, path


def load_model(
    path_or_model: Any,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    batch: int | None = None,
) -> Graph:
    """See :func:`relsat.onnx.load`."""
    model, path = _read(path_or_model)
    return Importer(model, path, input_shapes or {}, batch).run()


class Importer:
    """One import: the prepared model, the builder, and the ONNX name → tensor maps."""

    def __init__(
        self,
        model: onnx.ModelProto,
        path: str | None,
        input_shapes: Mapping[str, Sequence[int]],
        batch: int | None,
    ) -> None:
        self.path = path
        self.opsets = {(o.domain or ""): o.version for o in model.opset_import}
        self.opsets.setdefault("", self.opsets.get("ai.onnx", 0))
        if self.opsets[""] < MIN_OPSET:
            raise OnnxError(
                f"opset {self.opsets['']} is not supported (need >= {MIN_OPSET})", path=path
            )
        self.model = onnx.ModelProto()
        self.model.CopyFrom(model)
        self.g = GraphBuilder()
        self.env: dict[str, Tensor] = {}  # ONNX tensor name → relsat tensor
        self.consts: dict[str, np.ndarray] = {}  # initializers and Constant outputs
        self.const_types: dict[str, int] = {}
        self.derived: dict[tuple[str, str], Tensor] = {}  # (const, purpose) → weight
        self.skip: set[int] = set()  # indices of nodes already handled (folded BatchNormalization)
        self._fix_inputs(input_shapes, batch)
        self._check_structure()
        self._infer_shapes()

    def error(self, message: str, **fields: Any) -> OnnxError:
        return OnnxError(message, path=self.path, **fields)

    # --- preparation ----------------------------------------------------------------------

    def _fix_inputs(self, input_shapes: Mapping[str, Sequence[int]], batch: int | None) -> None:
        graph = self.model.graph
        inits = {i.name for i in graph.initializer}
        self.inputs = [vi for vi in graph.input if vi.name not in inits]
        unknown = sorted(set(input_shapes) - {vi.name for vi in self.inputs})
        if unknown:
            raise self.error(
                f"input_shapes names unknown inputs {unknown}; inputs are "
                f"{[vi.name for vi in self.inputs]}"
            )
        for vi in self.inputs:
            ttype = vi.type.tensor_type
            if ttype.elem_type != FLOAT:
                raise self.error(
                    f"input type {TensorProto.DataType.Name(ttype.elem_type)} is not supported "
                    "(only float32)",
                    tensor=vi.name,
                )
            dims = ttype.shape.dim
            given = input_shapes.get(vi.name)
            if given is not None and len(given) != len(dims):
                raise self.error(
                    f"input_shapes gives rank {len(given)}, the input has rank {len(dims)}",
                    tensor=vi.name,
                )
            for i, d in enumerate(dims):
                static = d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                value = given[i] if given is not None else static
                if value is None and i == 0 and batch is not None:
                    value = batch
                if value is None:
                    label = d.dim_param or "?"
                    raise self.error(
                        f"dim {i} ({label}) is dynamic; fix it with input_shapes or batch",
                        tensor=vi.name,
                    )
                if static is not None and value != static:
                    raise self.error(
                        f"input_shapes gives dim {i} = {value}, the model fixes it to {static}",
                        tensor=vi.name,
                    )
                d.Clear()
                d.dim_value = int(value)

    def _node_id(self, k: int, node: NodeProto) -> dict[str, Any]:
        return {"node": node.name or f"#{k}", "op_type": node.op_type}

    def _check_structure(self) -> None:
        graph = self.model.graph
        defined = {vi.name for vi in graph.input} | {i.name for i in graph.initializer}
        for k, node in enumerate(graph.node):
            for name in node.input:
                if name and name not in defined:
                    raise self.error(
                        f"input {name!r} is not defined by the graph inputs, the initializers "
                        "or an earlier node",
                        **self._node_id(k, node),
                    )
            defined.update(o for o in node.output if o)
        for out in graph.output:
            if out.name not in defined:
                raise self.error("graph output is not computed by any node", tensor=out.name)
        try:
            onnx.checker.check_model(self.model)
        except (onnx.checker.ValidationError, Exception) as exc:
            raise self.error(f"invalid model: {str(exc).strip().splitlines()[0]}") from None

    def _infer_shapes(self) -> None:
        try:
            inferred = onnx.shape_inference.infer_shapes(self.model, data_prop=True)
        except Exception as exc:
            raise self.error(f"ONNX shape inference failed: {str(exc).strip()}") from None
        self.types: dict[str, tuple[int, tuple[int | None, ...] | None]] = {}
        g = inferred.graph
        for vi in [*g.input, *g.value_info, *g.output]:
            tt = vi.type.tensor_type
            shape = None
            if tt.HasField("shape"):
                shape = tuple(
                    d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                    for d in tt.shape.dim
                )
            self.types[vi.name] = (tt.elem_type, shape)
        for init in g.initializer:
            self.consts[init.name] = numpy_helper.to_array(init)
            self.const_types[init.name] = init.data_type
            self.types[init.name] = (init.data_type, tuple(init.dims))

    # --- tensors --------------------------------------------------------------------------

    def static_shape(self, name: str) -> tuple[int, ...] | None:
        if name in self.env:
            return self.env[name].shape
        if name in self.consts:
            return tuple(self.consts[name].shape)
        shape = self.types.get(name, (0, None))[1]
        if shape is None or any(d is None for d in shape):
            return None
        return tuple(int(d) for d in shape)  # type: ignore[arg-type]

    def is_float(self, name: str) -> bool:
        if name in self.consts:
            return self.const_types[name] == FLOAT
        return self.types.get(name, (0, None))[0] == FLOAT

    def tensor(self, name: str) -> Tensor:
        """The relsat tensor of a float32 ONNX tensor (constants become weights); else opaque."""
        if not name or not self.is_float(name):
            raise Unmapped
        if name not in self.env:
            self.env[name] = self.weight(name, self.consts[name])
        return self.env[name]

    def weight(self, base: str, value: np.ndarray) -> Tensor:
        name, k = base, 1
        while name in self.g._names:
            name, k = f"{base}_{k}", k + 1
        return self.g.weight(value.shape, name=name, value=value.astype(np.float32))

    def derived_weight(self, name: str, purpose: str, make: Callable[[], np.ndarray]) -> Tensor:
        key = (name, purpose)
        if key not in self.derived:
            self.derived[key] = self.weight(f"{name}_{purpose}", make())
        return self.derived[key]

    def const(self, name: str) -> np.ndarray | None:
        return self.consts.get(name) if name else None

    # --- conversion -----------------------------------------------------------------------

    def run(self) -> Graph:
        graph = self.model.graph
        self.uses = Counter(name for node in graph.node for name in node.input if name)
        self.uses.update(o.name for o in graph.output)
        self.node_by_input: dict[str, int] = {}
        for k, node in enumerate(graph.node):
            for name in node.input:
                self.node_by_input.setdefault(name, k)
        for vi in self.inputs:
            dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            self.env[vi.name] = self.g.input(dims, name=vi.name)
        for k, node in enumerate(graph.node):
            if k not in self.skip:
                self.convert(k, node)
        outputs = []
        for out in graph.output:
            if not self.is_float(out.name):
                elem = self.types.get(out.name, (0, None))[0]
                raise self.error(
                    f"output type {TensorProto.DataType.Name(elem)} is not supported "
                    "(only float32)",
                    tensor=out.name,
                )
            outputs.append(self.tensor(out.name))
        try:
            return self.g.build(outputs).reachable()
        except GraphError as exc:
            raise self.error(str(exc)) from None

    def convert(self, k: int, node: NodeProto) -> None:
        where = self._node_id(k, node)
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            self.constant(node, where)
            return
        handler = HANDLERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        used_outputs = [o for o in node.output if o and self.uses[o]]
        mapped = None
        if handler is not None and all(self.is_float(o) for o in used_outputs):
            try:
                mapped = handler(self, k, node, attrs_of(node))
            except Unmapped:
                mapped = None
            except GraphError as exc:
                raise self.error(exc.reason, **where) from None
        if mapped is None:
            self.opaque(node, where)
            return
        for name, t in mapped.items():
            want = self.static_shape_inferred(name)
            if want is not None and want != t.shape:
                raise self.error(
                    f"relsat computes shape {list(t.shape)} for {name!r}, ONNX infers {list(want)}",
                    **where,
                )
            self.env[name] = t

    def static_shape_inferred(self, name: str) -> tuple[int, ...] | None:
        shape = self.types.get(name, (0, None))[1]
        if shape is None or any(d is None for d in shape):
            return None
        return tuple(int(d) for d in shape)  # type: ignore[arg-type]

    def constant(self, node: NodeProto, where: dict[str, Any]) -> None:
        attr = node.attribute[0]
        value = onnx.helper.get_attribute_value(attr)
        if attr.type == AttributeProto.TENSOR:
            arr, dtype = numpy_helper.to_array(value), value.data_type
        elif attr.type in (AttributeProto.FLOAT, AttributeProto.FLOATS):
            arr, dtype = np.array(value, dtype=np.float32), FLOAT
        elif attr.type in (AttributeProto.INT, AttributeProto.INTS):
            arr, dtype = np.array(value, dtype=np.int64), TensorProto.INT64
        else:
            self.opaque(node, where)
            return
        self.consts[node.output[0]] = arr
        self.const_types[node.output[0]] = dtype

    def opaque(self, node: NodeProto, where: dict[str, Any]) -> None:
        layout: list[Any] = []
        tensors = []
        for name in node.input:
            if not name:
                layout.append("")
            elif name in self.env:
                tensors.append(self.env[name])
                layout.append("t")
            elif self.is_float(name):
                tensors.append(self.tensor(name))
                layout.append("t")
            elif name in self.consts:
                layout.append(encode_tensor(self.consts[name], self.const_types[name]))
            else:  # a non-float tensor computed by an earlier opaque node
                if name not in self.env:
                    raise self.error(f"input {name!r} has no value", **where)
                tensors.append(self.env[name])
                layout.append("t")
        shapes, names = [], []
        for name in node.output:
            if not name:
                continue
            shape = self.static_shape_inferred(name)
            if shape is None:
                raise DynamicShapeError(
                    f"ONNX shape inference gives no static shape for output {name!r}; "
                    "relsat needs one to keep the operator opaque",
                    path=self.path,
                    **where,
                )
            shapes.append(shape)
            names.append(name)
        attrs: dict[str, Any] = {a.name: _encode_attr(a, where) for a in node.attribute}
        attrs["_onnx"] = {
            "domain": node.domain,
            "opset": self.opsets.get(node.domain or "", self.opsets[""]),
            "types": {a.name: AttributeProto.AttributeType.Name(a.type) for a in node.attribute},
            "inputs": layout,
            "outputs": [1 if o else 0 for o in node.output],
        }
        try:
            outs = self.g.opaque(node.op_type, tensors, shapes, attrs, name=node.name or names[0])
        except GraphError as exc:
            raise self.error(exc.reason, **where) from None
        for name, t in zip(names, outs, strict=True):
            self.env[name] = t
