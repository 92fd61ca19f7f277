"""ONNX import/export against onnxruntime on small models built here (no network)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import relsat
from relsat import models
from relsat.graph import GraphBuilder
from relsat.onnx import OnnxError, load, random_inputs, run_onnx, save, to_model, verify

RNG = np.random.default_rng(7)
F = TensorProto.FLOAT


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
    # what onnxruntime runs as one kernel is one op: Conv+bias+Relu, Gemm+bias+Sigmoid
    assert graph.op_counts() == {
        "conv2d_bias": 1,
        "conv2d": 1,
        "poolmax": 1,
        "poolavg": 2,
        "reshape": 1,
        "transpose": 1,
        "matmul_bias": 1,
    }
    convs = [n for n in graph.nodes if n.op in ("conv2d", "conv2d_bias")]
    assert [n.params["padding"] for n in convs] == ["SAME", "SAME"]
    assert [n.params["activation"] for n in convs] == ["RELU", "NONE"]
    (gemm,) = (n for n in graph.nodes if n.op == "matmul_bias")
    assert gemm.params["activation"] == "SIGMOID" and graph.shape(gemm.inputs[2]) == (5,)
    # and back: the fused units are written as the ops the runtime fuses, no bias Add
    exported = to_model(graph)
    assert sorted(n.op_type for n in exported.graph.node) == sorted(
        [
            "Conv",
            "Relu",
            "MaxPool",
            "Conv",
            "AveragePool",
            "AveragePool",
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


def test_linear_layers_become_fused_gemms_and_merge() -> None:
    """torch's Linear on [batch, seq, hidden] (MatMul + bias Add) is a matmul_bias; Q/K/V of one
    input merge into one Gemm with concatenated biases when the cost model prefers it."""
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
    assert graph.op_counts()["matmul_bias"] == 3
    assert [n.params["activation"] for n in graph.nodes if n.op == "matmul_bias"] == [
        "NONE",
        "NONE",
        "RELU6",
    ]
    result = relsat.optimize(graph)
    assert result.verified and result.graph.op_counts()["matmul_bias"] == 2  # + the ReLU6 one
    assert "matmul-bias-pair-shared-lhs" in result.rewrites()
    merged = to_model(result.graph)
    assert verify(model, merged).ok
    assert sum(n.op_type == "Gemm" for n in merged.graph.node) == 2


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
        node("LayerNormalization", ["m", "gamma", "beta"], ["ln"], axis=-1, epsilon=1e-3),
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
    assert set(opaque) == {"LayerNormalization", "Erf", "Softmax", "TopK"}
    assert graph.op_counts()["matmul"] == 1  # [2,3,6] @ [6,4] through reshapes
    assert opaque["TopK"].outputs[1].shape == (2, 3, 2)  # both outputs kept
    exported = to_model(graph)
    ln = next(n for n in exported.graph.node if n.op_type == "LayerNormalization")
    assert {a.name: helper.get_attribute_value(a) for a in ln.attribute}["axis"] == -1
    topk = next(n for n in exported.graph.node if n.op_type == "TopK")
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


def test_batchnorm_folds_into_conv_when_legal() -> None:
    bn1, p1 = bn_nodes("c1", "n1", "a")
    bn2, p2 = bn_nodes("c2", "n2", "b")
    nodes = [
        node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        bn1,  # folded: c1 has no other reader
        node("Relu", ["n1"], ["r"]),
        node("Conv", ["r", "w2"], ["c2"]),
        bn2,  # kept: c2 is also a graph output
    ]
    inits = [init("w1", 4, 2, 3, 3), init("b1", 4), init("w2", 4, 4, 1, 1), *p1, *p2]
    model = make(nodes, {"x": [1, 2, 8, 8]}, {"n2": [1, 4, 8, 8], "c2": [1, 4, 8, 8]}, inits)
    graph = check_model(model)
    assert graph.op_counts()["batchnorm"] == 1
    assert graph.op_counts()["conv2d_bias"] == 1  # the folded batch-norm is its bias
    assert graph.op_counts()["conv2d"] == 1
    assert "w1_bn" in graph.values


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
    optimized = relsat.optimize(graph, verify=False).graph
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


def test_old_opset() -> None:
    model = make([node("Relu", ["x"], ["y"])], {"x": [2]}, {"y": [2]}, opset=6)
    with pytest.raises(OnnxError, match="opset 6"):
        load(model)


def test_missing_input_names_the_node() -> None:
    model = make([node("Add", ["x", "ghost"], ["y"])], {"x": [2]}, {"y": [2]})
    with pytest.raises(OnnxError, match="ghost") as exc:
        load(model)
    assert exc.value.node == "Add:y" and exc.value.op_type == "Add"


def test_non_float_input_refused() -> None:
    graph = helper.make_graph(
        [node("Cast", ["x"], ["y"], to=F)],
        "t",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    with pytest.raises(OnnxError, match="INT64") as exc:
        load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert exc.value.tensor == "x"


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
    save(relsat.optimize(graph, verify=False).graph, out, output_names=["y"])
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
    save(relsat.optimize(graph, verify=False).graph, out, output_names=["y"])
    assert verify(path, str(out)).ok
