"""ONNX → relsat graph (see :mod:`relsat.onnx` for what is mapped and what stays opaque).

An opaque node's ``attrs`` are its ONNX attributes as plain JSON values (tensors as
``{"dtype", "dims", "data"}``) plus one ``"_onnx"`` entry that :mod:`relsat.onnx.exporter` reads
back:
``domain``, ``opset``, attribute ``types``, the input ``layout`` (per ONNX input: ``"t"`` a relsat
input, in order; ``""`` an omitted optional input; a tensor dict for a non-float constant) and
``outputs`` (per ONNX output: 1 present, 0 omitted); where a tensor input or an output is not
float32, also ``in_dtypes`` (per ``"t"`` input) and ``out_dtypes`` (per present output), ONNX
element type names.

Tensors of other element types than float32 (token ids, masks, shapes, booleans) cross the graph
as relsat tensors too, but only opaque nodes read them: every handler of :mod:`relsat.onnx.opmap`
reads its operands through :meth:`Importer.tensor`, which refuses them, so no rewrite rule ever
sees one. A graph input of any tensor type is a relsat ``input``; its element type is recorded by
the opaque nodes reading it (``in_dtypes``), and the exporter writes it back from there.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import AttributeProto, NodeProto, TensorProto, numpy_helper

from relsat.errors import GraphError, RelsatError
from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Graph
from relsat.onnx.constants import evaluate
from relsat.onnx.context import Unmapped, attrs_of, encode_tensor
from relsat.onnx.data import read_array, resolve
from relsat.onnx.decoder_ops import CONTRIB_HANDLERS as DECODER_CONTRIB_HANDLERS
from relsat.onnx.decoder_ops import HANDLERS as DECODER_HANDLERS
from relsat.onnx.errors import DynamicShapeError, EmptyTensorError, OnnxError
from relsat.onnx.names import fresh_name
from relsat.onnx.norm_ops import HANDLERS as NORM_HANDLERS
from relsat.onnx.opmap import HANDLERS
from relsat.onnx.transformer_ops import CONTRIB, CONTRIB_HANDLERS
from relsat.onnx.transformer_ops import HANDLERS as TRANSFORMER_HANDLERS

if TYPE_CHECKING:
    from relsat.onnx.symbolic import Dims

__all__ = ["Importer", "load_model", "read_model", "skeleton"]

FLOAT = TensorProto.FLOAT
MIN_OPSET = 7
#: Reshape-like steps: a chain of them on a non-float tensor is one Reshape (Importer._collapsed).
RESHAPES = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten"})
#: Float constants of at most this many elements and equal values become one weight: an
#: exporter writes each layer's own copy of a mask's 0 and -inf or a scale, and with one weight
#: the layers' identical nodes reading them are one e-node (hash-consing).
_SHARED_CONSTANT = 64


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


def _dtype_name(elem: int) -> str:
    """An ONNX element type's name (``"INT64"``); ``"UNDEFINED"`` for one inference left open."""
    try:
        return str(TensorProto.DataType.Name(elem))
    except ValueError:
        return "UNDEFINED"


def read_model(path_or_model: Any) -> tuple[onnx.ModelProto, str | None]:
    """The model (a path or a ModelProto; external data left outside) and its path, if any;
    :class:`OnnxError` for an unreadable file or one that is not an ONNX model."""
    return _read(path_or_model)


def skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` without the data of its large initializers (see :func:`_skeleton`)."""
    return _skeleton(model)


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
    importer = Importer(model, path, input_shapes or {}, batch)
    try:
        return importer.run()
    except (DynamicShapeError, EmptyTensorError) as first:
        # Exporters compute shapes at run time (Shape → Gather → Slice …, e.g. torch's attention).
        # onnxruntime's constant folding resolves them once the input shapes are fixed: retry
        # once on the folded model with fixed inputs; then with the shape computations folded
        # by ONNX's reference evaluator (what onnxruntime leaves, such as the Shape → Slice →
        # ConstantOfShape of an expanded LayerNormalization function); else report the
        # original problem.
        with tempfile.TemporaryDirectory() as tmp:
            try:
                folded = _fold_constants(importer.model, importer.data_dir, tmp)
                model = onnx.load(folded, load_external_data=False)
                return Importer(model, path, {}, None, source=folded).run()
            except _folding_failures():  # onnxruntime refused to fold it, or still open
                pass  # anything else is a bug: it surfaces
        try:
            return _fold_shapes(importer, path)
        except OnnxError:
            raise first from None


def _folding_failures() -> tuple[type[Exception], ...]:
    """What onnxruntime's constant folding and the import after it raise when the model cannot
    be folded or is still open: relsat's typed errors, a file error, a protobuf decode error,
    onnxruntime's own exception classes (plain Exception subclasses: ``Fail``, ``InvalidGraph``,
    ``NotImplemented``, ...) and the RuntimeError of a C++ exception it does not translate."""
    from google.protobuf.message import DecodeError
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    ort = [c for c in vars(state).values() if isinstance(c, type) and issubclass(c, Exception)]
    return (RelsatError, OSError, RuntimeError, DecodeError, *ort)


def _fold_shapes(importer: Importer, path: str | None) -> Graph:
    """The model imported after folding its shape computations at its fixed input shapes
    (:func:`relsat.onnx.shapefold.fold` with no dynamic dim)."""
    from relsat.onnx.shapefold import fold
    from relsat.onnx.symbolic import Dims

    shapes = {
        vi.name: tuple(int(d.dim_value) for d in vi.type.tensor_type.shape.dim)
        for vi in importer.inputs
    }
    static = Dims((), shapes)
    folded = fold(importer.model, static, static, skeleton=_skeleton, const=importer.const)
    return Importer(folded.model, path, {}, None, source=importer.source).run()


def _fold_constants(model: onnx.ModelProto, data_dir: str | None, folder: str) -> str:
    """The model after onnxruntime's BASIC graph optimizations (constant folding), written in
    ``folder`` (large initializers in an external file beside it); returns its path."""
    import onnxruntime as ort
    from onnx.external_data_helper import load_external_data_for_model

    source, target = os.path.join(folder, "in.onnx"), os.path.join(folder, "folded.onnx")
    model = _copy(model)  # saving moves the data out of the model it writes
    if data_dir is not None:
        load_external_data_for_model(model, data_dir)
    onnx.save_model(
        model,
        source,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="in.onnx.data",
        size_threshold=1024,
    )
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = target
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", "folded.onnx.data"
    )
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
    )
    options.log_severity_level = 3
    # Constant folding only: the transpose optimizer would move a Transpose past the Mul by a
    # rotary table ((x^T) * cos -> (x * cos)^T), and the rotary rules would no longer see x in
    # both halves of the rotation (the query of a legacy decode step lost its fusion).
    ort.InferenceSession(
        source, options, providers=["CPUExecutionProvider"], disabled_optimizers=_NOT_FOLDING
    )
    return target


#: onnxruntime's BASIC optimizers that rewrite rather than fold (see :func:`_fold_constants`).
_NOT_FOLDING = ["TransposeOptimizer"]


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


class Importer:
    """One import: the prepared model, the builder, and the ONNX name → tensor maps (the
    :class:`~relsat.onnx.context.ImportContext` the op handlers see)."""

    def __init__(
        self,
        model: onnx.ModelProto,
        path: str | None,
        input_shapes: Mapping[str, Sequence[int]],
        batch: int | None,
        source: str | None = None,
        symbolic: frozenset[str] = frozenset(),
        dims: Dims | None = None,
    ) -> None:
        self.path = path
        self.symbolic = symbolic  # constants standing for dims: never folded further here
        self.dims = dims  # what the markers stand for (None: every dim static)
        self.source = source or path  # the file holding the model (and beside it, its data)
        self.data_dir = os.path.dirname(os.path.abspath(self.source)) if self.source else None
        self.opsets = {(o.domain or ""): o.version for o in model.opset_import}
        self.opsets.setdefault("", self.opsets.get("ai.onnx", 0))
        self.opset = self.opsets[""]
        if 0 < self.opset < MIN_OPSET:  # older exports (the model zoo's opset 3-6 graphs)
            model = _upgraded(model, self.opset, path)
            self.opsets[""] = self.opset = MIN_OPSET
        if self.opset < MIN_OPSET:
            raise OnnxError(f"opset {self.opset} is not supported (need >= {MIN_OPSET})", path=path)
        self.model = onnx.ModelProto()
        self.model.CopyFrom(model)
        if _runtime_ops_to_contrib(self.model):
            self.opsets.setdefault(CONTRIB, 1)
        self.external = resolve(self.model, self.data_dir, path)  # large weights left outside
        self.g = GraphBuilder()
        self.env: dict[str, Tensor] = {}  # ONNX tensor name → relsat tensor
        self.consts: dict[str, np.ndarray] = {}  # initializers and folded constants
        self.const_types: dict[str, int] = {}
        self.derived: dict[tuple[str, str], Tensor] = {}  # (const, purpose) → weight
        self.scalars: dict[float, Tensor] = {}  # value → scalar
        self.small: dict[tuple[str, tuple[int, ...], bytes], Tensor] = {}  # small constants
        self.graph_outputs: set[str] = set()
        self.skip: set[int] = set()  # indices of nodes already handled (folded constants)
        self.uses: Counter[str] = Counter()  # tensor name → node inputs and graph outputs read it
        self.producers: dict[str, NodeProto] = {}  # tensor name → the node writing it
        self.collapsed: dict[str, str] = {}  # a collapsed reshape's output → its source
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
                f"{{input_shapes}} names unknown inputs {unknown}; inputs are "
                f"{[vi.name for vi in self.inputs]}",
                settings=("input_shapes",),
            )
        self.input_types: dict[str, int] = {}
        for vi in self.inputs:
            ttype = vi.type.tensor_type
            self.input_types[vi.name] = self._elem_type(vi, "input")
            dims = ttype.shape.dim
            given = input_shapes.get(vi.name)
            if given is not None and len(given) != len(dims):
                raise self.error(
                    f"{{input_shapes}} gives rank {len(given)}, the input has rank {len(dims)}",
                    tensor=vi.name,
                    settings=("input_shapes",),
                )
            for i, d in enumerate(dims):
                static = d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                value = given[i] if given is not None else static
                if value is None and i == 0 and batch is not None:
                    value = batch
                if value is None:
                    label = d.dim_param or "?"
                    raise self.error(
                        f"dim {i} ({label}) is dynamic; fix it with {{input_shapes}} or {{batch}}",
                        tensor=vi.name,
                        settings=("input_shapes", "batch"),
                    )
                if static is not None and value != static:
                    raise self.error(
                        f"{{input_shapes}} gives dim {i} = {value}, the model fixes it to {static}",
                        tensor=vi.name,
                        settings=("input_shapes",),
                    )
                d.Clear()
                d.dim_value = int(value)

    def _elem_type(self, vi: onnx.ValueInfoProto, what: str) -> int:
        """The element type of a graph input or output; OnnxError unless a known tensor type."""
        kind = vi.type.WhichOneof("value")
        if kind != "tensor_type":
            raise self.error(
                f"{what} is a {kind or 'value of no type'}, not a tensor; only tensors are "
                "supported",
                tensor=vi.name,
            )
        elem = vi.type.tensor_type.elem_type
        if elem == TensorProto.UNDEFINED or elem not in TensorProto.DataType.values():
            raise self.error(f"{what} has unknown element type {elem}", tensor=vi.name)
        return int(elem)

    def _node_id(self, k: int, node: NodeProto) -> dict[str, Any]:
        return {"node": node.name or f"#{k}", "op_type": node.op_type}

    def _check_structure(self) -> None:
        graph = self.model.graph
        if graph.sparse_initializer:
            name = graph.sparse_initializer[0].values.name or None
            raise self.error("sparse initializers are not supported", tensor=name)
        for out in graph.output:
            self._elem_type(out, "output")
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
        try:  # with data left in external files, the checker needs the folder they are in
            onnx.checker.check_model(
                self.source if self.external and self.source else _skeleton(self.model)
            )
        except (onnx.checker.ValidationError, Exception) as exc:
            raise self.error(f"invalid model: {str(exc).strip().splitlines()[0]}") from None

    def _infer_shapes(self) -> None:
        try:
            inferred = onnx.shape_inference.infer_shapes(_skeleton(self.model), data_prop=True)
        except Exception as exc:
            raise self.error(f"ONNX shape inference failed: {str(exc).strip()}") from None
        self.types: dict[str, tuple[int, tuple[int | None, ...] | None]] = {}
        self.kinds: dict[str, str] = {}  # a value's type when not a tensor (sequence_type, ...)
        self.empty: dict[str, int] = {}  # a tensor inferred empty: the axis whose size is 0
        g = inferred.graph
        for vi in [*g.input, *g.value_info, *g.output]:
            kind = vi.type.WhichOneof("value")
            if kind not in (None, "tensor_type"):
                self.kinds[vi.name] = kind
            tt = vi.type.tensor_type
            for axis, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value") and d.dim_value == 0:
                    self.empty.setdefault(vi.name, axis)
            shape = None
            if tt.HasField("shape"):
                shape = tuple(
                    d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                    for d in tt.shape.dim
                )
            self.types[vi.name] = (tt.elem_type, shape)
        for init in self.model.graph.initializer:
            self.consts[init.name] = read_array(init, self.data_dir, self.path)
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

    def dtype(self, name: str) -> int:
        """The ONNX element type of tensor ``name`` (0 when shape inference leaves it open)."""
        if name in self.consts:
            return self.const_types[name]
        if name in self.input_types:
            return self.input_types[name]
        return self.types.get(name, (0, None))[0]

    def is_float(self, name: str) -> bool:
        return self.dtype(name) == FLOAT

    def tensor(self, name: str) -> Tensor:
        """The relsat tensor of a float32 ONNX tensor (constants become weights); else opaque."""
        if not name or not self.is_float(name):
            raise Unmapped
        if name not in self.env:
            value = self.consts[name]
            key = None
            if value.size <= _SHARED_CONSTANT:  # small constants of equal value are one weight,
                key = (value.dtype.str, value.shape, value.tobytes())  # so their readers merge
            if key is not None and key in self.small:
                self.env[name] = self.small[key]
            else:
                self.env[name] = self.weight(name, value)
                if key is not None:
                    self.small[key] = self.env[name]
        return self.env[name]

    def weight(self, base: str, value: np.ndarray) -> Tensor:
        name, k = base, 1
        while name in self.g._names:
            name, k = f"{base}_{k}", k + 1
        return self.g.weight(value.shape, name=name, value=value.astype(np.float32, copy=False))

    def derived_weight(self, name: str, purpose: str, make: Callable[[], np.ndarray]) -> Tensor:
        key = (name, purpose)
        if key not in self.derived:
            self.derived[key] = self.weight(f"{name}_{purpose}", make())
        return self.derived[key]

    def constant_class(self, name: str) -> Tensor:
        """The tensor of a boolean constant ``name`` (or a mask's index), an opaque ``Constant``
        e-node (one per value): a mask's all-true operand is a class whose facts the rules read,
        where an integer constant (a shape, axes, indices) stays a parameter in its reader's
        attributes (but for a mask gather's index: :meth:`_is_mask_index`)."""
        value = self.consts[name]
        dtype = self.const_types[name]
        key = (value.dtype.str, value.shape, value.tobytes())
        if key not in self.small:
            attrs = {
                "value": encode_tensor(value, dtype),
                "_onnx": {
                    "domain": "",
                    "opset": self.opsets[""],
                    "types": {"value": "TENSOR"},
                    "inputs": [],
                    "outputs": [1],
                    "out_dtypes": [_dtype_name(dtype)],
                },
            }
            (self.small[key],) = self.g.opaque("Constant", [], [value.shape], attrs, name=name)
        return self.small[key]

    def _is_mask_index(self, node: NodeProto, name: str) -> bool:
        """Whether constant ``name`` is the index of a ``GatherND``, or of a ``Gather`` from
        boolean data: a class of its own (:meth:`constant_class`), whose facts ``grid`` and
        ``rows`` the rules read (at fixed shapes, a mask's index grid)."""
        if node.op_type not in ("GatherND", "Gather") or len(node.input) < 2:
            return False
        if node.input[1] != name or node.domain not in ("", "ai.onnx"):
            return False
        return node.op_type == "GatherND" or self.dtype(node.input[0]) == TensorProto.BOOL

    def view_input(self, name: str) -> Tensor:
        if name and self.dtype(name) == TensorProto.BOOL and name in self.env:
            return self.env[name]
        return self.tensor(name)

    def const(self, name: str) -> np.ndarray | None:
        return self.consts.get(name) if name else None

    def scalar(self, value: float) -> Tensor:
        if value not in self.scalars:
            self.scalars[value] = self.g.scalar(value)
        return self.scalars[value]

    def readers(self, name: str) -> int:
        return self.uses[name]

    def producer(self, name: str) -> NodeProto | None:
        return self.producers.get(name)

    # --- conversion -----------------------------------------------------------------------

    def run(self) -> Graph:
        self._drop_empty_pieces()
        graph = self.model.graph
        self.uses.update(name for node in graph.node for name in node.input if name)
        self.uses.update(o.name for o in graph.output)
        self.graph_outputs = {o.name for o in graph.output}
        for node in graph.node:
            self.producers.update((o, node) for o in node.output if o)
        for vi in self.inputs:
            dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            self.env[vi.name] = self.g.input(dims, name=vi.name)
        # Constants first (Constant nodes, and weights computed from constants: folded, in node
        # order, so chains fold): a handler reads its constant operands wherever they are written.
        # A graph output stays computed, unless a Constant writes it (as before).
        computed = {o.name for o in graph.output}
        for k, node in enumerate(graph.node):
            reads_dims = any(name in self.symbolic for name in node.input)
            folded = None if reads_dims else evaluate(node, self.const)
            if folded is None or (node.op_type != "Constant" and node.output[0] in computed):
                continue
            self.consts[node.output[0]], self.const_types[node.output[0]] = folded
            self.skip.add(k)
        for k, node in enumerate(graph.node):
            if k not in self.skip and not self._empty_and_unread(node):
                self.convert(k, node)
        outputs = []
        for out in graph.output:
            if out.name in self.env:
                outputs.append(self.env[out.name])
            elif self.is_float(out.name):
                outputs.append(self.tensor(out.name))
            else:
                raise self.error(
                    "a graph output that is a constant of type "
                    f"{_dtype_name(self.dtype(out.name))} is not supported",
                    tensor=out.name,
                )
        try:
            return self.g.build(outputs).reachable()
        except GraphError as exc:
            raise self.error(str(exc)) from None

    def _drop_empty_pieces(self) -> None:
        """Empty inputs of a Concat along their empty axis left out (GPT-J's ``k[..., rd:]``
        where the rotary dim is the whole head: nothing to pass through); the node writing one
        is then skipped when nothing else reads it (:meth:`_empty_and_unread`)."""
        for node in self.model.graph.node:
            if node.op_type != "Concat" or node.domain not in ("", "ai.onnx"):
                continue
            axis = next((a.i for a in node.attribute if a.name == "axis"), None)
            kept = [n for n in node.input if not self._empty_at(n, axis)]
            if kept and len(kept) < len(node.input):
                del node.input[:]
                node.input.extend(kept)

    def _empty_at(self, name: str, axis: int | None) -> bool:
        shape = self.types.get(name, (0, None))[1]
        if axis is None or name not in self.empty or shape is None or not shape:
            return False
        return self.empty[name] == axis % len(shape)

    def _empty_and_unread(self, node: NodeProto) -> bool:
        outs = [o for o in node.output if o]
        return bool(outs) and all(o in self.empty and not self.uses[o] for o in outs)

    def convert(self, k: int, node: NodeProto) -> None:
        where = self._node_id(k, node)
        if self._passes_through(node):
            return
        node = self._collapsed(node)
        handler = None
        if node.domain in ("", "ai.onnx"):
            handler = (
                DECODER_HANDLERS.get(node.op_type)
                or TRANSFORMER_HANDLERS.get(node.op_type)
                or NORM_HANDLERS.get(node.op_type)
                or HANDLERS.get(node.op_type)
            )
        elif node.domain == CONTRIB:
            handler = CONTRIB_HANDLERS.get(node.op_type) or DECODER_CONTRIB_HANDLERS.get(
                node.op_type
            )
        if self.dims is not None and any(o.tensor in node.output for o in self.dims.opened):
            handler = None  # dims computed from values: the operator as it is, never a reshape
        used_outputs = [o for o in node.output if o and self.uses[o]]
        mapped = None
        # an output ONNX's inference leaves open (a contrib op it does not know) is float when
        # a handler maps the node: relsat's tensors are float32, but for a boolean mask's views
        views = node.op_type in ("Reshape", "Flatten")  # (an Unsqueeze keeps its constant axes)
        types = (FLOAT, 0, TensorProto.BOOL) if views else (FLOAT, 0)
        if handler is not None and all(self.dtype(o) in types for o in used_outputs):
            try:
                mapped = handler(self, node, attrs_of(node))
            except Unmapped:
                mapped = None
            except GraphError as exc:
                raise self.error(exc.reason, **where) from None
        if mapped is None:
            self.opaque(node, where)
            return
        for name, t in mapped.items():
            want = self.inferred_shape(name)
            if want is not None and want != t.shape:
                raise self.error(
                    f"relsat computes shape {list(t.shape)} for {name!r}, ONNX infers {list(want)}",
                    **where,
                )
            if self.dtype(name) == 0:
                self.types[name] = (FLOAT, t.shape)
            self.env[name] = t

    def _passes_through(self, node: NodeProto) -> bool:
        """Whether ``node`` hands its non-float first input on unchanged — a Cast to the input's
        own type, an Expand or a Reshape to its own shape, a Slice with unit steps that keeps
        every axis whole — by the element types and shapes ONNX infers (symbolic dims as
        markers, so for every value of them); its output is then the input's tensor. Masks go
        through such steps (cast to bool twice, sliced to their own length)."""
        if node.domain not in ("", "ai.onnx") or len(node.output) != 1 or not node.input:
            return False
        if node.op_type not in ("Cast", "Expand", "Reshape", "Slice"):
            return False
        src, out = node.input[0], node.output[0]
        if src not in self.env or self.dtype(src) in (FLOAT, 0) or out in self.graph_outputs:
            return False
        shape = self.inferred_shape(src)
        if shape is None or self.dtype(out) != self.dtype(src) or self.inferred_shape(out) != shape:
            return False
        if node.op_type == "Slice" and len(node.input) > 4 and node.input[4]:
            steps = self.const(node.input[4])  # a reversed slice keeps the shape too
            if steps is None or np.any(steps != 1):
                return False
        self.env[out] = self.env[src]
        return True

    def _collapsed(self, node: NodeProto) -> NodeProto:
        """``node``, or — for a reshape-like step (:data:`RESHAPES`) of a non-float tensor right
        after another whose output only it reads (a mask unsqueezed, flattened and reshaped) —
        one Reshape from the first step's input to ``node``'s shape; the steps it replaces are
        then read by nothing and dropped. Float reshapes are the e-graph's own."""
        if node.domain not in ("", "ai.onnx") or node.op_type not in RESHAPES:
            return node
        x, out = node.input[0], node.output[0]
        before = self.producers.get(x)
        if (
            self.dtype(x) in (FLOAT, 0)
            or before is None
            or before.domain not in ("", "ai.onnx")
            or before.op_type not in RESHAPES
            or self.uses[x] != 1
            or x in self.graph_outputs
        ):
            return node
        source = self.collapsed.get(x, before.input[0])
        shape = self.inferred_shape(out)
        known = source in self.env or source in self.consts  # a dim read off a shape, say
        if shape is None or not known or self.static_shape(source) is None:
            return node
        target = fresh_name(f"{out}_shape", {*self.consts, *self.types, *self.env})
        self.consts[target] = np.array(shape, dtype=np.int64)
        self.const_types[target] = TensorProto.INT64
        self.types[target] = (TensorProto.INT64, (len(shape),))
        self.collapsed[out] = source
        return onnx.helper.make_node("Reshape", [source, target], [out], name=node.name)

    def inferred_shape(self, name: str) -> tuple[int, ...] | None:
        shape = self.types.get(name, (0, None))[1]
        if shape is None or any(d is None for d in shape):
            return None
        return tuple(int(d) for d in shape)  # type: ignore[arg-type]

    def opaque(self, node: NodeProto, where: dict[str, Any]) -> None:
        layout: list[Any] = []
        tensors, in_dtypes = [], []
        for name in node.input:
            if not name:
                layout.append("")
                continue
            if name in self.env:
                tensors.append(self.env[name])
            elif self.is_float(name):
                tensors.append(self.tensor(name))
            elif name in self.consts and (
                self.const_types[name] == TensorProto.BOOL or self._is_mask_index(node, name)
            ):
                tensors.append(self.constant_class(name))  # a value the mask rules read
            elif name in self.consts:
                layout.append(encode_tensor(self.consts[name], self.const_types[name]))
                continue
            else:
                raise self.error(f"input {name!r} has no value", **where)
            layout.append("t")
            in_dtypes.append(self.dtype(name))
        shapes, names = [], []
        # Subgraphs and other attributes relsat cannot carry are refused first: their outputs'
        # shapes are open too, but the subgraph is why.
        located = {"path": self.path, **where}
        attrs: dict[str, Any] = {a.name: _encode_attr(a, located) for a in node.attribute}
        # An output nothing reads is dropped (the exporter writes a fresh name for it), so that
        # a node with one output read is one e-node (EmbedLayerNormalization's mask_index).
        read = [o for o in node.output if o and self.uses[o]]
        kept = read if 0 < len(read) < len([o for o in node.output if o]) else node.output
        for name in kept:
            if not name:
                continue
            if name in self.kinds:
                raise self.error(
                    f"output {name!r} is a {self.kinds[name]}, not a tensor; only tensors are "
                    "supported",
                    **where,
                )
            shape = self.inferred_shape(name)
            if shape is None and name in self.empty:  # folding may still make it a constant
                raise EmptyTensorError(
                    f"output {name!r} is an empty tensor (dim {self.empty[name]} is 0); relsat "
                    "needs every dim to be at least 1",
                    path=self.path,
                    **where,
                )
            if shape is None:
                error = DynamicShapeError(self._open_shape(node, name), path=self.path, **where)
                error.output, error.inferred = name, self.types.get(name, (0, None))
                raise error
            shapes.append(shape)
            names.append(name)
        attrs["_onnx"] = {
            "domain": node.domain,
            "opset": self.opsets.get(node.domain or "", self.opsets[""]),
            "types": {a.name: AttributeProto.AttributeType.Name(a.type) for a in node.attribute},
            "inputs": layout,
            # per ONNX output: 1 a relsat output, 2 present but unread (dropped), 0 absent
            "outputs": [(1 if o in names else 2) if o else 0 for o in node.output],
        }
        out_dtypes = [self.dtype(name) for name in names]
        # Element types other than float32 are recorded: the exporter declares graph inputs and
        # outputs of these types from them (only where needed, so float graphs' attrs stay as
        # they were).
        for key, dtypes in (("in_dtypes", in_dtypes), ("out_dtypes", out_dtypes)):
            if any(d != FLOAT for d in dtypes):
                attrs["_onnx"][key] = [_dtype_name(d) for d in dtypes]
        # Several outputs read: one opaque node per output (an e-class holds one tensor), each
        # marking the others present but unread; the exporter writes them back as one node.
        for j, name in enumerate(names):
            one = attrs if len(names) == 1 else _projection(attrs, node.output, name, out_dtypes[j])
            try:
                (t,) = self.g.opaque(
                    node.op_type, tensors, [shapes[j]], one, name=node.name or name
                )
            except GraphError as exc:
                raise self.error(exc.reason, **where) from None
            self.env[name] = t

    def _open_shape(self, node: NodeProto, name: str) -> str:
        """Why output ``name`` of ``node`` has no static shape, in one line: which of its dims
        are open and the graph inputs whose values (not shapes) they are computed from."""
        shape = self.types.get(name, (0, None))[1]
        open_ = (
            "its rank"
            if shape is None
            else "dim " + ", ".join(str(i) for i, d in enumerate(shape) if d is None)
        )
        sources = self._value_sources(node)
        why = (
            f"computed from the values of input {', '.join(repr(s) for s in sources)}"
            if sources
            else "ONNX shape inference leaves it open"
        )
        return (
            f"output {name!r} has no static shape ({open_}: {why}); relsat needs one to keep "
            "the operator opaque"
        )

    def _value_sources(self, node: NodeProto) -> list[str]:
        """The graph inputs whose values reach ``node`` (through anything but Shape and Size,
        which read only shapes); the non-float ones when there are any (ids, a shape, axes)."""
        graph_inputs = [vi.name for vi in self.inputs]
        found: list[str] = []
        seen: set[str] = set()
        todo = [i for i in node.input if i] if node.op_type not in ("Shape", "Size") else []
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in graph_inputs:
                found.append(name)
                continue
            producer = self.producers.get(name)
            if producer is not None and producer.op_type not in ("Shape", "Size"):
                todo.extend(i for i in producer.input if i)
        found.sort(key=graph_inputs.index)
        ints = [n for n in found if not self.is_float(n)]
        return ints or found


#: Initializers with more elements than this are left out of :func:`_skeleton`.
SKELETON_MAX_ELEMENTS = 4096


#: onnxruntime's own operators that its optimizers (onnxruntime's transformers optimizer,
#: onnxscript's ort_fusions) write in the default domain, where onnxruntime registers them and
#: the ONNX checker knows no such operator; read as the ``com.microsoft`` operator of that name.
RUNTIME_OPS_IN_ONNX_DOMAIN = frozenset({"SimplifiedLayerNormalization"})


def _upgraded(model: onnx.ModelProto, opset: int, path: str | None) -> onnx.ModelProto:
    """``model`` converted from ``opset`` to :data:`MIN_OPSET` by ONNX's version converter;
    :class:`OnnxError` saying why when it cannot be."""
    from onnx import version_converter

    try:
        return version_converter.convert_version(model, MIN_OPSET)
    except Exception as exc:  # the converter raises RuntimeError and its own C++ errors
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise OnnxError(
            f"opset {opset} is not supported (need >= {MIN_OPSET}), and ONNX's version "
            f"converter cannot raise it: {first}",
            path=path,
        ) from None


def _projection(
    attrs: dict[str, Any], outputs: Sequence[str], name: str, dtype: int
) -> dict[str, Any]:
    """The attributes of the opaque node for output ``name`` alone of a node writing
    ``outputs``: the others present but unread, its own element type."""
    meta = {**attrs["_onnx"], "outputs": [(1 if o == name else 2) if o else 0 for o in outputs]}
    meta.pop("out_dtypes", None)
    if dtype != FLOAT:
        meta["out_dtypes"] = [_dtype_name(dtype)]
    return {**attrs, "_onnx": meta}


def _runtime_ops_to_contrib(model: onnx.ModelProto) -> bool:
    """Move the nodes of :data:`RUNTIME_OPS_IN_ONNX_DOMAIN` in the default domain of ``model``
    (in place) to ``com.microsoft``, declaring that domain; whether any moved."""
    moved = False
    for node in model.graph.node:
        if node.domain in ("", "ai.onnx") and node.op_type in RUNTIME_OPS_IN_ONNX_DOMAIN:
            node.domain = CONTRIB
            moved = True
    if moved and not any(o.domain == CONTRIB for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(CONTRIB, 1))
    return moved


def _skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` without the data of its large initializers, each declared as a graph input of
    the same type and shape instead: what the checker and shape inference need, without
    serializing hundreds of MB of weights (VGG-19: 5.6 s of its 11.3 s import). Small
    initializers stay: shape computations read them (Reshape targets, Slice bounds)."""
    big = [
        t
        for t in model.graph.initializer
        if math.prod(t.dims) > SKELETON_MAX_ELEMENTS and t.data_location != TensorProto.EXTERNAL
    ]
    if not big:
        return model
    names = {t.name for t in big}
    skeleton = _without_initializers(model, names)
    declared = {vi.name for vi in skeleton.graph.input}
    skeleton.graph.input.extend(
        onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in big
        if t.name not in declared
    )
    return skeleton


def _without_initializers(model: onnx.ModelProto, names: set[str]) -> onnx.ModelProto:
    """A shallow rebuild of ``model`` whose graph keeps every initializer except ``names``."""
    graph = onnx.GraphProto()
    for field in ("node", "input", "output", "value_info", "sparse_initializer"):
        getattr(graph, field).extend(getattr(model.graph, field))
    graph.name = model.graph.name
    graph.initializer.extend(t for t in model.graph.initializer if t.name not in names)
    out = onnx.ModelProto()
    for field in ("ir_version", "producer_name", "producer_version", "domain", "model_version"):
        setattr(out, field, getattr(model, field))
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    out.graph.CopyFrom(graph)
    return out
