"""ONNX import/export against onnxruntime on small models built here (no network)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import relsat
from relsat import models
from relsat.graph.builder import GraphBuilder
from relsat.graph.graph import Graph, Ref
from relsat.onnx import OnnxError, load, random_inputs, run_onnx, save, to_model, verify
from relsat.onnx.inputs import Kind, input_kinds

RNG = np.random.default_rng(7)
F = TensorProto.FLOAT
I64 = TensorProto.INT64


def init(name: str, *shape: int, scale: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def ints(name: str, values: Sequence[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def make(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, Sequence[int | str]],
    outputs: dict[str, Sequence[int | str]],
    inits: Sequence[onnx.TensorProto] = (),
    opset: int = 17,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "test",
        [helper.make_tensor_value_info(k, F, list(v)) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, F, list(v)) for k, v in outputs.items()],
        list(inits),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def node(op: str, ins: list[str], outs: list[str], **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, ins, outs, name=f"{op}:{outs[0]}", **attrs)


def assert_close(got: Sequence[np.ndarray], want: Sequence[np.ndarray], rtol: float = 1e-4) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        scale = max(float(np.abs(b).max()), 1.0)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale)


def check_model(model: onnx.ModelProto, *, relsat_runs: bool = True) -> relsat.Graph:
    """load → relsat.run ≈ onnxruntime; save → checker → onnxruntime ≈ original."""
    inputs = random_inputs(model, seed=1)
    want = run_onnx(model, inputs)
    graph = load(model)
    if relsat_runs:
        assert_close(relsat.run(graph, inputs), want)
    exported = to_model(graph)
    onnx.checker.check_model(exported, full_check=True)
    assert_close(run_onnx(exported, inputs), want)
    assert verify(model, exported).ok
    return graph


# ---------------------------------------------------------------------------------------------
# Import of the mapped ops


def cnn() -> onnx.ModelProto:
    nodes = [
        node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        node("Relu", ["c1"], ["r1"]),
        node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        node("Conv", ["p1", "w2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1], group=2),
        node("AveragePool", ["c2"], ["p2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        node("GlobalAveragePool", ["p2"], ["g"]),
        node("Flatten", ["g"], ["f"]),
        node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1),
        node("Sigmoid", ["y"], ["s"]),
    ]
    inits = [init("w1", 8, 3, 3, 3), init("b1", 8), init("w2", 6, 4, 3, 3)]
    inits += [init("fc", 5, 6), init("fcb", 5)]
    return make(nodes, {"x": [1, 3, 16, 16]}, {"s": [1, 5]}, inits)


def test_cnn_maps_every_op() -> None:
    model = cnn()
    graph = check_model(model)
    # one op per ONNX node (a Conv with its bias is conv2d_bias, a Gemm with its C matmul_bias)
    assert graph.op_counts() == {
        "conv2d_bias": 1,
        "relu": 1,
        "conv2d": 1,
        "poolmax": 1,
        "poolavg": 2,
        "reshape": 1,
        "transpose": 1,
        "matmul_bias": 1,
        "sigmoid": 1,
    }
    convs = [n for n in graph.nodes if n.op in ("conv2d", "conv2d_bias")]
    assert [n.params["padding"] for n in convs] == ["SAME", "SAME"]
    assert [n.params["activation"] for n in convs] == ["NONE", "NONE"]
    (gemm,) = (n for n in graph.nodes if n.op == "matmul_bias")
    assert gemm.params["activation"] == "NONE" and graph.shape(gemm.inputs[2]) == (5,)
    # what onnxruntime runs as one kernel is one op once optimized: Conv+bias+Relu,
    # Gemm+bias+Sigmoid (rules/bias.rules)
    fused = fuse(graph)
    assert "relu" not in fused.op_counts() and "sigmoid" not in fused.op_counts()
    assert activations(fused) == {"conv2d_bias": ["RELU"], "conv2d": ["NONE"]} | {
        "matmul_bias": ["SIGMOID"]
    }
    # and back: the fused units are written as the ops the runtime fuses, no bias Add
    exported = to_model(graph)
    assert sorted(n.op_type for n in exported.graph.node) == sorted(
        [
            "Conv",
            "Relu",
            "MaxPool",
            "Conv",
            "AveragePool",
            "GlobalAveragePool",  # a pool over the whole input is written as one
            "Reshape",
            "Gemm",
            *["Sigmoid"],
        ]
    )
    np.testing.assert_array_equal(
        graph.values["w1"], numpy_helper.to_array(model.graph.initializer[0])
    )
    assert graph.tensor("b1_4d").shape == (1, 8, 1, 1)
    assert [n.name for n in graph.inputs] == ["x"]


def fuse(graph: relsat.Graph, verify: bool = True) -> relsat.Graph:
    """``graph`` optimized at the analytic CPU prices (no timing: the same on every machine)."""
    options = relsat.Options(cost_model="analytic-cpu", timing=None, verify=verify)
    result = relsat.optimize(graph, options)
    assert result.verified or not verify
    return result.graph


def activations(graph: relsat.Graph) -> dict[str, list[str]]:
    """The activations of the fused units (conv2d, conv2d_bias, matmul_bias), by op."""
    out: dict[str, list[str]] = {}
    for n in graph.nodes:
        if n.op in ("conv2d", "conv2d_bias", "matmul_bias"):
            out.setdefault(n.op, []).append(n.params["activation"])
    return out


def test_linear_layers_become_fused_gemms_and_merge() -> None:
    """torch's Linear on [batch, seq, hidden] (MatMul + bias Add) is a matmul and an add at
    import, a matmul_bias once optimized; Q/K/V of one input merge into one Gemm with
    concatenated biases when the cost model prefers it. (The merge is a multi-pattern rule over
    the fused Gemms, which the first iteration makes: k_multi 2. The Clip after the third stays a
    relu6 of the reshape back to 3-D.)"""
    nodes = [node("MatMul", ["x", f"w{i}"], [f"m{i}"]) for i in range(3)]
    nodes += [node("Add", [f"m{i}", f"b{i}"], [f"y{i}"]) for i in range(3)]
    nodes += [node("Clip", ["y2", "lo", "hi"], ["r"])]  # ReLU6, fused into the third
    inits = [init(f"w{i}", 16, 8) for i in range(3)] + [init(f"b{i}", 8) for i in range(3)]
    inits += [
        numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0), ("hi", 6))
    ]
    outs = {"y0": [1, 4, 8], "y1": [1, 4, 8], "r": [1, 4, 8]}
    model = make(nodes, {"x": [1, 4, 16]}, outs, inits)
    graph = check_model(model)
    assert graph.op_counts()["matmul"] == 3 and graph.op_counts()["ewadd"] == 3
    assert "matmul_bias" not in graph.op_counts() and graph.op_counts()["relu6"] == 1
    result = relsat.optimize(graph, relsat.Options(k_multi=2, cost_model="analytic", timing=None))
    assert result.verified and result.graph.op_counts()["matmul_bias"] == 2  # + the ReLU6 one
    assert "matmul-rows-bias-fuse" in result.rewrites()
    assert "matmul-bias-pair-shared-lhs" in result.rewrites()
    merged = to_model(result.graph)
    assert verify(model, merged).ok
    assert sum(n.op_type == "Gemm" for n in merged.graph.node) == 2


def test_conv_fuses_a_relu6_whose_bounds_come_later() -> None:
    """torch writes ReLU6 as Clip(conv, Constant, Constant) with the Constants after the Conv:
    a relu6 at import, fused into the conv by conv-bias-relu6-fuse."""
    lo = helper.make_node("Constant", [], ["lo"], value=numpy_helper.from_array(np.float32(0)))
    hi = helper.make_node("Constant", [], ["hi"], value=numpy_helper.from_array(np.float32(6)))
    nodes = [node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), lo, hi]
    nodes.append(node("Clip", ["c", "lo", "hi"], ["y"]))
    model = make(
        nodes, {"x": [1, 2, 6, 6]}, {"y": [1, 4, 6, 6]}, [init("w", 4, 2, 3, 3), init("b", 4)]
    )
    graph = check_model(model)
    assert graph.op_counts() == {"conv2d_bias": 1, "relu6": 1}
    fused = fuse(graph)
    assert fused.op_counts() == {"conv2d_bias": 1}
    assert fused.nodes[-1].params["activation"] == "RELU6"


CONV_SPELLINGS = [  # (Conv attributes, bias input): strides, paddings, with and without bias
    ({"pads": [1, 1, 1, 1]}, True),
    ({"pads": [1, 1, 1, 1]}, False),
    ({"strides": [2, 2], "pads": [1, 1, 1, 1]}, True),
    ({"strides": [2, 2], "pads": [1, 1, 1, 1]}, False),
    ({}, True),  # VALID
    ({"strides": [1, 2]}, False),
]
ACTIVATIONS = [  # (ONNX nodes after the conv, reading "c" and writing "y"; relsat activation)
    ([node("Relu", ["c"], ["y"])], "RELU"),
    ([node("Sigmoid", ["c"], ["y"])], "SIGMOID"),
    ([node("Tanh", ["c"], ["y"])], "TANH"),
    ([node("Clip", ["c", "zero", "six"], ["y"])], "RELU6"),
    ([node("Clip", ["c"], ["y"], min=0.0, max=6.0)], "RELU6"),  # opset 6 attributes
]


@pytest.mark.parametrize(("attrs", "bias"), CONV_SPELLINGS)
@pytest.mark.parametrize(("acts", "act"), ACTIVATIONS, ids=[a for _, a in ACTIVATIONS])
def test_an_activation_after_a_conv_fuses_when_optimized(
    attrs: dict[str, object], bias: bool, acts: list[onnx.NodeProto], act: str
) -> None:
    opset = 6 if acts[0].attribute else 17
    conv = node("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["c"], **attrs)
    inits = [init("w", 4, 2, 3, 3), init("b", 4)] if bias else [init("w", 4, 2, 3, 3)]
    if opset > 6:
        inits += [numpy_helper.from_array(np.float32(v), n) for n, v in (("zero", 0), ("six", 6))]
    pad = 1 if attrs.get("pads") else 0
    stride = attrs.get("strides", [1, 1])
    h, w = ((9 + 2 * pad - 3) // s + 1 for s in stride)  # type: ignore[attr-defined]
    model = make([conv, *acts], {"x": [1, 2, 9, 9]}, {"y": [1, 4, h, w]}, inits, opset)
    graph = check_model(model)
    op = "conv2d_bias" if bias else "conv2d"
    assert activations(graph) == {op: ["NONE"]}  # one op per node at import
    assert sum(n.op in ("relu", "sigmoid", "tanh", "relu6") for n in graph.nodes) == 1
    fused = fuse(graph)
    assert activations(fused) == {op: [act]}
    assert [n.op for n in fused.nodes if n.op not in ("input", "weight")] == [op]


def test_near_misses_of_activation_fusion_stay_unfused() -> None:
    """A Clip(0, 5) is no activation; a conv also read by another node keeps its output (a
    fused copy would compute the conv twice)."""
    nodes = [
        node("Conv", ["x", "w", "b"], ["c1"], pads=[1, 1, 1, 1]),
        node("Clip", ["c1", "zero", "five"], ["y1"]),  # Clip(0, 5): opaque, not fused
        node("Conv", ["x", "w", "b"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1]),
        node("Relu", ["c2"], ["y2"]),  # c2 is a graph output too
    ]
    inits = [init("w", 4, 2, 3, 3), init("b", 4)]
    inits += [numpy_helper.from_array(np.float32(v), n) for n, v in (("zero", 0), ("five", 5))]
    outs = {"y1": [1, 4, 8, 8], "y2": [1, 4, 4, 4], "c2": [1, 4, 4, 4]}
    graph = check_model(make(nodes, {"x": [1, 2, 8, 8]}, outs, inits), relsat_runs=False)
    fused = fuse(graph, verify=False)  # relsat cannot run the opaque Clip
    assert activations(fused) == {"conv2d_bias": ["NONE", "NONE"]}
    assert fused.op_counts()["relu"] == 1 and fused.op_counts()["opaque"] == 1


def test_a_gemm_or_matmul_with_a_bias_fuses_its_activation_when_optimized() -> None:
    nodes = [
        node("Gemm", ["x", "w1", "b1"], ["g"], transB=1),
        node("Relu", ["g"], ["r"]),
        node("MatMul", ["r", "w2"], ["m"]),
        node("Add", ["b2", "m"], ["a"]),  # the bias first: Add commutes
        node("Tanh", ["a"], ["y"]),
    ]
    inits = [init("w1", 6, 5), init("b1", 6), init("w2", 6, 3), init("b2", 3)]
    graph = check_model(make(nodes, {"x": [2, 5]}, {"y": [2, 3]}, inits))
    assert activations(graph) == {"matmul_bias": ["NONE"]} and graph.op_counts()["matmul"] == 1
    fused = fuse(graph)
    assert activations(fused) == {"matmul_bias": ["RELU", "TANH"]}
    assert set(fused.op_counts()) <= {"input", "weight", "matmul_bias", "transpose"}


def test_clip_relu6_and_other_clips() -> None:
    nodes = [
        node("Clip", ["x", "lo", "hi"], ["a"]),
        node("Clip", ["a", "lo", "one"], ["b"]),  # Clip(0, 1): not an activation, stays opaque
    ]
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0), ("hi", 6))]
    inits.append(numpy_helper.from_array(np.array(1, np.float32), "one"))
    graph = check_model(make(nodes, {"x": [2, 3]}, {"b": [2, 3]}, inits), relsat_runs=False)
    assert graph.op_counts()["relu6"] == 1 and graph.op_counts()["opaque"] == 1


def test_explicit_padding_becomes_opaque_pad() -> None:
    nodes = [node("Conv", ["x", "w"], ["y"], pads=[2, 0, 1, 2])]
    model = make(nodes, {"x": [1, 2, 7, 7]}, {"y": [1, 4, 8, 7]}, [init("w", 4, 2, 3, 3)])
    graph = check_model(model, relsat_runs=False)
    pad = [n for n in graph.nodes if n.op == "opaque"]
    assert [n.params["type"] for n in pad] == ["Pad"]
    assert graph.nodes[-1].params["padding"] == "VALID"


def test_unknown_ops_stay_opaque_and_export_unchanged() -> None:
    nodes = [
        node("MatMul", ["x", "w"], ["m"]),
        # LayerNormalization and Softmax over another axis than the last stay opaque
        node("LayerNormalization", ["m", "gamma", "beta"], ["ln"], axis=1, epsilon=1e-3),
        node("Erf", ["ln"], ["e"]),
        node("Softmax", ["e"], ["sm"], axis=1),
        node("Shape", ["sm"], ["shp"]),
        node("Reshape", ["sm", "shp"], ["y"]),  # shape from an opaque int64 tensor
        node("TopK", ["y", "k"], ["vals", "idx"], axis=-1),
    ]
    inits = [init("w", 6, 4), init("gamma", 4), init("beta", 4), ints("k", [2])]
    model = make(nodes, {"x": [2, 3, 6]}, {"y": [2, 3, 4], "vals": [2, 3, 2]}, inits)
    graph = check_model(model, relsat_runs=False)
    opaque = {n.params["type"]: n for n in graph.nodes if n.op == "opaque"}
    assert set(opaque) == {"LayerNormalization", "Softmax", "TopK"}
    assert graph.op_counts()["matmul"] == 1  # [2,3,6] @ [6,4] through reshapes
    assert graph.op_counts()["erf"] == 1
    # the unread indices are dropped: one output, one e-node; export writes them back unread
    assert [t.shape for t in opaque["TopK"].outputs] == [(2, 3, 2)]
    assert relsat.optimize(graph, relsat.Options(verify=False)).graph.op_counts()["opaque"] == 3
    exported = to_model(graph)
    ln = next(n for n in exported.graph.node if n.op_type == "LayerNormalization")
    assert {a.name: helper.get_attribute_value(a) for a in ln.attribute}["axis"] == 1
    topk = next(n for n in exported.graph.node if n.op_type == "TopK")
    assert len(topk.output) == 2 and topk.output[1]
    k = next(i for i in exported.graph.initializer if i.name == topk.input[1])
    assert numpy_helper.to_array(k).tolist() == [2]


def test_custom_domain_kept() -> None:
    n = helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")
    model = make([n], {"x": [2, 8]}, {"y": [2, 8]})
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    graph = load(model)
    exported = to_model(graph)
    assert exported.graph.node[0].domain == "com.microsoft"
    assert {o.domain: o.version for o in exported.opset_import}["com.microsoft"] == 1
    assert verify(model, exported).ok


def bn_nodes(x: str, out: str, prefix: str) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    names = [f"{prefix}{p}" for p in ("s", "b", "m", "v")]
    params = [init(names[0], 4), init(names[1], 4), init(names[2], 4)]
    params.append(numpy_helper.from_array(RNG.uniform(0.5, 1.5, 4).astype(np.float32), names[3]))
    return node("BatchNormalization", [x, *names], [out], epsilon=1e-3), params


def conv_bn_model() -> onnx.ModelProto:
    """conv (with its bias) -> batchnorm -> relu -> conv -> batchnorm, the second conv's output
    also a graph output."""
    bn1, p1 = bn_nodes("c1", "n1", "a")
    bn2, p2 = bn_nodes("c2", "n2", "b")
    nodes = [
        node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        bn1,
        node("Relu", ["n1"], ["r"]),
        node("Conv", ["r", "w2"], ["c2"]),
        bn2,  # c2 is also a graph output
    ]
    inits = [init("w1", 4, 2, 3, 3), init("b1", 4), init("w2", 4, 4, 1, 1), *p1, *p2]
    return make(nodes, {"x": [1, 2, 8, 8]}, {"n2": [1, 4, 8, 8], "c2": [1, 4, 8, 8]}, inits)


def test_batchnorm_is_imported_as_batchnorm() -> None:
    """One op per node: the fold into the conv is a rule (rules/bias.rules,
    conv-batchnorm-fold), applied when optimized (below)."""
    model = conv_bn_model()
    graph = check_model(model)
    assert graph.op_counts()["batchnorm"] == 2
    assert graph.op_counts()["conv2d_bias"] == 1 and graph.op_counts()["conv2d"] == 1
    eps = {n.params["epsilon"] for n in graph.nodes if n.op == "batchnorm"}
    assert eps == {float(np.float32(1e-3))}  # a float parameter, as rules bind it


def test_a_batchnorm_after_a_conv_folds_when_optimized() -> None:
    """conv -> batchnorm -> relu is one conv2d_bias with its ReLU once optimized (the scaled
    weight and bias are weight-only: initializers in the ONNX written); a batchnorm after a conv
    that is also a graph output stays (folding would compute the conv twice)."""
    model = conv_bn_model()
    # weight-only work priced free, as onnxruntime runs what the exporter writes (the ort-cpu
    # model's default; the analytic one charges it, TENSAT's convention)
    options = relsat.Options(cost_model="analytic-cpu", timing=None, precompute_weights=True)
    result = relsat.optimize(check_model(model), options)
    assert result.verified and "conv-bias-batchnorm-fold" in result.rewrites()
    fused = result.graph
    runtime = [n for n in fused.nodes if n.op not in ("input", "weight")]
    kept = [n.op for n in runtime if not fused.all_weights()[n.id]]
    assert sorted(kept) == ["batchnorm", "conv2d", "conv2d_bias"]
    assert activations(fused)["conv2d_bias"] == ["RELU"]
    written = to_model(fused)
    assert sorted(n.op_type for n in written.graph.node) == [
        "BatchNormalization",
        "Conv",
        "Conv",
        "Relu",
    ]
    assert verify(model, written).ok


def test_split_concat_transpose_reshape() -> None:
    nodes = [
        node("Split", ["x", "sizes"], ["a", "b", "c"], axis=1),
        node("Concat", ["c", "a"], ["ca"], axis=-3),
        node("Transpose", ["ca"], ["t"], perm=[0, 2, 3, 1]),
        node("Reshape", ["t", "shape"], ["r"]),
        node("Add", ["r", "bias"], ["y"]),
        node("Mul", ["b", "scale"], ["z"]),
    ]
    inits = [ints("sizes", [2, 3, 1]), ints("shape", [0, -1, 3]), init("bias", 3), init("scale", 1)]
    model = make(nodes, {"x": [2, 6, 4, 4]}, {"y": [2, 16, 3], "z": [2, 3, 4, 4]}, inits)
    graph = check_model(model)
    assert graph.op_counts()["split"] == 1
    assert [n.params["shape"] for n in graph.nodes if n.op == "reshape"] == [(2, 16, 3)]
    split = next(n for n in graph.nodes if n.op == "split")
    assert split.params["sizes"] == (2, 3, 1)


def test_split_attribute_at_opset_11() -> None:
    nodes = [node("Split", ["x"], ["a", "b"], axis=0, split=[1, 3]), node("Relu", ["b"], ["y"])]
    model = make(nodes, {"x": [4, 5]}, {"a": [1, 5], "y": [3, 5]}, opset=11)
    graph = check_model(model)
    assert graph.op_counts()["split"] == 1
    assert to_model(graph).opset_import[0].version == 17  # no opaque node ties it to 11


def test_opaque_nodes_keep_their_opset() -> None:
    nodes = [node("ReduceSum", ["x"], ["s"], axes=[1], keepdims=1), node("Relu", ["s"], ["y"])]
    model = make(nodes, {"x": [2, 5]}, {"y": [2, 1]}, opset=11)  # axes: an attribute until 13
    graph = check_model(model, relsat_runs=False)
    assert to_model(graph).opset_import[0].version == 11
    with pytest.raises(OnnxError, match="opset 11"):
        to_model(graph, opset=17)


def test_identity_dropout_dropped() -> None:
    nodes = [
        node("Identity", ["x"], ["i"]),
        node("Dropout", ["i"], ["d"]),
        node("Tanh", ["d"], ["y"]),
    ]
    graph = check_model(make(nodes, {"x": [3, 4]}, {"y": [3, 4]}))
    assert graph.op_counts() == {"tanh": 1}


def test_pad_of_zeros_dropped() -> None:
    """Swin pads its windows with Pad(pads all 0) where the window divides the size: nothing."""
    nodes = [node("Pad", ["x", "p"], ["q"]), node("Tanh", ["q"], ["y"])]
    model = make(nodes, {"x": [1, 4, 4, 3]}, {"y": [1, 4, 4, 3]}, [ints("p", [0] * 8)])
    assert check_model(model).op_counts() == {"tanh": 1}


@pytest.mark.parametrize("pads", [[0, 0, 1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, -1, 0]])
def test_pad_of_nonzeros_kept(pads: list[int]) -> None:
    """A Pad that adds or crops anything stays a Pad (opaque)."""
    out = [1, 4 + sum(pads[i] for i in (1, 5)), 4 + sum(pads[i] for i in (2, 6)), 3]
    nodes = [node("Pad", ["x", "p"], ["q"]), node("Tanh", ["q"], ["y"])]
    model = make(nodes, {"x": [1, 4, 4, 3]}, {"y": out}, [ints("p", pads)])
    counts = check_model(model, relsat_runs=False).op_counts()  # (no NumPy kernel for Pad)
    assert counts == {"opaque": 1, "tanh": 1}


def test_sum_is_a_chain_of_adds() -> None:
    """The model zoo joins residual branches with Sum (one, two or more operands)."""
    nodes = [
        node("Sum", ["x", "z"], ["s2"]),
        node("Sum", ["s2", "x", "b"], ["s3"]),
        node("Sum", ["s3"], ["y"]),
    ]
    model = make(nodes, {"x": [3, 4], "z": [3, 4]}, {"y": [3, 4]}, [init("b", 4)])
    assert check_model(model).op_counts() == {"ewadd": 3}


def test_dynamic_batch() -> None:
    nodes = [node("Relu", ["x"], ["y"])]
    model = make(nodes, {"x": ["N", 4]}, {"y": ["N", 4]})
    with pytest.raises(OnnxError, match=r"'x'.*dynamic") as exc:
        load(model)
    assert exc.value.tensor == "x"
    assert load(model, batch=3).inputs[0].shape == (3, 4)
    assert load(model, input_shapes={"x": [5, 4]}).inputs[0].shape == (5, 4)
    with pytest.raises(OnnxError, match="fixes it to 4"):
        load(model, input_shapes={"x": [5, 2]})


# ---------------------------------------------------------------------------------------------
# Export of relsat graphs


@pytest.mark.parametrize("name", ["squeezenet", "resnext50"])
def test_bundled_models_round_trip(name: str) -> None:
    graph = models.load(name)
    values = relsat.random_values(graph)
    inputs = {n.name or "": values[n.name or ""] for n in graph.inputs}
    exported = to_model(graph)
    assert_close(run_onnx(exported, inputs), relsat.run(graph, values), rtol=1e-3)


def test_optimized_squeezenet_equals_original() -> None:
    graph = models.load("squeezenet")
    optimized = relsat.optimize(graph, relsat.Options(verify=False)).graph
    assert any(n.params.get("activation", "NONE") != "NONE" for n in optimized.nodes)
    comparison = verify(to_model(graph), to_model(optimized))
    assert comparison.ok, comparison.report()


def test_weight_subgraphs_are_folded() -> None:
    b = GraphBuilder()
    x = b.input([1, 8, 9, 9], name="x")
    w1, w3 = b.weight([8, 4, 1, 1], name="w1"), b.weight([8, 4, 3, 3], name="w3")
    wide = b.concat(0, [b.enlarge(w1, w3), w3])  # TASO's merged 1x1 + 3x3 conv
    y = b.conv2d(x, b.merge(wide, 2), activation="RELU")
    a, c = b.split(y, 1, [8, 8])
    pooled = b.avgpool2d(a, 3, 2, "SAME", activation="TANH")
    graph = b.build(pooled, c, b.noop(a, x))
    exported = to_model(graph)
    types = [n.op_type for n in exported.graph.node]
    assert "Pad" not in types and types.count("Conv") == 1
    assert {"Relu", "Tanh", "Split", "AveragePool"} <= set(types)
    assert len(exported.graph.output) == 4
    values = relsat.random_values(graph)
    assert_close(run_onnx(exported, {"x": values["x"]}), relsat.run(graph, values))


@pytest.mark.parametrize(
    "size,kernel,stride", [(7, 2, 1), (8, 3, 2), (9, 4, 2), (5, 1, 2), (6, 5, 3)]
)
def test_same_padding_matches_declared_size(size: int, kernel: int, stride: int) -> None:
    b = GraphBuilder()
    x = b.input([1, 2, size, size], name="x")
    y = b.conv2d(x, b.weight([3, 2, kernel, kernel]), stride, "SAME")
    m = b.maxpool2d(x, kernel, stride, "SAME")
    graph = b.build(y, m)
    values = relsat.random_values(graph)
    assert_close(run_onnx(to_model(graph), {"x": values["x"]}), relsat.run(graph, values))


def test_output_names_and_save(tmp_path: Path) -> None:
    model = cnn()
    graph = load(model)
    path = tmp_path / "out.onnx"
    save(graph, path)
    assert [o.name for o in onnx.load(path).graph.output] == ["s"]  # the label load gave it
    assert verify(model, path).ok
    save(graph, path, output_names=["probs"])
    assert [o.name for o in onnx.load(path).graph.output] == ["probs"]
    assert os.listdir(tmp_path) == ["out.onnx"]


def test_verify_detects_a_difference() -> None:
    model = cnn()
    other = onnx.ModelProto()
    other.CopyFrom(model)
    other.graph.initializer[4].CopyFrom(init("fcb", 5, scale=3.0))
    comparison = verify(model, other)
    assert not comparison.ok and "DIFFERENT" in comparison.report()


INF, NAN = float("inf"), float("nan")
TOLERANCE_CASES = [  # (first output, second output, within rtol=1e-4, atol=1e-5?)
    ([1000.0, 0.0], [1000.0, 0.005], True),  # atol scales with max|b|: 0.005 <= 1e-5 * 1000
    ([1.0, 0.0], [1.0, 0.005], False),  # ... and at magnitude 1 it does not
    ([2.0, 3.0], [2.0002, 3.0], True),  # rtol relative to each element
    ([INF, NAN, 1.0], [INF, NAN, 1.0], True),  # equal infinities, NaN in both
    ([NAN, 1.0], [1.0, 1.0], False),
    ([INF, 1.0], [1e30, 1.0], False),
]


@pytest.mark.parametrize(("first", "second", "ok"), TOLERANCE_CASES)
def test_numpy_and_onnxruntime_verification_share_one_tolerance_rule(
    first: list[float], second: list[float], ok: bool
) -> None:
    """relsat.compare (NumPy) and relsat.onnx.verify (onnxruntime) judge the same outputs alike:
    each graph/model outputs Relu(constant), so the outputs are exactly the constants."""
    from relsat.graph import execute
    from relsat.onnx import compare_outputs

    assert compare_outputs is execute.compare_outputs

    def graph(name: str, values: list[float]) -> Graph:
        b = GraphBuilder()
        return b.build(b.relu(b.weight([len(values)], name, np.array(values))))

    def model(values: list[float]) -> onnx.ModelProto:
        c = numpy_helper.from_array(np.array(values, dtype=np.float32), "c")
        node = helper.make_node("Relu", ["c"], ["y"])
        y = helper.make_tensor_value_info("y", F, [len(values)])
        g = helper.make_graph([node], "g", [], [y], initializer=[c])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    numpy_result = relsat.compare(graph("a", first), graph("b", second))
    ort_result = verify(model(first), model(second))
    assert numpy_result.ok is ort_result.ok is ok
    assert numpy_result.close == ort_result.close == (ok,)


# ---------------------------------------------------------------------------------------------
# Bad input


def test_truncated_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(cnn().SerializeToString()[:200])
    with pytest.raises(OnnxError, match=r"bad\.onnx") as exc:
        load(path)
    assert exc.value.path == str(path)
    path.write_bytes(b"not a model at all")
    with pytest.raises(OnnxError, match=r"bad\.onnx"):
        load(path)
    with pytest.raises(OnnxError, match=r"missing\.onnx"):
        load(tmp_path / "missing.onnx")


def test_old_opset_is_raised_by_the_version_converter() -> None:
    """Opset 6 (the model zoo's older graphs): ONNX's version converter raises it to 7, legacy
    broadcasting included."""
    nodes = [node("Add", ["x", "b"], ["s"], broadcast=1), node("Relu", ["s"], ["y"])]
    model = make(nodes, {"x": [2, 3, 4], "b": [4]}, {"y": [2, 3, 4]}, opset=6)
    graph = load(model)
    assert [n.op for n in graph.nodes if n.op not in ("input", "weight")] == ["ewadd", "relu"]


def test_an_old_opset_the_converter_cannot_raise_is_refused() -> None:
    up = node("Upsample", ["x"], ["y"], scales=[1.0, 1.0, 2.0, 2.0])
    model = make([up], {"x": [1, 1, 2, 2]}, {"y": [1, 1, 4, 4]}, opset=1)
    with pytest.raises(OnnxError, match=r"opset 1 is not supported .*version converter"):
        load(model)


def test_missing_input_names_the_node() -> None:
    model = make([node("Add", ["x", "ghost"], ["y"])], {"x": [2]}, {"y": [2]})
    with pytest.raises(OnnxError, match="ghost") as exc:
        load(model)
    assert exc.value.node == "Add:y" and exc.value.op_type == "Add"


def test_unwritable_path_leaves_nothing(tmp_path: Path) -> None:
    graph = load(cnn())
    with pytest.raises(OnnxError, match="nowhere"):
        save(graph, tmp_path / "nowhere" / "out.onnx")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        with pytest.raises(OnnxError, match="locked"):
            save(graph, locked / "out.onnx")
        assert os.listdir(locked) == []
    finally:
        locked.chmod(0o700)


def _shape_computing_model():  # type: ignore[no-untyped-def]
    """x [2, 6] reshaped to [shape(x)[0], 3, 2] through Shape → Gather → Concat, as exporters
    write it: the reshape target is computed at run time."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "rest"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Softmax", ["r"], ["y"], axis=-1),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "axes"),
        numpy_helper.from_array(np.array([3, 2], dtype=np.int64), "rest"),
    ]
    graph = helper.make_graph(
        nodes,
        "shape-computing",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 2])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_run_time_shape_computations_are_folded(tmp_path: Path) -> None:
    model = _shape_computing_model()
    graph = load(model)
    assert graph.output_shapes == [(2, 3, 2)]
    out = tmp_path / "folded-opt.onnx"
    save(relsat.optimize(graph, relsat.Options(verify=False)).graph, out, output_names=["y"])
    assert verify(model, str(out)).ok


