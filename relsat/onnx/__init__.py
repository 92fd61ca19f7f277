"""ONNX in and out: import a model as a relsat graph, export a graph as a model, check it in
onnxruntime.

The public surface is chosen here. The modules, each importing only those listed before it:
:mod:`~relsat.onnx.errors` (:class:`OnnxError`, :data:`OPSET`), :mod:`~relsat.onnx.symbolic`
(dynamic dims as markers: :class:`Dims`), :mod:`~relsat.onnx.inputs`
(input values per dtype), :mod:`~relsat.onnx.data` (external tensor data),
:mod:`~relsat.onnx.runtime` (onnxruntime session settings), :mod:`~relsat.onnx.context` (what an
op's handler sees of the importer and the exporter), :mod:`~relsat.onnx.constants` (constant
subgraphs folded at import), :mod:`~relsat.onnx.shapefold` (shape computations folded at two
marker assignments), :mod:`~relsat.onnx.exportable` (the e-nodes the exporter can write),
:mod:`~relsat.onnx.opmap`, :mod:`~relsat.onnx.transformer_ops` and
:mod:`~relsat.onnx.decoder_ops` (one handler per mapped op; LLM decoders' RMSNorm and rotary
embedding in the last), :mod:`~relsat.onnx.norm_ops` (InstanceNormalization, GroupNormalization),
:mod:`~relsat.onnx.importer` (ONNX → graph), :mod:`~relsat.onnx.symbolize` (an exported model's
dims made symbolic again), :mod:`~relsat.onnx.exporter` (graph → ONNX),
:mod:`~relsat.onnx.verification` (onnxruntime sessions, :func:`run_onnx`, :func:`verify`),
:mod:`~relsat.onnx.marked` (:func:`load_symbolic`: import with symbolic dims),
:mod:`~relsat.onnx.opened` (dims an operator computes from values),
:mod:`~relsat.onnx.loading` (:func:`read`: the one entry point :func:`relsat.optimize` reads a
model through — dims planned, the pricing shape probed in onnxruntime, symbolic or fixed),
:mod:`~relsat.onnx.latency` (timing two models against each other). :func:`load`,
:func:`to_model` and :func:`save` import the importer and exporter when called, so that ``import
relsat`` does not import ``onnx``.

**Import** (:func:`load`) maps Conv (2-D; groups, strides, pads, bias), MatMul, Gemm, Add, Mul,
Sum, Relu, Tanh, Sigmoid, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, Concat, Split,
Reshape, Flatten, Squeeze, Unsqueeze, Transpose, BatchNormalization, Identity and Dropout onto
relsat's operators; Constant nodes, and ConstantOfShape and Cast of constants (how the ONNX model
zoo writes its weights), are constants like initializers (:mod:`relsat.onnx.constants`). Everything
else — and a supported op in a form relsat cannot express (dilated conv, Gemm with alpha != 1,
pooling with ceil_mode that changes the size, non-float tensors, ...) — becomes an *opaque* node
that keeps its op_type, domain, opset, attributes, constant (non-float) inputs and all outputs, and
is exported back unchanged; its output shapes come from ONNX shape inference (a dim it leaves
open because the operator computes it from values — NonZero's count, a Reshape to a shape given
as an input — is a dim of its own: :mod:`relsat.onnx.opened`). An opaque operator with several
outputs read (TopK, LSTM, a Split by sizes given as an input) is one opaque node per output,
written back as one node. A model below opset 7 is raised to 7 by ONNX's version converter
first. Explicit conv padding
that is neither VALID nor TASO's SAME becomes an opaque ``Pad`` before a VALID conv. Graph inputs
and outputs may have any tensor element type: tensors other than float32 (token ids, attention
masks, shapes, booleans) are read only by opaque nodes (Gather of an embedding, Cast, Where, ...),
so rewrites never touch them, and the float32 regions between them are rewritten as usual. Every
graph input is kept, used or not, in its order. :func:`load` needs dynamic dims fixed with
``input_shapes`` or ``batch``; :func:`load_symbolic` keeps them symbolic (each dim a marker, a
distinct prime: :mod:`relsat.onnx.symbolic`), and :func:`to_model` with its ``dims`` writes them
back symbolic — Reshape targets with ``0`` / ``-1``, other shape values computed from ``Shape``
(:mod:`relsat.onnx.symbolize`).

**Export** (:func:`save`, :func:`to_model`) writes opset 17 (``OPSET``) by default — or, when the
graph holds opaque nodes imported from another opset, that opset, so they keep their meaning — with
the lowest IR version supporting it (8 for opset 17), in the default domain plus the custom domains
of opaque nodes. Fused activations become a separate Relu/Sigmoid/Tanh node; TASO's SAME padding
becomes explicit pads giving exactly the declared output size; subgraphs of weights only (TASO's
``preprocess_weights``: concat/split/enlarge/merge/transpose/... of weights) are evaluated with
relsat's NumPy kernels and stored as new initializers. Weights without data get the values
:func:`relsat.graph.execute.random_values` draws (same ``seed``: the values :func:`relsat.run`
uses), so
the model runs.

Inputs and outputs are written with the element types the opaque nodes reading and writing them
recorded; ``like=`` (the original model) keeps its interface exactly: inputs (unused ones too) and
outputs in its order, with its names and element types.

**Verification** (:func:`verify`) runs two models in onnxruntime (CPUExecutionProvider) on the same
random inputs, valid per input (:mod:`relsat.onnx.inputs`: N(0, 1) floats, token ids below the
embedding table's size, padded 0/1 masks, booleans), and compares outputs by position:
``|a - b| <= atol * max(1, max|b|) + rtol * |b|`` element-wise, default ``rtol=1e-4, atol=1e-5``
— the absolute term scales with the output's largest magnitude, because rewrites reorder float32
sums; equal values (infinities, NaN in both) match, and outputs that are not floats must be equal.
This is :func:`compare_outputs` (:func:`relsat.graph.execute.compare_outputs`), the rule NumPy
verification (:func:`relsat.graph.execute.compare`) applies too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from relsat.graph.execute import compare_outputs
from relsat.graph.graph import Graph
from relsat.onnx.errors import (
    OPSET,
    DynamicShapeError,
    EmptyTensorError,
    OnnxError,
    PricingShapeError,
    SymbolicDimError,
    TooLargeError,
)
from relsat.onnx.loading import Loaded, Shapes, Source, read
from relsat.onnx.symbolic import Dim, Dims
from relsat.onnx.verification import random_inputs, run_onnx, verify

__all__ = [
    "OPSET",
    "Dim",
    "Dims",
    "DynamicShapeError",
    "EmptyTensorError",
    "Loaded",
    "OnnxError",
    "PricingShapeError",
    "Shapes",
    "Source",
    "SymbolicDimError",
    "TooLargeError",
    "compare_outputs",
    "load",
    "load_symbolic",
    "random_inputs",
    "read",
    "run_onnx",
    "save",
    "to_model",
    "verify",
]


def load(
    path_or_model: str | os.PathLike[str] | Any,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    batch: int | None = None,
) -> Graph:
    """Read an ONNX model (a path or an ``onnx.ModelProto``) as a relsat :class:`Graph`.

    ``input_shapes`` gives full shapes by input name, ``batch`` the value of dynamic leading dims;
    a dim left dynamic raises :class:`OnnxError` naming the input. Initializers and Constant nodes
    become weights with their real values (``graph.values``). Raises :class:`OnnxError` for an
    unreadable or invalid file, an opset below 7 that ONNX's version converter cannot raise to
    7, inputs or outputs that are not tensors of a known element type, sparse tensors,
    subgraphs (If/Loop/Scan), a node reading a tensor nobody defines, or a shape ONNX cannot
    infer.
    """
    from relsat.onnx.importer import load_model

    return load_model(path_or_model, input_shapes=input_shapes, batch=batch)


def load_symbolic(
    path_or_model: str | os.PathLike[str] | Any,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    batch: int | None = None,
    inputs: Mapping[str, Any] | None = None,
    static: bool = False,
) -> tuple[Graph, Dims | None]:
    """Read an ONNX model keeping its dynamic dims symbolic: the graph with each dynamic dim
    given its marker (:mod:`relsat.onnx.symbolic`), shape computations folded where that holds
    for every value of the dims (:mod:`relsat.onnx.shapefold`), and the :class:`Dims` (None for
    a model whose inputs are all static and whose shapes ONNX infers: then :func:`load` with
    ``input_shapes`` and ``batch``). ``input_shapes`` and ``batch`` give the dims' pricing
    values; ``static`` fixes the inputs there. An output whose dims an operator computes from
    values (NonZero's count) keeps them symbolic, each a dim of its own valued by onnxruntime
    at the pricing shape on ``inputs`` where given (:mod:`relsat.onnx.opened`). Raises
    :class:`SymbolicDimError` for a dim that cannot stay symbolic, naming it; else as
    :func:`load`.
    """
    from relsat.onnx.marked import load_symbolic as load_dims

    return load_dims(
        path_or_model, input_shapes=input_shapes, batch=batch, inputs=inputs, static=static
    )


def to_model(
    graph: Graph,
    *,
    opset: int | None = None,
    seed: int = 0,
    output_names: Sequence[str] | None = None,
    like: Any = None,
    dims: Dims | None = None,
) -> Any:
    """``graph`` as a checked ``onnx.ModelProto`` (see the module docstring for what is emitted).

    ``opset=None``: the opset opaque nodes were imported at, else :data:`OPSET`. Outputs are named
    ``output_names``, else as ``like``'s, else after their node's label (as :func:`load` sets
    them), else ``output<i>``. ``like`` (a ModelProto or path, normally the model ``graph`` was
    loaded from) gives the interface to keep: its inputs, unused ones included, and outputs, in
    its order, with its names and element types (shapes as fixed in ``graph``). With ``dims``
    (the :class:`Dims` of a graph read by :func:`load_symbolic`; needs ``like``) the model is
    written with those dims symbolic (:mod:`relsat.onnx.symbolize`;
    :class:`SymbolicDimError` when a value cannot be).
    """
    from relsat.onnx.exporter import build_model

    return build_model(
        graph, opset=opset, seed=seed, output_names=output_names, like=like, dims=dims
    )


def save(
    graph: Graph,
    path: str | os.PathLike[str],
    *,
    opset: int | None = None,
    seed: int = 0,
    output_names: Sequence[str] | None = None,
    like: Any = None,
) -> Any:
    """Write ``graph`` to ``path`` as an ONNX model (:func:`to_model`) and return the model.

    The file is written beside ``path`` and renamed into place, so a failure (:class:`OnnxError`
    naming the path) leaves no partial file.
    """
    from relsat.onnx.exporter import write_model

    model = to_model(graph, opset=opset, seed=seed, output_names=output_names, like=like)
    write_model(model, path)
    return model
