"""relsat graph → ONNX model (see :mod:`relsat.onnx` for the opset, IR version and what is emitted).

Weight-only subgraphs are evaluated with :mod:`relsat.graph.kernels`; a merged weight (``merge``) is
materialized with the group count of the conv that reads it, so one lazy value can give several
initializers.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, NodeProto, TensorProto, helper, numpy_helper

from relsat.graph.execute import random_value
from relsat.graph.graph import Graph, Node, Ref
from relsat.graph.kernels import Lazy, Value, apply
from relsat.graph.ops import same_padding
from relsat.onnx import decoder_ops, norm_ops, transformer_ops
from relsat.onnx.context import decode_tensor
from relsat.onnx.errors import OPSET, OnnxError
from relsat.onnx.exportable import NEVER_FOLDED, SHAPE_ONLY
from relsat.onnx.names import fresh_name
from relsat.onnx.symbolic import Dims
from relsat.onnx.symbolize import symbolize

__all__ = ["FUSED", "Exporter", "build_model", "spelled_out", "write_model"]

FLOAT = TensorProto.FLOAT
#: The relsat ops written as one fused onnxruntime kernel (a ``com.microsoft`` contrib op, or
#: a fused operator of opset 17, 21 or 23 where the model's opset has it), with that kernel's
#: ONNX operator: the emitters' own tables (:mod:`~relsat.onnx.transformer_ops`,
#: :mod:`~relsat.onnx.decoder_ops`, :mod:`~relsat.onnx.norm_ops`). ``relsat rules check`` runs a
#: rule holding one in onnxruntime (:mod:`relsat.rewrite.ortcheck`).
FUSED: dict[str, str] = {**transformer_ops.FUSED, **decoder_ops.FUSED, **norm_ops.FUSED}

_ACTIVATION_OPS = {"RELU": "Relu", "SIGMOID": "Sigmoid", "TANH": "Tanh"}
_SIMPLE = {
    "ewadd": "Add",
    "ewmul": "Mul",
    "relu": "Relu",
    "tanh": "Tanh",
    "sigmoid": "Sigmoid",
    "dropout": "Identity",
}


def write_model(model: onnx.ModelProto, path: str | os.PathLike[str]) -> None:
    """Write ``model`` to ``path`` atomically, with external data beside it when it is too big
    for one file (:func:`relsat.onnx.data.write_model`)."""
    from relsat.onnx.data import write_model as write

    write(model, path)


def build_model(
    graph: Graph,
    *,
    opset: int | None = None,
    seed: int = 0,
    output_names: Sequence[str] | None = None,
    like: Any = None,
    dims: Dims | None = None,
) -> onnx.ModelProto:
    """See :func:`relsat.onnx.to_model`."""
    interface = _interface(like) if like is not None else None
    if interface is not None and output_names is None:
        output_names = [o.name for o in interface.output]
    exporter = Exporter(graph, opset, seed, output_names, interface)
    model = exporter.model()
    if dims is None:
        return model
    if interface is None:
        raise OnnxError("dims need like=, the model whose interface to keep")
    model = symbolize(model, dims, interface, exporter.opaque_shapes)
    try:
        _check(model)
    except Exception as exc:
        raise OnnxError(
            "the model written with symbolic dims fails onnx.checker: "
            f"{str(exc).strip().splitlines()[0]}"
        ) from None
    return model


def _interface(like: Any) -> onnx.GraphProto:
    """The graph inputs (initializers left out) and outputs of ``like`` (a ModelProto or path)."""
    if isinstance(like, onnx.ModelProto):
        source = like.graph
    else:
        path = os.fspath(like)
        try:
            source = onnx.load(path, load_external_data=False).graph
        except Exception as exc:
            raise OnnxError(
                f"cannot read the model whose interface to keep: {exc}", path=path
            ) from None
    inits = {i.name for i in source.initializer}
    out = onnx.GraphProto()
    out.input.extend(vi for vi in source.input if vi.name not in inits)
    out.output.extend(source.output)
    return out


def _tensor_pads(
    size: Sequence[int], kernel: Sequence[int], stride: Sequence[int], padding: str
) -> list[int]:
    """ONNX pads [begin..., end...] giving TASO's output size with TASO's leading pad."""
    begin, end = [], []
    for h, k, s in zip(size, kernel, stride, strict=True):
        if padding == "VALID":
            begin.append(0)
            end.append(0)
            continue
        out = (h + s - 1) // s
        top = same_padding(h, k, s)
        begin.append(top)
        end.append(max(0, (out - 1) * s + k - h - top))
    return begin + end


def _decode_tensor(spec: dict[str, Any], name: str) -> TensorProto:
    return numpy_helper.from_array(decode_tensor(spec), name)


def _plain_type(value: Any) -> int:
    """The ONNX attribute type of a plain JSON value (opaque nodes not imported from ONNX)."""
    A = onnx.AttributeProto
    if isinstance(value, bool | int):
        return A.INT
    if isinstance(value, float):
        return A.FLOAT
    if isinstance(value, str):
        return A.STRING
    if isinstance(value, list) and all(isinstance(v, bool | int) for v in value):
        return A.INTS
    if isinstance(value, list) and all(isinstance(v, int | float) for v in value):
        return A.FLOATS
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return A.STRINGS
    if isinstance(value, dict) and {"dtype", "dims", "data"} <= set(value):
        return A.TENSOR
    raise OnnxError(f"attribute value {value!r} has no ONNX attribute type")


class Exporter:
    """One export: the graph, the ONNX nodes and initializers written so far, the names used
    (an :class:`~relsat.onnx.context.ExportContext` for :mod:`relsat.onnx.transformer_ops`)."""

    def __init__(
        self,
        graph: Graph,
        opset: int | None,
        seed: int,
        output_names: Sequence[str] | None,
        interface: onnx.GraphProto | None = None,
    ) -> None:
        self.graph = graph
        self.seed = seed
        self.interface = interface
        self.dtypes = _recorded_dtypes(graph)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.init_of: dict[tuple[Ref, int], str] = {}
        self.used: set[str] = {n.name or "" for n in graph.nodes if n.op in ("input", "weight")}
        self.tensor_name: dict[Ref, str] = {}
        self.opset, self.domains = self._opsets(opset)
        self.outputs = self._flat_outputs()
        self.output_names = self._output_names(output_names)
        self.foldable = self._foldable()
        self.values: dict[Ref, Value] = {}
        self.memo: dict[Hashable, str] = {}
        self.opaque_shapes: dict[str, tuple[int, ...]] = {}  # what ONNX may not infer
        self.siblings: dict[str, onnx.NodeProto] = {}  # one operator's outputs: one node

    # --- opsets ---------------------------------------------------------------------------

    def _opsets(self, requested: int | None) -> tuple[int, dict[str, int]]:
        recorded: dict[str, set[int]] = {}
        for _, domain, at in _imported(self.graph):
            recorded.setdefault(domain, set()).add(at)
        if requested is not None and requested < 7:
            raise OnnxError(f"opset {requested} is not supported (need >= 7)")
        default = recorded.pop("", set())
        if requested is None:
            if len(default) > 1:
                raise OnnxError(f"opaque nodes come from several opsets {sorted(default)}")
            opset = default.pop() if default else OPSET
            for fused, at in _RAISING:  # the fused kernels' opsets, the highest first
                if opset < at and self._raise_to(opset, fused, at):
                    opset = at
                    break
        else:
            opset = requested
            for op_type, domain, at in _imported(self.graph):
                if (
                    not domain
                    and not _same_schema(op_type, at, opset)
                    and not _types_only(op_type, at, opset)
                ):
                    raise OnnxError(
                        f"opaque {op_type} was imported at opset {at} and "
                        f"means something else at opset {opset}; export at opset {at}"
                    )
        return opset, {d: max(v) for d, v in recorded.items()}

    def _raise_to(self, opset: int, fused: frozenset[str], at: int) -> bool:
        """Whether to write the model at opset ``at`` rather than ``opset``: the graph holds one
        of the ops ``fused`` whose ONNX operator needs ``at`` (else they are spelled out), and
        every opaque node means the same at ``at`` (:func:`_raisable`)."""
        return any(n.op in fused for n in self.graph.nodes) and _raisable(self.graph, at)

    # --- names ----------------------------------------------------------------------------

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.used)

    def _flat_outputs(self) -> list[Ref]:
        flat: list[Ref] = []

        def visit(ref: Ref) -> None:
            node = self.graph.node(ref)
            if node.op == "noop":
                for r in node.inputs:
                    visit(r)
            else:
                flat.append(ref)

        for r in self.graph.outputs:
            visit(r)
        return flat

    def _output_names(self, given: Sequence[str] | None) -> list[str]:
        if given is not None:
            if len(given) != len(self.outputs) or len(set(given)) != len(given):
                raise OnnxError(
                    f"output_names needs {len(self.outputs)} distinct names, got {list(given)}"
                )
            clash = sorted(set(given) & self.used)
            if clash:
                raise OnnxError(f"output names {clash} are input or weight names")
            self.used.update(given)
            return list(given)
        names = []
        for i, ref in enumerate(self.outputs):
            node = self.graph.node(ref)
            label = (
                node.name if len(node.outputs) == 1 and node.op not in ("input", "weight") else None
            )
            names.append(self.fresh(label if label and label not in self.used else f"output{i}"))
        return names

    # --- weight folding -------------------------------------------------------------------

    def _foldable(self) -> list[bool]:
        """Per node: is it weight-only, computed here as initializers (see
        :mod:`relsat.onnx.exportable`)?"""
        flags: list[bool] = []
        for n in self.graph.nodes:
            shape_only = SHAPE_ONLY.get(n.op, frozenset())
            flags.append(
                n.op not in NEVER_FOLDED
                and all(flags[r.node] for i, r in enumerate(n.inputs) if i not in shape_only)
            )
        return flags

    def value(self, ref: Ref) -> Value:
        if ref not in self.values:
            node = self.graph.node(ref)
            if node.op == "weight":  # drawn alone: the inputs may be at marker sizes
                self.values[ref] = random_value(self.graph, node, seed=self.seed)
            else:
                args: list[Value] = []
                for r in node.inputs:
                    if self.foldable[r.node]:
                        args.append(self.value(r))
                    else:  # enlarge's reference: only its shape matters
                        args.append(np.zeros(self.graph.shape(r)))
                for i, v in enumerate(apply(node, args)):
                    self.values[Ref(ref.node, i)] = v
        return self.values[ref]

    def initializer(self, ref: Ref, consumer: Node) -> str:
        value = self.value(ref)
        groups = 0
        if isinstance(value, Lazy):
            if consumer.op not in ("conv2d", "conv2d_bias"):
                raise OnnxError(f"a merged weight feeds {consumer.op} node {consumer.id}")
            x_shape = self.graph.shape(consumer.inputs[0])
            groups = x_shape[1] // value.shape[1]
            value = value.at(groups)
        key = (ref, groups)
        if key not in self.init_of:
            node = self.graph.node(ref)
            if node.op == "weight" and groups == 0:
                name = node.name or self.fresh("w")
            else:
                name = self.fresh(f"{node.name or node.op}_{node.id}_folded")
            self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
            self.init_of[key] = name
        return self.init_of[key]

    def const(self, base: str, values: Sequence[int]) -> str:
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
        return name

    # --- emission -------------------------------------------------------------------------

    def folded(self, ref: Ref) -> np.ndarray | None:
        if not self.foldable[ref.node]:
            return None
        value = self.value(ref)
        return None if isinstance(value, Lazy) else np.asarray(value)

    def name_of(self, ref: Ref, consumer: Node) -> str:
        if self.foldable[ref.node]:
            return self.initializer(ref, consumer)
        return self.tensor_name[ref]

    def emit(
        self,
        op_type: str,
        inputs: Sequence[str],
        outputs: Sequence[str],
        *,
        domain: str = "",
        **attrs: Any,
    ) -> None:
        name = self.fresh(f"{op_type}_{len(self.nodes)}")
        node = helper.make_node(
            op_type, list(inputs), list(outputs), name=name, domain=domain or None, **attrs
        )
        self.nodes.append(node)

    def declare_domain(self, domain: str, version: int) -> None:
        self.domains.setdefault(domain, version)

    def with_activation(
        self,
        op_type: str,
        node: Node,
        inputs: list[str],
        out: str,
        *,
        add: str | None = None,
        **attrs: Any,
    ) -> None:
        """``op_type`` then (``add``: an Add of that tensor, a bias the op could not take) the
        node's activation, each a node of its own: the pattern onnxruntime fuses back."""
        steps = [s for s in (add, node.params["activation"]) if s not in (None, "NONE")]
        tmp = out if not steps else self.fresh(f"{out}_pre")
        self.emit(op_type, inputs, [tmp], **attrs)
        if add is not None:
            prev, tmp = tmp, out if len(steps) == 1 else self.fresh(f"{out}_biased")
            self.emit("Add", [prev, add], [tmp])
        if node.params["activation"] != "NONE":
            self.activation(node.params["activation"], tmp, out)

    def activation(self, act: str, x: str, out: str) -> None:
        """One activation node (ReLU6 is ``Clip(0, 6)``)."""
        if act != "RELU6":
            self.emit(_ACTIVATION_OPS[act], [x], [out])
        elif self.opset >= 11:
            low, high = (self.float_const(n, v) for n, v in (("clip_min", 0.0), ("clip_max", 6.0)))
            self.emit("Clip", [x, low, high], [out])
        else:
            self.emit("Clip", [x], [out], min=0.0, max=6.0)

    def float_const(self, base: str, value: float) -> str:
        """A float32 scalar initializer."""
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.array(value, dtype=np.float32), name))
        return name

    def float_array(self, base: str, value: np.ndarray) -> str:
        """A float32 initializer holding ``value``."""
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
        return name

    def bias_input(self, ref: Ref) -> str | None:
        """A fused op's bias as the 1-D initializer Conv's B / Gemm's C take, or None when the
        bias is computed at run time (then it is added by a separate Add)."""
        if not self.foldable[ref.node]:
            return None
        key = (ref, -1)  # the 1-D form, apart from the tensor's own initializer
        if key not in self.init_of:
            value = np.asarray(self.value(ref), dtype=np.float32).reshape(-1)
            name = self.fresh(f"{self.graph.node(ref).name or 'bias'}_{ref.node}_1d")
            self.inits.append(numpy_helper.from_array(value, name))
            self.init_of[key] = name
        return self.init_of[key]

    def model(self) -> onnx.ModelProto:
        needed = self._needed()
        first_output: dict[Ref, str] = {}
        for ref, name in zip(self.outputs, self.output_names, strict=True):
            node = self.graph.node(ref)
            plain = node.op not in ("input", "same")
            if ref not in first_output and plain and not self.foldable[ref.node]:
                first_output[ref] = name
        for node in self.graph.nodes:
            if node.op == "input":
                self.tensor_name[Ref(node.id, 0)] = node.name or ""
                continue
            if node.op == "noop" or self.foldable[node.id] or node.id not in needed:
                continue
            if node.op == "same":  # no computation: its input's name
                self.tensor_name[Ref(node.id, 0)] = self.name_of(node.inputs[0], node)
                continue
            outs = []
            for i in range(len(node.outputs)):
                ref = Ref(node.id, i)
                self.tensor_name[ref] = first_output.get(ref) or self.fresh(
                    f"{node.name or node.op}_{node.id}" + (f"_{i}" if len(node.outputs) > 1 else "")
                )
                outs.append(self.tensor_name[ref])
            self.node(node, outs)
        for ref, name in zip(self.outputs, self.output_names, strict=True):
            if first_output.get(ref) != name:
                src = self.name_of(ref, self.graph.node(ref))
                self.emit("Identity", [src], [name])
        return self._finish()

    def _needed(self) -> set[int]:
        keep: set[int] = set()
        stack = [r.node for r in self.outputs]
        while stack:
            i = stack.pop()
            if i not in keep:
                keep.add(i)
                stack.extend(r.node for r in self.graph.nodes[i].inputs)
        return keep

    def node(self, node: Node, outs: list[str]) -> None:
        p = node.params
        shapes = [self.graph.shape(r) for r in node.inputs]
        # A fused op's constant bias goes in as the 1-D B / C operand; else it is added after.
        bias = None
        if node.op == "conv2d_bias" or (node.op == "matmul_bias" and len(shapes[0]) == 2):
            bias = self.bias_input(node.inputs[2])
        # (a skiplayernorm's packed scale and bias are unpacked by its emitter, an attention's
        # bias is written, or left out, by its emitter)
        two = bias or node.op == "skiplayernorm"
        take = 2 if two else 3 if node.op in ("attention", "gqa", "mha") else len(node.inputs)
        ins = [self.name_of(r, node) for r in node.inputs[:take]]
        add = ins[2] if len(ins) == 3 and node.op in ("conv2d_bias", "matmul_bias") else None
        if node.op in _SIMPLE:
            self.emit(_SIMPLE[node.op], ins, outs)
        elif node.op in ("conv2d", "conv2d_bias"):
            x, w = shapes[:2]
            kernel = list(w[2:])
            self.with_activation(
                "Conv",
                node,
                ins[:2] + ([bias] if bias else []),
                outs[0],
                add=add,
                kernel_shape=kernel,
                strides=list(p["stride"]),
                pads=_tensor_pads(x[2:], kernel, p["stride"], p["padding"]),
                group=x[1] // w[1],
            )
        elif node.op == "linear":
            self.emit("MatMul", ins, outs)
        elif node.op in ("matmul", "matmul_bias"):
            if bias is not None:  # Gemm takes 2-D operands and a bias it broadcasts
                self.with_activation("Gemm", node, [*ins, bias], outs[0])
            else:
                self.with_activation("MatMul", node, ins[:2], outs[0], add=add)
        elif node.op == "relu6":
            self.activation("RELU6", ins[0], outs[0])
        elif node.op in ("poolmax", "poolavg"):
            kernel = list(p["kernel"])
            if kernel == list(shapes[0][2:]) and p["padding"] == "VALID":  # the whole input:
                # a global pool, valid at every size (an image side may be symbolic)
                op_type = "GlobalMaxPool" if node.op == "poolmax" else "GlobalAveragePool"
                self.with_activation(op_type, node, ins, outs[0])
                return
            pads = _tensor_pads(shapes[0][2:], kernel, p["stride"], p["padding"])
            extra: dict[str, Any] = {"count_include_pad": 0} if node.op == "poolavg" else {}
            op_type = "MaxPool" if node.op == "poolmax" else "AveragePool"
            self.with_activation(
                op_type,
                node,
                ins,
                outs[0],
                kernel_shape=kernel,
                strides=list(p["stride"]),
                pads=pads,
                **extra,
            )
        elif node.op == "transpose":
            self.emit("Transpose", ins, outs, perm=list(p["perm"]))
        elif node.op == "reshape":
            self.emit("Reshape", [ins[0], self.const("shape", p["shape"])], outs)
        elif node.op == "expand":
            self.emit("Expand", [ins[0], self.const("shape", p["shape"])], outs)
        elif node.op == "concat":
            self.emit("Concat", ins, outs, axis=p["axis"] % len(shapes[0]))
        elif node.op == "split":
            axis = p["axis"] % len(shapes[0])
            if self.opset >= 13:
                self.emit("Split", [ins[0], self.const("split", p["sizes"])], outs, axis=axis)
            else:
                self.emit("Split", ins, outs, axis=axis, split=list(p["sizes"]))
        elif node.op == "batchnorm":
            self.emit("BatchNormalization", ins, outs, epsilon=float(p["epsilon"]))
        elif node.op == "enlarge":
            self.enlarge(node, ins, outs, shapes)
        elif node.op == "opaque":
            self.opaque(node, ins, outs)
        elif node.op in transformer_ops.EXPORTED:
            transformer_ops.emit(self, node.op, p, ins, outs, node)
        elif node.op in decoder_ops.EXPORTED:
            decoder_ops.emit(self, node.op, p, ins, outs, node)
        elif node.op in norm_ops.EXPORTED:
            norm_ops.emit(self, node.op, p, ins, outs, node)
        else:
            raise OnnxError(
                f"cannot export {node.op} node {node.id}: its input is computed at run time, and "
                f"{node.op} is written only as an initializer computed from weights"
            )

    def enlarge(
        self, node: Node, ins: list[str], outs: list[str], shapes: list[tuple[int, ...]]
    ) -> None:
        (_, _, h, w), (_, _, rh, rw) = shapes
        top, left = (rh - h) // 2, (rw - w) // 2
        pads = [0, 0, top, left, 0, 0, rh - h - top, rw - w - left]
        if self.opset >= 11:
            self.emit("Pad", [ins[0], self.const("pads", pads)], outs)
        else:
            self.emit("Pad", [ins[0]], outs, pads=pads)

    def opaque(self, node: Node, ins: list[str], outs: list[str]) -> None:
        attrs = json.loads(node.params["attrs"])
        meta = attrs.pop("_onnx", None)
        if meta is None:  # built in relsat: every input a tensor, every output present
            meta = {
                "domain": "",
                "types": {},
                "inputs": ["t"] * len(ins),
                "outputs": [1] * len(outs),
            }
        if node.params["type"] == "Constant" and meta["domain"] == "" and not ins:
            self.inits.append(_decode_tensor(attrs["value"], outs[0]))  # a boolean constant
            return
        inputs, it = [], iter(ins)
        for spec in meta["inputs"]:
            if spec == "t":
                inputs.append(next(it))
            elif spec == "":
                inputs.append("")
            else:
                name = self.fresh(f"{node.params['type']}_{node.id}_const")
                self.inits.append(_decode_tensor(spec, name))
                inputs.append(name)
        self.opaque_shapes.update(
            (name, t.shape) for name, t in zip(outs, node.outputs, strict=False)
        )
        if self._merged(node, attrs, meta, inputs, outs):
            return
        out_it = iter(outs)
        outputs = [
            next(out_it)
            if code == 1
            else self.fresh(f"{node.params['type']}_{node.id}_unread")
            if code == 2
            else ""
            for code in meta["outputs"]
        ]
        proto_attrs = []
        A = onnx.AttributeProto
        for key, value in sorted(attrs.items()):
            kind = (
                A.AttributeType.Value(meta["types"][key])
                if key in meta["types"]
                else _plain_type(value)
            )
            if kind == A.TENSOR:
                value = _decode_tensor(value, "")
            elif kind == A.TENSORS:
                value = [_decode_tensor(v, "") for v in value]
            proto_attrs.append(helper.make_attribute(key, value, attr_type=kind))
        onnx_node = helper.make_node(
            node.params["type"],
            inputs,
            outputs,
            name=self.fresh(node.name or f"opaque_{node.id}"),
            domain=meta["domain"] or None,
        )
        onnx_node.attribute.extend(proto_attrs)
        self.nodes.append(onnx_node)
        self.siblings[_sibling_key(node, attrs, meta, inputs)] = onnx_node

    def _merged(
        self,
        node: Node,
        attrs: dict[str, Any],
        meta: dict[str, Any],
        inputs: list[str],
        outs: list[str],
    ) -> bool:
        """Whether ``node`` is one output of an operator already written (the importer makes
        one opaque node per output read): its output is then put in that node's unread slot."""
        first = self.siblings.get(_sibling_key(node, attrs, meta, inputs))
        slots = [j for j, code in enumerate(meta["outputs"]) if code == 1]
        if first is None or len(slots) != 1 or len(outs) != 1:
            return False
        if slots[0] >= len(first.output) or "_unread" not in first.output[slots[0]]:
            return False
        first.output[slots[0]] = outs[0]
        return True

    def _inputs(self) -> list[onnx.ValueInfoProto]:
        """The graph inputs: the graph's own (element types as recorded by their opaque
        readers), or — given an interface to keep — its inputs in its order with its element
        types, shapes fixed as in the graph, and unused ones the graph lacks declared as there."""
        own = {n.name or "": n for n in self.graph.inputs}
        if self.interface is None:
            return [
                helper.make_tensor_value_info(name, self.dtypes.get(Ref(n.id, 0), FLOAT), n.shape)
                for name, n in own.items()
            ]
        declared = [vi.name for vi in self.interface.input]
        extra = sorted(set(own) - set(declared))
        if extra:
            raise OnnxError(f"graph inputs {extra} are not inputs of the model to imitate")
        inputs = []
        for vi in self.interface.input:
            if vi.name not in own:
                inputs.append(vi)
                continue
            elem = vi.type.tensor_type.elem_type
            inputs.append(helper.make_tensor_value_info(vi.name, elem, own[vi.name].shape))
        return inputs

    def _outputs(self) -> list[onnx.ValueInfoProto]:
        declared = list(self.interface.output) if self.interface is not None else []
        if declared and len(declared) != len(self.outputs):
            raise OnnxError(
                f"the graph has {len(self.outputs)} outputs, the model to imitate {len(declared)}"
            )
        outputs = []
        for i, (ref, name) in enumerate(zip(self.outputs, self.output_names, strict=True)):
            elem = self.dtypes.get(ref, FLOAT)
            if declared:
                elem = declared[i].type.tensor_type.elem_type
            outputs.append(helper.make_tensor_value_info(name, elem, self.graph.shape(ref)))
        return outputs

    def _finish(self) -> onnx.ModelProto:
        inputs, outputs = self._inputs(), self._outputs()
        nodes = _live(self.nodes, {o.name for o in outputs})
        read = _names_read(nodes) | {o.name for o in outputs}
        inits = [t for t in self.inits if t.name in read]  # a table a fused kernel replaced
        graph = helper.make_graph(nodes, "relsat", inputs, outputs, inits)
        opsets = [helper.make_opsetid("", self.opset)]
        opsets += [helper.make_opsetid(d, v) for d, v in sorted(self.domains.items())]
        ir = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
        model = helper.make_model(
            graph, opset_imports=opsets, ir_version=ir, producer_name="relsat"
        )
        try:
            _check(model)
        except Exception as exc:
            raise OnnxError(
                f"exported model fails onnx.checker: {str(exc).strip().splitlines()[0]}"
            ) from None
        return model