def test_torch_transformer_export_loads(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0)
    net = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()
    path = tmp_path / "transformer.onnx"
    torch.onnx.export(
        net,
        (torch.randn(1, 16, 64),),
        str(path),
        opset_version=17,
        dynamo=False,
        input_names=["x"],
        output_names=["y"],
    )
    graph = load(path)
    assert graph.output_shapes == [(1, 16, 64)]
    out = tmp_path / "transformer-opt.onnx"
    save(relsat.optimize(graph, relsat.Options(verify=False)).graph, out, output_names=["y"])
    assert verify(path, str(out)).ok


# ---------------------------------------------------------------------------------------------
# Any element type crosses the graph; the interface is kept


def vi(name: str, elem: int, dims: Sequence[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, list(dims))


def token_model(dims: Sequence[int | str] = (1, 8)) -> onnx.ModelProto:
    """A transformer's embedding and masking: int64 input_ids → Gather of an embedding table →
    Linear; the int64 attention_mask cast to float multiplies it; an int64 ArgMax output."""
    nodes = [
        node("Gather", ["emb", "input_ids"], ["h"]),
        node("MatMul", ["h", "w"], ["m"]),
        node("Add", ["m", "b"], ["lin"]),
        node("Cast", ["attention_mask"], ["maskf"], to=F),
        node("Unsqueeze", ["maskf", "axis2"], ["mask3"]),
        node("Mul", ["lin", "mask3"], ["y"]),
        node("ArgMax", ["y"], ["best"], axis=-1, keepdims=0),
    ]
    inits = [init("emb", 50, 16), init("w", 16, 16), init("b", 16), ints("axis2", [2])]
    graph = helper.make_graph(
        nodes,
        "tokens",
        [vi("input_ids", I64, dims), vi("attention_mask", I64, dims)],
        [vi("y", F, [*dims, 16]), vi("best", I64, dims)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def non_float_readers(graph: Graph) -> set[str]:
    """The ops reading a tensor that is not float32 (as the opaque nodes record it)."""
    other: set[Ref] = set()
    for n in graph.nodes:
        if n.op == "opaque":
            meta = json.loads(n.params["attrs"]).get("_onnx", {})
            ins = zip(n.inputs, meta.get("in_dtypes", []), strict=False)
            other |= {r for r, d in ins if d != "FLOAT"}
            outs = enumerate(meta.get("out_dtypes", []))
            other |= {Ref(n.id, i) for i, d in outs if d != "FLOAT"}
    return {n.op for n in graph.nodes for r in n.inputs if r in other}


def interface(model: onnx.ModelProto) -> list[list[tuple[str, int, list[int]]]]:
    def sig(vis: Sequence[onnx.ValueInfoProto]) -> list[tuple[str, int, list[int]]]:
        return [
            (
                v.name,
                v.type.tensor_type.elem_type,
                [d.dim_value for d in v.type.tensor_type.shape.dim],
            )
            for v in vis
        ]

    return [sig(model.graph.input), sig(model.graph.output)]


def test_token_ids_and_masks_cross_the_graph() -> None:
    model = token_model()
    graph = load(model)
    assert [(n.name, n.shape) for n in graph.inputs] == [
        ("input_ids", (1, 8)),
        ("attention_mask", (1, 8)),
    ]
    opaque = sorted(n.params["type"] for n in graph.nodes if n.op == "opaque")
    assert opaque == ["ArgMax", "Cast", "Gather"]
    assert graph.op_counts()["matmul"] == 1  # the float region between them is mapped
    assert non_float_readers(graph) == {"opaque"}  # no rule can see an int64 tensor
    exported = to_model(graph, output_names=["y", "best"])  # types from the opaque records
    assert interface(exported) == interface(model)
    assert verify(model, exported).ok
    optimized = relsat.optimize(graph, relsat.Options(verify=False, cost_model="analytic")).graph
    assert non_float_readers(optimized) == {"opaque"}
    assert verify(model, to_model(optimized, like=model)).ok


def test_inputs_are_drawn_valid_per_element_type() -> None:
    nodes = [
        node("Cast", ["ids"], ["ids32"], to=TensorProto.INT32),
        node("Gather", ["small_table", "ids32"], ["g1"]),
        node("Gather", ["big_table", "ids"], ["g2"]),
        node("Add", ["g1", "g2"], ["y"]),
    ]
    inits = [init("small_table", 7, 3), init("big_table", 30, 3)]
    dims = [4, 6]
    inputs = [
        vi("ids", I64, dims),
        vi("attention_mask", I64, dims),
        vi("flags", TensorProto.BOOL, dims),
        vi("steps", TensorProto.INT32, [3]),
        vi("x", F, dims),
    ]
    graph = helper.make_graph(nodes, "draw", inputs, [vi("y", F, [*dims, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert input_kinds(model) == {
        "ids": Kind("index", 7),  # the smaller of the two tables it indexes
        "attention_mask": Kind("mask"),
        "steps": Kind("small"),
    }
    drawn = random_inputs(model, seed=3)
    assert drawn["ids"].dtype == np.int64 and 0 <= drawn["ids"].min() <= drawn["ids"].max() < 7
    mask = drawn["attention_mask"]
    assert mask.dtype == np.int64 and set(np.unique(mask)) <= {0, 1}
    assert (mask[:, 0] == 1).all() and (np.diff(mask, axis=1) <= 0).all()  # padded rows
    assert drawn["flags"].dtype == np.bool_
    assert drawn["steps"].dtype == np.int32 and drawn["steps"].max() < 4
    assert drawn["x"].dtype == np.float32
    assert verify(model, model, seed=3).ok  # every id is in range for onnxruntime's Gather


def dead_inputs_model() -> onnx.ModelProto:
    """Two unused inputs (one bool), outputs in an order of their own, one of them int64."""
    nodes = [node("Relu", ["x"], ["a"]), node("ArgMax", ["a"], ["b"], axis=1, keepdims=0)]
    inputs = [vi("unused", F, [3]), vi("x", F, [2, 4]), vi("flags", TensorProto.BOOL, [2])]
    graph = helper.make_graph(nodes, "dead", inputs, [vi("b", I64, [2]), vi("a", F, [2, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_interface_is_kept_exactly() -> None:
    model = dead_inputs_model()
    graph = load(model)
    assert [n.name for n in graph.inputs] == ["unused", "x", "flags"]  # used or not, in order
    assert interface(to_model(graph, like=model)) == interface(model)
    assert verify(model, to_model(graph, like=model)).ok
    optimized = relsat.optimize(graph, relsat.Options(verify=False, cost_model="analytic")).graph
    assert interface(to_model(optimized, like=model)) == interface(model)
    # without ``like`` only the types opaque nodes record are known: the unused bool is float
    assert [i.name for i in to_model(optimized).graph.input] == ["unused", "x", "flags"]


def test_a_built_graph_with_a_dead_input_optimizes_and_verifies() -> None:
    b = GraphBuilder()
    b.input([3], name="unused")
    x = b.input([4, 8], name="x")
    y = b.matmul(x, b.weight([8, 8]), activation="RELU")
    graph = b.build(b.add(y, y))
    assert [n.name for n in graph.reachable().inputs] == ["unused", "x"]
    result = relsat.optimize(graph)
    assert result.verified
    assert [n.name for n in result.graph.inputs] == ["unused", "x"]
    assert verify(to_model(graph), to_model(result.graph)).ok


def _if_model() -> onnx.ModelProto:
    branch = helper.make_graph([node("Relu", ["x"], ["r"])], "branch", [], [vi("r", F, [2])])
    nodes = [
        node("ReduceSum", ["x"], ["s"], keepdims=0),
        node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], name="choose", then_branch=branch, else_branch=branch),
    ]
    zero = numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero")
    return make(nodes, {"x": [2]}, {"y": [2]}, [zero])


def _sparse_model() -> onnx.ModelProto:
    model = make([node("Add", ["x", "sp"], ["y"])], {"x": [4]}, {"y": [4]})
    values = numpy_helper.from_array(np.array([1.0], dtype=np.float32), "sp")
    indices = numpy_helper.from_array(np.array([2], dtype=np.int64), "sp_idx")
    model.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [4]))
    return model


def _unknown_dtype_model() -> onnx.ModelProto:
    model = make([node("Identity", ["x"], ["y"])], {"x": [2]}, {"y": [2]})
    model.graph.input[0].type.tensor_type.elem_type = 99
    return model


def _sequence_input_model() -> onnx.ModelProto:
    model = make([node("SequenceLength", ["x"], ["y"])], {}, {})
    model.graph.input.append(helper.make_tensor_sequence_value_info("x", F, [2]))
    model.graph.output.append(vi("y", I64, []))
    return model


@pytest.mark.parametrize(
    ("build", "message", "fields"),
    [
        (_if_model, "GRAPH.*subgraphs", {"node": "choose", "op_type": "If"}),
        (_sparse_model, "sparse", {"tensor": "sp"}),
        (_unknown_dtype_model, "unknown element type 99", {"tensor": "x"}),
        (_sequence_input_model, "sequence_type, not a tensor", {"tensor": "x"}),
    ],
)
def test_unsupported_constructs_are_one_onnx_error(
    build: object, message: str, fields: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(build().SerializeToString())  # type: ignore[operator]
    with pytest.raises(OnnxError, match=message) as exc:
        load(path)
    assert exc.value.path == str(path) and str(exc.value).startswith(str(path))
    assert "\n" not in str(exc.value)
    for key, value in fields.items():
        assert getattr(exc.value, key) == value


# ---------------------------------------------------------------------------------------------
# External data


def save_external(model: onnx.ModelProto, path: Path) -> None:
    """``model`` at ``path`` with every tensor in ``path.data`` (as exporters write big models)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    onnx.save_model(
        copy, str(path), save_as_external_data=True, location=f"{path.name}.data", size_threshold=0
    )


def test_external_data_is_read_relative_to_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = cnn()
    path = tmp_path / "models" / "cnn.onnx"
    save_external(model, path)
    assert any(
        t.data_location == TensorProto.EXTERNAL
        for t in onnx.load(path, load_external_data=False).graph.initializer
    )
    monkeypatch.chdir(tmp_path)  # not the model's folder
    graph = load(path)
    assert graph == load(model)
    assert verify(model, to_model(graph)).ok
    shapes = tmp_path / "shapes" / "m.onnx"  # the constant-folding retry reads the data too
    save_external(_shape_computing_model(), shapes)
    assert load(shapes).output_shapes == [(2, 3, 2)]
    with pytest.raises(OnnxError, match="from its path") as exc:  # in memory: no folder
        load(onnx.load(path, load_external_data=False))
    assert exc.value.tensor == "w1"


def test_a_missing_external_data_file_is_one_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cnn.onnx"
    save_external(cnn(), path)
    (tmp_path / "cnn.onnx.data").rename(tmp_path / "elsewhere.data")
    with pytest.raises(OnnxError, match=r"external data file 'cnn\.onnx\.data' is missing") as exc:
        load(path)
    assert exc.value.path == str(path) and exc.value.tensor == "w1"
    from relsat.cli import EXIT_ERROR, main

    out = tmp_path / "out.onnx"
    assert main(["optimize", str(path), "-o", str(out)]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cnn.onnx.data" in err and "'w1'" in err
    assert sorted(os.listdir(tmp_path)) == ["cnn.onnx", "elsewhere.data"]


def test_a_model_too_big_for_one_file_is_written_with_external_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from relsat.onnx import data as onnx_data

    model = cnn()
    graph = load(model)
    monkeypatch.setattr(onnx_data, "MAX_INLINE_BYTES", 1000)  # cnn() is ~3 kB: "too big"
    monkeypatch.setattr(onnx_data, "EXTERNAL_MIN_BYTES", 100)
    path = tmp_path / "out.onnx"
    written = save(graph, path)
    assert sorted(os.listdir(tmp_path)) == ["out.onnx", "out.onnx.data"]  # no temporary left
    assert path.stat().st_size < written.ByteSize() / 2
    assert written.graph.initializer[0].HasField("raw_data")  # the returned model keeps its data
    assert verify(model, path).ok and verify(model, written).ok
    assert load(path) == load(written)


def test_checks_and_shape_inference_skip_big_weight_data() -> None:
    """The checker and shape inference see a skeleton: big initializers as typed inputs (no data
    serialized), small ones (shape operands) kept; the import itself keeps every value."""
    from relsat.onnx.importer import SKELETON_MAX_ELEMENTS, _skeleton

    n = SKELETON_MAX_ELEMENTS + 1
    nodes = [node("MatMul", ["x", "w"], ["m"]), node("Reshape", ["m", "shape"], ["y"])]
    inits = [init("w", 8, n), ints("shape", [n, 2])]
    model = make(nodes, {"x": [2, 8]}, {"y": [n, 2]}, inits)
    skeleton = _skeleton(model)
    assert [t.name for t in skeleton.graph.initializer] == ["shape"]
    assert [i.name for i in skeleton.graph.input] == ["x", "w"]
    assert len(model.graph.initializer) == 2  # the model itself is untouched
    graph = check_model(model)
    np.testing.assert_array_equal(graph.values["w"], numpy_helper.to_array(inits[0]))


@pytest.mark.parametrize(("c_shape", "fused"), [((5,), True), ((3, 5), False)])
def test_gemm_alpha_and_beta_fold_into_the_constants(c_shape: tuple[int, ...], fused: bool) -> None:
    nodes = [node("Gemm", ["x", "w", "c"], ["y"], alpha=2.0, beta=0.5, transB=1)]
    model = make(nodes, {"x": [3, 4]}, {"y": [3, 5]}, [init("w", 5, 4), init("c", *c_shape)])
    graph = check_model(model)  # relsat.run and the exported model agree with onnxruntime
    assert graph.op_counts().get("opaque", 0) == 0
    assert graph.op_counts().get("matmul_bias", 0) == (1 if fused else 0)


def _masked_model(
    nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], output: str
) -> onnx.ModelProto:
    """Opset 17: float ``x`` [2, 4] and an int64 mask ``m`` [2, 4] in, float ``output`` out."""
    graph = helper.make_graph(
        nodes,
        "masked",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
            helper.make_tensor_value_info("m", TensorProto.INT64, [2, 4]),
        ],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, [2, 4])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_small_constants_of_equal_value_are_one_weight() -> None:
    """Each layer of an export carries its own copy of a mask's 0 and -inf: equal small
    constants become one weight, so the layers' identical nodes reading them are one e-node;
    the written model computes the masked value once."""
    n = helper.make_node
    nodes = [n("Cast", ["m"], ["keep"], to=TensorProto.BOOL)]
    for layer in (0, 1):
        nodes += [
            n("Where", ["keep", f"zero{layer}", f"ninf{layer}"], [f"bias{layer}"]),
            n("Add", ["x", f"bias{layer}"], [f"y{layer}"]),
        ]
    nodes += [n("Mul", ["y0", "w"], ["a"]), n("Mul", ["y1", "w_other"], ["b"])]
    nodes += [n("Add", ["a", "b"], ["out"])]
    inits = [
        *(numpy_helper.from_array(np.zeros(1, np.float32), f"zero{k}") for k in (0, 1)),
        *(numpy_helper.from_array(np.full(1, -np.inf, np.float32), f"ninf{k}") for k in (0, 1)),
        numpy_helper.from_array(np.full(4, 2.0, np.float32), "w"),
        numpy_helper.from_array(np.full(4, 3.0, np.float32), "w_other"),  # another value: apart
    ]
    model = _masked_model(nodes, inits, "out")
    g = load(model)
    weights = sorted(node.name for node in g.nodes if node.op == "weight")
    assert weights == ["ninf0", "w", "w_other", "zero0"]
    result = relsat.optimize(model, relsat.Options(cost_model="analytic", keep_slower=True))
    written = to_model(result.graph, like=model)
    assert [node.op_type for node in written.graph.node].count("Where") == 1
    verify(model, written)


@pytest.mark.parametrize("reverse", [False, True])
def test_mask_steps_that_change_nothing_are_passed_through(reverse: bool) -> None:
    """A mask cast to bool twice, expanded and reshaped to its own shape and sliced whole is the
    mask: those nodes are not written. A Slice with step -1 keeps the shape but reverses: kept."""
    n = helper.make_node
    i64 = numpy_helper.from_array
    nodes = [
        n("Cast", ["m"], ["b1"], to=TensorProto.BOOL),
        n("Cast", ["b1"], ["b2"], to=TensorProto.BOOL),
        n("Expand", ["b2", "own"], ["b3"]),
        n("Reshape", ["b3", "own"], ["b4"]),
        n("Slice", ["b4", "start", "end", "axis", "step"], ["b5"]),
        n("Where", ["b5", "x", "zero"], ["y"]),
    ]
    step = -1 if reverse else 1
    inits = [
        i64(np.array([2, 4], np.int64), "own"),
        i64(np.array([-1 if reverse else 0], np.int64), "start"),
        i64(np.array([-5 if reverse else 4], np.int64), "end"),
        i64(np.array([1], np.int64), "axis"),
        i64(np.array([step], np.int64), "step"),
        numpy_helper.from_array(np.zeros(1, np.float32), "zero"),
    ]
    model = _masked_model(nodes, inits, "y")
    written = to_model(load(model), like=model)
    ops = [node.op_type for node in written.graph.node]
    assert ops == (["Cast", "Slice", "Where"] if reverse else ["Cast", "Where"])
    mask = np.array([[1, 0, 1, 1], [0, 0, 1, 0]], np.int64)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    (got,) = run_onnx(written, {"x": x, "m": mask})
    np.testing.assert_array_equal(got, np.where(mask[:, ::step] != 0, x, 0))