def _check(model: onnx.ModelProto) -> None:
    """``onnx.checker`` with shape inference; a model too big for one protobuf is checked as
    written to a temporary folder with its external data."""
    from relsat.onnx.data import MAX_INLINE_BYTES, save_beside

    if model.ByteSize() <= MAX_INLINE_BYTES:
        onnx.checker.check_model(model, full_check=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        onnx.checker.check_model(save_beside(model, tmp, "model.onnx"), full_check=True)


def _recorded_dtypes(graph: Graph) -> dict[Ref, int]:
    """Element types other than float32 that opaque nodes imported from ONNX record for the
    tensors they read (``in_dtypes``) and write (``out_dtypes``)."""
    dtypes: dict[Ref, int] = {}
    for n in graph.nodes:
        if n.op != "opaque":
            continue
        meta = json.loads(n.params["attrs"]).get("_onnx") or {}
        pairs = [*zip(n.inputs, meta.get("in_dtypes", []), strict=False)]
        pairs += [(Ref(n.id, i), d) for i, d in enumerate(meta.get("out_dtypes", []))]
        for ref, name in pairs:
            elem = TensorProto.DataType.Value(name) if name != "UNDEFINED" else FLOAT
            dtypes.setdefault(ref, elem)
    for n in graph.nodes:  # relsat's layout ops keep their input's type (a mask's view: bool)
        if n.op in _LAYOUTS and n.inputs and n.inputs[0] in dtypes:
            dtypes.setdefault(Ref(n.id, 0), dtypes[n.inputs[0]])
    return dtypes


#: relsat operators that move elements without computing: their output's element type is
#: their input's (a rule's view of a boolean mask is a reshape of it).
_LAYOUTS = frozenset({"reshape", "transpose"})


#: Default-domain ops whose definitions from the given opset up to 23 changed only in the element
#: types they accept or by an attribute or optional input whose default keeps the old meaning
#: (Cast's saturate, Reshape's allowzero, Shape's start/end, Pad's axes, ...): an opaque node of
#: these, imported at that opset or later, means the same at opset 23 (ONNX Attention's).
_TYPES_ONLY_SINCE = {
    "Cast": 13,
    "CastLike": 15,
    "Reshape": 13,
    "Flatten": 13,
    "Shape": 13,
    "Size": 13,
    "Squeeze": 13,
    "Unsqueeze": 13,
    "Transpose": 13,
    "Identity": 13,
    "Constant": 13,
    "ConstantOfShape": 9,
    "IsNaN": 13,
    "IsInf": 10,
    "Equal": 13,
    "Pad": 13,
    "Dropout": 13,
    "ScatterND": 13,
    "Conv": 11,
    "MaxPool": 12,
    "AveragePool": 11,
    "GlobalAveragePool": 1,
    "GlobalMaxPool": 1,
    "InstanceNormalization": 6,
    "Sin": 7,
    "Cos": 7,
    "Resize": 13,  # 18: antialias, axes, keep_aspect_ratio_policy; 19: a coordinate mode
}


#: Default-domain ops whose definitions from the given opset up to 23 differ only in the element
#: types they accept (no attribute or input added: Where-16 adds bfloat16): a node of these
#: imported at one of those opsets means the same at any other, a lower one included (torch's
#: NaN guard, Where(IsNaN(x), 0, x), written back at opset 14).
_TYPES_ONLY_BOTH_WAYS = {"Where": 9, "IsNaN": 9, "IsInf": 10}


def _types_only(op_type: str, old: int, new: int) -> bool:
    """Whether opaque ``op_type`` imported at opset ``old`` means the same at ``new``, lower or
    higher, its definitions in between differing only in types (:data:`_TYPES_ONLY_BOTH_WAYS`)."""
    since = _TYPES_ONLY_BOTH_WAYS.get(op_type)
    top = transformer_ops.ATTENTION_OPSET
    return since is not None and since <= min(old, new) and max(old, new) <= top


#: The fused ops whose ONNX operators need a later opset than a model may have, with that opset,
#: the highest first: ONNX Attention, RMSNormalization and RotaryEmbedding (23),
#: GroupNormalization with a scale per channel (21). A graph holding one is written there
#: where its opaque nodes mean the same (:meth:`Exporter._raise_to`).
_RAISING = (
    (frozenset({"attention", "gqa", *decoder_ops.OPSET_23_OPS}), transformer_ops.ATTENTION_OPSET),
    (frozenset({"groupnorm"}), norm_ops.GROUPNORM_OPSET),
)


def spelled_out(graph: Graph) -> frozenset[str]:
    """The fused ops that a model holding ``graph``'s opaque nodes is written with spelled out
    (:data:`_RAISING`): those whose ONNX operator needs an opset above the model's that an
    opaque node means something else at. An extraction of ``graph``'s e-graph that chose one
    would be priced as the fused kernel and run as the spelling."""
    opset = max((at for _, domain, at in _imported(graph) if not domain), default=OPSET)
    out: set[str] = set()
    for fused, at in _RAISING:
        if opset < at and not _raisable(graph, at):
            out |= fused
    return frozenset(out)


def _raisable(graph: Graph, at: int) -> bool:
    """Whether every opaque node of ``graph`` means the same at opset ``at`` as at the opset it
    was imported at (:func:`_same_meaning`)."""
    return all(
        domain or _same_meaning(op_type, old, at) for op_type, domain, old in _imported(graph)
    )


def _imported(graph: Graph) -> list[tuple[str, str, int]]:
    """Each opaque node's ONNX type, domain (``""``: the default) and the opset it was imported
    at, for those that recorded one."""
    out = []
    for n in graph.nodes:
        meta = json.loads(n.params["attrs"]).get("_onnx") if n.op == "opaque" else None
        if meta:
            out.append((str(n.params["type"]), meta["domain"] or "", int(meta["opset"])))
    return out


def _same_meaning(op_type: str, old: int, new: int) -> bool:
    """Whether an opaque ``op_type`` node imported at opset ``old`` means the same at ``new``
    (the same definition, or only type additions in between: :data:`_TYPES_ONLY_SINCE`)."""
    if _same_schema(op_type, old, new):
        return True
    since = _TYPES_ONLY_SINCE.get(op_type)
    return since is not None and old >= since and new <= transformer_ops.ATTENTION_OPSET


def _same_schema(op_type: str, old: int, new: int) -> bool:
    """Whether ``op_type`` has the same definition at both opsets (unknown ops: assume so)."""
    try:
        a = onnx.defs.get_schema(op_type, old).since_version
        b = onnx.defs.get_schema(op_type, new).since_version
    except onnx.defs.SchemaError:
        return True
    return bool(a == b)


def _sibling_key(node: Node, attrs: dict[str, Any], meta: dict[str, Any], inputs: list[str]) -> str:
    """What the opaque nodes for the outputs of one operator share: its type, attributes,
    domain, opset and inputs (constants by their encoding, not their fresh names)."""
    shared = {k: v for k, v in meta.items() if k not in ("outputs", "out_dtypes")}
    tensors = [
        name if spec == "t" else spec for name, spec in zip(inputs, meta["inputs"], strict=True)
    ]
    return json.dumps([node.params["type"], attrs, shared, tensors], sort_keys=True)


def _live(nodes: Sequence[NodeProto], outputs: set[str]) -> list[NodeProto]:
    """``nodes`` (in topological order) without those nothing reads: a tensor an emitter laid
    out anew from its source (a rotary cache reshaped from the angles themselves) leaves the
    node that wrote the old layout behind."""
    needed, kept = set(outputs), []
    for node in reversed(nodes):
        if any(o in needed for o in node.output if o):
            kept.append(node)
            needed |= _names_read([node])
    return kept[::-1]


def _names_read(nodes: Sequence[NodeProto]) -> set[str]:
    """The tensor names ``nodes`` read, their subgraphs' reads from the outer scope included."""
    names: set[str] = set()
    for node in nodes:
        names.update(node.input)
        for attr in node.attribute:
            graphs = [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)
            for g in graphs:
                names |= _names_read(g.node) | {o.name for o in g.output}
    return names
