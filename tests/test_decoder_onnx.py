"""LLM decoder operators through ONNX: exporter spellings of RMSNorm and rotary embedding (built
with onnx.helper as torch writes them) import, fuse by rules/decoder.rules and export as the fused
kernels onnxruntime runs (RMSNormalization / SimplifiedLayerNormalization, RotaryEmbedding);
the fused ONNX operators import back; near misses stay unfused."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from relsat import GraphBuilder, Options, optimize
from relsat import onnx as ronnx
from relsat.cost.model import OpSignature
from relsat.cost.ort import unit_graph
from relsat.errors import GraphError
from relsat.graph.execute import run
from relsat.graph.ops import f32_bits
from relsat.rewrite.rulefile import RULES_DIR, load_rules

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(0)
DECODER_RULES = load_rules(RULES_DIR / "decoder.rules")
S, N = 8, 32  # tokens, hidden size
H, D = 2, 32  # heads, head size (rules/decoder.rules has a rule for 32)
n = helper.make_node


def _init(name: str, value: object, dtype: object = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _model(
    nodes: list[onnx.NodeProto],
    inits: list[onnx.TensorProto],
    inputs: dict[str, list[int]],
    outputs: dict[str, list[int]],
    opset: int = 20,
    contrib: bool = False,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outputs.items()],
        inits,
    )
    opsets = [helper.make_opsetid("", opset)]
    if contrib:
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(a) for a in session.run(None, feeds)]


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {
        i.name: RNG.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in model.graph.input
    }


# --- RMSNorm --------------------------------------------------------------------------------


def _rms_model(
    spelling: str = "dynamo",
    eps: float | None = 1e-6,
    scale_shape: tuple[int, ...] = (N,),
    axis: int = -1,
) -> onnx.ModelProto:
    """A residual add and the RMSNorm after it as torch writes LlamaRMSNorm: dynamo (opset 20)
    ``Mul(w, Mul(x, Reciprocal(Sqrt(Add(ReduceMean(Pow(x, 2)), eps)))))``, or the legacy
    exporter (opset 17) with Div(1, Sqrt) and a Cast to float32 on each side; ``eps`` None: the
    epsilon is a graph input."""
    legacy = spelling == "legacy"
    x = "h"
    nodes = [n("Add", ["a", "b"], ["h"])]
    if legacy:
        nodes.append(n("Cast", ["h"], ["hc"], to=TensorProto.FLOAT))
        x = "hc"
    nodes.append(n("Pow", [x, "two"], ["sq"]))
    if legacy:
        nodes.append(n("ReduceMean", ["sq"], ["ms"], axes=[axis], keepdims=1))
    else:
        nodes.append(n("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1))
    nodes += [n("Add", ["ms", "eps"], ["shifted"]), n("Sqrt", ["shifted"], ["root"])]
    if legacy:
        nodes += [
            n("Div", ["one", "root"], ["inv"]),
            n("Mul", [x, "inv"], ["normed"]),
            n("Cast", ["normed"], ["nc"], to=TensorProto.FLOAT),
            n("Mul", ["w", "nc"], ["y"]),
        ]
    else:
        nodes += [n("Reciprocal", ["root"], ["inv"]), n("Mul", [x, "inv"], ["normed"])]
        nodes.append(n("Mul", ["w", "normed"], ["y"]))
    inits = [
        _init("two", 2.0),
        _init("one", [1.0]),
        _init("axes", [axis], np.int64),
        _init("w", RNG.uniform(0.5, 1.5, scale_shape)),
    ]
    inputs = {"a": [1, S, N], "b": [1, S, N]}
    if eps is None:
        inputs["eps"] = []
    else:
        inits.append(_init("eps", eps))
    return _model(nodes, inits, inputs, {"y": [1, S, N]}, opset=17 if legacy else 20)


@pytest.mark.parametrize("spelling", ["dynamo", "legacy"])
def test_rmsnorm_spellings_fuse_and_run_as_one_kernel(spelling: str) -> None:
    model = _rms_model(spelling)
    graph = ronnx.load(model)
    assert "opaque" not in graph.op_counts()  # Reciprocal, and the legacy float-to-float Casts
    result = optimize(graph, Options(rules=DECODER_RULES))
    assert result.graph.op_counts()["rmsnorm"] == 1 and result.verified
    feeds = _feeds(model)
    (want,) = _ort(model, feeds)
    out = ronnx.to_model(result.graph, like=model)  # written at opset 23: RMSNormalization
    assert {o.domain: o.version for o in out.opset_import}[""] == 23
    assert "RMSNormalization" in {node.op_type for node in out.graph.node}
    np.testing.assert_allclose(_ort(out, feeds)[0], want, rtol=1e-5, atol=1e-5)
    back = ronnx.load(out).op_counts()  # and the fused operator imports as the op
    assert back["rmsnorm"] == 1 and "opaque" not in back
    # below opset 23: the Div spelling, which onnxruntime fuses into its own kernel
    low = ronnx.to_model(result.graph, like=model, opset=17)
    assert {"Div", "Sqrt"} <= {node.op_type for node in low.graph.node}
    np.testing.assert_allclose(_ort(low, feeds)[0], want, rtol=1e-5, atol=1e-5)
    assert "SimplifiedLayerNormalization" in _ort_optimized(low)


def _ort_optimized(model: onnx.ModelProto) -> set[str]:
    """The op types of ``model`` after onnxruntime's graph optimizations (all levels)."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        options = ort.SessionOptions()
        options.optimized_model_filepath = os.path.join(folder, "optimized.onnx")
        options.log_severity_level = 3
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        optimized = onnx.load(options.optimized_model_filepath)
    return {node.op_type for node in optimized.graph.node}


def test_rmsnorm_near_misses_stay_unfused() -> None:
    cases = {
        "epsilon as a runtime tensor": _rms_model(eps=None),
        "not an epsilon (the rule's guard allows below 0.01)": _rms_model(eps=0.5),
        "a scale of the wrong shape": _rms_model(scale_shape=(S, N)),
        "a mean over another axis": _rms_model(axis=1),
    }
    for why, model in cases.items():
        result = optimize(ronnx.load(model), Options(rules=DECODER_RULES, verify=False))
        assert "rmsnorm" not in result.graph.op_counts(), why
        assert ronnx.verify(model, ronnx.to_model(result.graph, like=model)).ok, why


def test_fused_rmsnorm_imports_with_strict_guards() -> None:
    x = {"x": [1, S, N]}
    ys = ("y", "y_ort", "y_axis", "y_wide", "y_std")
    nodes = [
        n("RMSNormalization", ["x", "w"], ["y"], epsilon=1e-5),
        n("SimplifiedLayerNormalization", ["x", "w"], ["y_ort"], domain="com.microsoft"),
        n("RMSNormalization", ["x", "w_s"], ["y_axis"], axis=1),  # over [S, N], not [N]
        n("RMSNormalization", ["x", "w_wide"], ["y_wide"]),  # a scale of shape [1, N]
        n(
            "SimplifiedLayerNormalization",
            ["x", "w"],
            ["y_std", "inv_std"],
            domain="com.microsoft",
        ),
    ]
    inits = [
        _init("w", RNG.uniform(0.5, 1.5, N)),
        _init("w_s", RNG.uniform(0.5, 1.5, (S, N))),
        _init("w_wide", RNG.uniform(0.5, 1.5, (1, N))),
    ]
    outputs = {y: [1, S, N] for y in ys} | {"inv_std": [1, S, 1]}
    model = _model(nodes, inits, x, outputs, opset=23, contrib=True)
    graph = ronnx.load(model)
    counts = graph.op_counts()
    # the last reads inv_std too: opaque, one node for y_std and one for inv_std
    assert counts["rmsnorm"] == 2 and counts["opaque"] == 4
    eps = sorted(round(node.params["epsilon"], 9) for node in graph.nodes if node.op == "rmsnorm")
    assert eps == [1e-5, 1e-5]  # SimplifiedLayerNormalization's default epsilon
    # (onnxruntime has no com.microsoft kernel for it: the round trip is checked without it)
    rms = GraphBuilder()
    xin = rms.input([1, S, N], name="x")
    small = rms.build(rms.rmsnorm(xin, rms.weight([N]), 1e-5))
    feeds = {"x": RNG.standard_normal((1, S, N)).astype(np.float32)}
    (want,) = run(small, feeds)
    np.testing.assert_allclose(_ort(ronnx.to_model(small), feeds)[0], want, rtol=1e-5, atol=1e-6)


def test_unit_prices_time_the_fused_kernel() -> None:
    xs = (1, S, N)
    sig = OpSignature("rmsnorm", (f32_bits(1e-6),), "", (xs, (N,)), xs, (False, True))
    types = {node.op_type for node in ronnx.to_model(unit_graph(sig)).graph.node}
    assert types == {"RMSNormalization"}
    qs, cs = (1, H, S, D), (1, 1, S, D // 2)
    sig = OpSignature("rotary", (0,), "", (qs, cs, cs), qs, (False, True, True))
    model = ronnx.to_model(unit_graph(sig))
    assert {node.op_type for node in model.graph.node} == {"RotaryEmbedding"}


def test_run_time_rotary_tables_are_priced_as_the_kernel_and_laid_out_once() -> None:
    """Tables computed at run time (a dynamic sequence length): the unit is priced as the kernel
    with constant caches, and the export lays the angles out once, both caches computed from
    them and shared by every rotary that reads them (one Reshape, not one per table or per
    rotary; the Cos and Sin of the tables' own layout left out), computing what NumPy
    computes."""
    from relsat.cost.ort import OrtModel

    qs, cs = (1, H, S, D), (1, 1, S, D // 2)
    model = OrtModel(cache=False)
    run_time = OpSignature("rotary", (0,), "", (qs, cs, cs), qs, (False, False, False))
    constant = OpSignature("rotary", (0,), "", (qs, cs, cs), qs, (False, True, True))
    assert model.canonical(run_time) == model.canonical(constant)

    b = GraphBuilder()
    angles = b.input([1, 1, S, D // 2], name="angles")
    cos, sin = b.cos(angles), b.sin(angles)
    outs = [b.rotary(b.input(list(qs), name=f"x{i}"), cos, sin) for i in range(4)]
    graph = b.build(*outs)
    exported = ronnx.to_model(graph)
    nodes = exported.graph.node
    assert sorted(nd.op_type for nd in nodes) == ["Cos", "Reshape", *["RotaryEmbedding"] * 4, "Sin"]
    rotaries = [nd for nd in nodes if nd.op_type == "RotaryEmbedding"]
    assert len(rotaries) == 4 and len({tuple(nd.input[1:]) for nd in rotaries}) == 1
    feeds = _feeds(exported)
    for got, want in zip(_ort(exported, feeds), run(graph, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_decode_steps_angles_are_laid_out_once_for_the_batch() -> None:
    """A decode step's rotary angles (one position, computed per call, reshaped twice on the
    way, as the importer reads a dynamic cache length) broadcast over a batch of 2: one
    Reshape and one Expand of the angles, then Cos and Sin, whatever the number of rotaries
    reading them, and what NumPy computes."""
    b = GraphBuilder()
    position = b.input([1, D // 2], name="position")
    angles = b.reshape(b.reshape(position, [1, 1, D // 2]), [1, 1, 1, D // 2])
    cos, sin = b.reshape(b.cos(angles), [1, 1, 1, D // 2]), b.sin(angles)
    qs = [2, H, 1, D]
    graph = b.build(*(b.rotary(b.input(qs, name=f"x{i}"), cos, sin) for i in range(3)))
    exported = ronnx.to_model(graph)
    kinds = sorted(nd.op_type for nd in exported.graph.node)
    assert kinds == ["Cos", "Expand", "Reshape", *["RotaryEmbedding"] * 3, "Sin"]
    feeds = _feeds(exported)
    for got, want in zip(_ort(exported, feeds), run(graph, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# --- rotary embedding -----------------------------------------------------------------------


def _tables(d: int, halves_equal: bool = True) -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / (10000 ** (np.arange(0, d, 2) / d))
    freqs = np.outer(np.arange(S), inv)
    other = freqs * 1.5 if not halves_equal else freqs
    emb = np.concatenate([freqs, other], -1)[None, None, :, :d]  # [1, 1, S, d]
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def _rotary_model(d: int = D, halves_equal: bool = True, heads: int = H) -> onnx.ModelProto:
    """Rotary embedding of q and k as torch dynamo writes transformers' apply_rotary_pos_emb:
    ``x * cos + Concat(Neg(x[..., d/2:]), x[..., :d/2]) * sin`` with constant tables."""
    half = d // 2
    nodes = []
    for t in "qk":
        nodes += [
            n("Mul", [t, "cos"], [f"{t}_cos"]),
            n("Slice", [t, "zero", "half", "last", "step"], [f"{t}_1"]),
            n("Slice", [t, "half", "end", "last", "step"], [f"{t}_2"]),
            n("Neg", [f"{t}_2"], [f"{t}_neg"]),
            n("Concat", [f"{t}_neg", f"{t}_1"], [f"{t}_rot"], axis=-1),
            n("Mul", [f"{t}_rot", "sin"], [f"{t}_sin"]),
            n("Add", [f"{t}_cos", f"{t}_sin"], [f"{t}_out"]),
        ]
    cos, sin = _tables(d, halves_equal)
    inits = [_init("cos", cos), _init("sin", sin)]
    inits += [
        _init(k, [v], np.int64)
        for k, v in (("zero", 0), ("half", half), ("end", 2**63 - 1), ("last", 3), ("step", 1))
    ]
    shape = [1, heads, S, d]
    io = {"q": shape, "k": shape}
    return _model(nodes, inits, io, {"q_out": shape, "k_out": shape})


def test_rotary_spelling_fuses_and_runs_as_one_kernel() -> None:
    model = _rotary_model()
    graph = ronnx.load(model)
    counts = graph.op_counts()
    assert counts["slice"] == 4 and counts["neg"] == 2 and "opaque" not in counts
    result = optimize(graph, Options(rules=DECODER_RULES))
    fused = result.graph.op_counts()
    assert fused["rotary"] == 2 and "neg" not in fused and result.verified
    weight_only = result.graph.all_weights()  # the tables' halves: folded when written
    assert all(weight_only[n.id] for n in result.graph.nodes if n.op == "slice")
    out = ronnx.to_model(result.graph, like=model)
    assert {o.domain: o.version for o in out.opset_import}[""] == 23
    assert [node.op_type for node in out.graph.node] == ["RotaryEmbedding"] * 2
    read = {name for node in out.graph.node for name in node.input}
    assert {t.name for t in out.graph.initializer} <= read  # the table's halves not left over
    feeds = _feeds(model)
    for got, want in zip(_ort(out, feeds), _ort(model, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    back = ronnx.load(out).op_counts()
    assert back["rotary"] == 2 and "opaque" not in back
    # below opset 23 it is spelled out, and still right
    spelled = ronnx.to_model(result.graph, like=model, opset=20)
    assert "RotaryEmbedding" not in {node.op_type for node in spelled.graph.node}
    for got, want in zip(_ort(spelled, feeds), _ort(model, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_rotary_near_misses_stay_unfused() -> None:
    cases = {
        "tables whose halves differ": _rotary_model(halves_equal=False),
        "an odd head size": _rotary_model(d=33),
    }
    for why, model in cases.items():
        result = optimize(ronnx.load(model), Options(rules=DECODER_RULES, verify=False))
        assert "rotary" not in result.graph.op_counts(), why
        assert ronnx.verify(model, ronnx.to_model(result.graph, like=model)).ok, why
    model = _rotary_model(d=40)  # a head size no shipped model has: the one rule covers it
    result = optimize(ronnx.load(model), Options(rules=DECODER_RULES, verify=False))
    assert "rotary" in result.graph.op_counts()
    assert ronnx.verify(model, ronnx.to_model(result.graph, like=model)).ok


@pytest.mark.parametrize("interleaved", [0, 1])
def test_onnx_rotary_embedding_imports_and_exports(interleaved: int) -> None:
    cos, sin = (RNG.standard_normal((1, S, D // 2)).astype(np.float32) for _ in range(2))
    cache = RNG.standard_normal((2 * S, D // 2)).astype(np.float32)
    positions = np.arange(3, 3 + S, dtype=np.int64)[None]
    nodes = [
        n("RotaryEmbedding", ["x", "cos", "sin"], ["y"], interleaved=interleaved),
        n("RotaryEmbedding", ["x", "cache", "cache", "pos"], ["y_pos"], interleaved=interleaved),
        n("RotaryEmbedding", ["x", "cos_part", "sin_part"], ["y_part"], rotary_embedding_dim=16),
    ]
    inits = [_init("cos", cos), _init("sin", sin), _init("cache", cache)]
    inits += [_init("pos", positions, np.int64)]
    inits += [_init(k, RNG.standard_normal((1, S, 8))) for k in ("cos_part", "sin_part")]
    shape = [1, H, S, D]
    outputs = {y: shape for y in ("y", "y_pos", "y_part")}
    model = _model(nodes, inits, {"x": shape}, outputs, opset=23)
    imported = ronnx.load(model)
    counts = imported.op_counts()
    assert counts["rotary"] == 2 and counts["opaque"] == 1  # partial rotation stays opaque
    assert ronnx.verify(model, ronnx.to_model(imported, like=model)).ok
    # position ids computed at run time: opaque
    dynamic = helper.make_graph(
        [n("RotaryEmbedding", ["x", "cache", "cache", "pos_in"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
            helper.make_tensor_value_info("pos_in", TensorProto.INT64, [1, S]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [_init("cache", cache)],
    )
    opset = [helper.make_opsetid("", 23)]
    assert "rotary" not in ronnx.load(helper.make_model(dynamic, opset_imports=opset)).op_counts()
    # the NumPy kernel agrees with onnxruntime's (x a graph input, the tables constants)
    b = GraphBuilder()
    x = b.input(shape, name="x")
    y = b.rotary(x, b.weight([1, 1, S, D // 2]), b.weight([1, 1, S, D // 2]), bool(interleaved))
    small = b.build(y)
    values = {"x": RNG.standard_normal(shape).astype(np.float32)}
    (want,) = run(small, values)
    for opset in (23, 20):  # the fused kernel, and spelled out
        out = ronnx.to_model(small, opset=opset)
        got = _ort(out, {"x": values["x"]})[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_slices_import_with_strict_guards() -> None:
    x = {"x": [2, S, N]}
    nodes = [
        n("Slice", ["x", "s0", "e0", "ax"], ["first"]),  # x[..., 0:8]
        n("Slice", ["x", "neg", "big", "ax"], ["tail"]),  # x[..., -8:]
        n("Slice", ["x", "s0", "big", "ax"], ["whole"]),  # everything: x itself
        n("Slice", ["x", "s0", "e0", "ax", "two"], ["strided"]),  # step 2
        n("Slice", ["x", "e0", "s0", "ax", "back"], ["reversed"]),  # step -1: opaque
        n("Slice", ["x", "s01", "e01", "ax01"], ["both"]),  # two axes: two slices
    ]
    inits = [
        _init("s0", [0], np.int64),
        _init("e0", [8], np.int64),
        _init("neg", [-8], np.int64),
        _init("big", [2**63 - 1], np.int64),
        _init("ax", [-1], np.int64),
        _init("two", [2], np.int64),
        _init("back", [-1], np.int64),
        _init("s01", [1, 2], np.int64),
        _init("e01", [2, 6], np.int64),
        _init("ax01", [0, 2], np.int64),
    ]
    outputs = {
        "first": [2, S, 8],
        "tail": [2, S, 8],
        "whole": [2, S, N],
        "strided": [2, S, 4],
        "reversed": [2, S, 8],
        "both": [1, S, 4],
    }
    model = _model(nodes, inits, x, outputs)
    graph = ronnx.load(model)
    counts = graph.op_counts()
    assert counts["slice"] == 5 and counts["opaque"] == 1
    bounds = sorted(
        (node.params["axis"], node.params["start"], node.params["end"], node.params["step"])
        for node in graph.nodes
        if node.op == "slice"
    )
    assert bounds == [(0, 1, 2, 1), (2, 0, 8, 1), (2, 0, 8, 2), (2, 2, 6, 1), (2, 24, 32, 1)]
    assert ronnx.verify(model, ronnx.to_model(graph, like=model)).ok


# --- grouped-query attention ----------------------------------------------------------------

HQ, HKV = 4, 2  # query heads, key/value heads: groups of 2 (a rule of rules/decoder.rules)


def _gqa_model(spelling: str = "dynamo", axis: int = 2) -> onnx.ModelProto:
    """Grouped-query SDPA as torch exports transformers' Llama attention: keys and values
    repeated by repeat_kv (Unsqueeze at 2, Expand to [1, HKV, n, S, D], Reshape), q and the
    transposed keys each scaled by sqrt(1/sqrt(D)), an additive mask, the softmax's NaN guard.
    dynamo transposes the keys through a 3-D Reshape/Transpose/Reshape (onnxscript's SDPA),
    legacy with one 4-D Transpose. ``axis``: where the repeat's new axis goes (1 gives each head
    block repeated whole, which is not repeat_kv)."""
    n_rep = HQ // HKV
    expanded = [1, HKV, n_rep, S, D] if axis == 2 else [1, n_rep, HKV, S, D]
    c = float(np.float32(1 / np.sqrt(np.sqrt(D))))
    inits = [
        _init("axes", [axis], np.int64),
        _init("expand", expanded, np.int64),
        _init("heads", [1, HQ, S, D], np.int64),
        _init("flat", [HQ, S, D], np.int64),
        _init("keys_t", [1, HQ, D, S], np.int64),
        _init("c", c),
        _init("zero", 0.0),
    ]
    nodes = []
    for name in ("k", "v"):
        nodes += [
            n("Unsqueeze", [name, "axes"], [f"{name}_u"]),
            n("Expand", [f"{name}_u", "expand"], [f"{name}_e"]),
        ]
    nodes.append(n("Reshape", ["v_e", "heads"], ["v_r"]))
    if spelling == "dynamo":
        nodes += [
            n("Reshape", ["k_e", "flat"], ["k_3"]),
            n("Transpose", ["k_3"], ["k_3t"], perm=[0, 2, 1]),
            n("Reshape", ["k_3t", "keys_t"], ["k_t"]),
        ]
    else:
        nodes += [
            n("Reshape", ["k_e", "heads"], ["k_r"]),
            n("Transpose", ["k_r"], ["k_t"], perm=[0, 1, 3, 2]),
        ]
    nodes += [
        n("Mul", ["q", "c"], ["q_s"]),
        n("Mul", ["k_t", "c"], ["k_s"]),
        n("MatMul", ["q_s", "k_s"], ["scores"]),
        n("Add", ["scores", "mask"], ["masked"]),
        n("Softmax", ["masked"], ["probs"], axis=-1),
        n("IsNaN", ["probs"], ["nan"]),
        n("Where", ["nan", "zero", "probs"], ["guarded"]),
        n("MatMul", ["guarded", "v_r"], ["y"]),
    ]
    inputs = {"q": [1, HQ, S, D], "k": [1, HKV, S, D], "v": [1, HKV, S, D], "mask": [1, 1, S, S]}
    return _model(
        nodes, inits, inputs, {"y": [1, HQ, S, D]}, opset=20 if spelling == "dynamo" else 17
    )


@pytest.mark.parametrize("spelling", ["dynamo", "legacy"])
def test_grouped_query_attention_fuses_and_runs_as_one_kernel(spelling: str) -> None:
    model = _gqa_model(spelling)
    graph = ronnx.load(model)
    counts = graph.op_counts()
    # the importer reads repeat_kv operator by operator (Unsqueeze, Expand, Reshape); the rules
    # make it repeatkv, move the keys' transpose and scale under it and fuse gqa; the NaN guard
    # stays opaque ONNX (a rule reads it: nanzero-guard)
    kept = sorted(n.params["type"] for n in graph.nodes if n.op == "opaque")
    assert counts["expand"] == 2 and "repeatkv" not in counts and kept == ["IsNaN", "Where"]
    attention = load_rules(RULES_DIR / "transformer.rules")  # fused first, then gqa-fuse
    layout = load_rules(RULES_DIR / "layout.rules")  # onnxscript's keys: merged-heads-transpose
    result = optimize(graph, Options(rules=[*DECODER_RULES, *attention, *layout]))
    fused = result.graph.op_counts()
    assert fused["gqa"] == 1 and not {"repeatkv", "expand", "opaque"} & set(fused)
    assert result.verified
    out = ronnx.to_model(result.graph, like=model)
    attention = [node for node in out.graph.node if node.op_type == "Attention"]
    assert len(attention) == 1 and "Expand" not in {node.op_type for node in out.graph.node}
    feeds = _feeds(model)
    (want,) = _ort(model, feeds)
    np.testing.assert_allclose(_ort(out, feeds)[0], want, rtol=1e-4, atol=1e-5)
    # below opset 23 the repeats are spelled out again, and it is still right
    spelled = ronnx.to_model(result.graph, like=model, opset=20)
    assert "Attention" not in {node.op_type for node in spelled.graph.node}
    np.testing.assert_allclose(_ort(spelled, feeds)[0], want, rtol=1e-4, atol=1e-5)


def test_a_repeat_of_whole_head_blocks_is_not_grouped_query_attention() -> None:
    # Unsqueeze at axis 1: [k0, k1, k0, k1], not repeat_kv's [k0, k0, k1, k1]
    model = _gqa_model("legacy", axis=1)
    graph = ronnx.load(model)
    assert "repeatkv" not in graph.op_counts()
    result = optimize(graph, Options(rules=DECODER_RULES, verify=False))
    assert "gqa" not in result.graph.op_counts()
    assert ronnx.verify(model, ronnx.to_model(result.graph, like=model)).ok


def test_gqa_and_repeatkv_kernels_agree_with_repeated_heads() -> None:
    b = GraphBuilder()
    q = b.input([1, HQ, S, D], name="q")
    kt = b.input([1, HKV, D, S], name="kt")
    v = b.input([1, HKV, S, D], name="v")
    m = b.input([1, 1, S, S], name="m")
    fused = b.gqa(q, kt, v, m, 0.5)
    spelled = b.attention(q, b.repeatkv(kt, 2), b.repeatkv(v, 2), m, 0.5)
    feeds = {
        k: RNG.standard_normal(t.shape).astype(np.float32)
        for k, t in {"q": q, "kt": kt, "v": v, "m": m}.items()
    }
    got, want = run(b.build(fused, spelled), feeds)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert np.array_equal(
        run(b.build(b.repeatkv(v, 3)), feeds)[0], np.repeat(feeds["v"], 3, axis=1)
    )
    with pytest.raises(GraphError, match="divide"):
        b.gqa(q, b.input([1, 3, D, S]), b.input([1, 3, S, D]), m, 0.5)


# --- multi-query attention: one key/value head that MatMul broadcasts ------------------------


def _mqa_model(
    spelling: str = "sdpa", q_shape: tuple[int, ...] = (1, HQ, S, D), kv_heads: int = 1
) -> onnx.ModelProto:
    """Multi-query attention as Falcon exports it: q [1, HQ, S, D] against one key/value head
    [1, 1, S, D] that each MatMul broadcasts to every query head (no repeat_kv). ``sdpa``: torch's
    SDPA (q and the transposed keys scaled by sqrt(1/sqrt(D)), an additive mask, the softmax's
    NaN guard); ``eager``: the product scaled after, a finite mask (Where(bool, 0, -1e9));
    ``sdpa-3d``: the keys transposed as a 3-D tensor and viewed [1, 1, D, S] (the dynamo
    export). ``q_shape``, ``kv_heads``: the near misses' operands."""
    c = float(np.float32(1 / np.sqrt(np.sqrt(D))))
    inits = [
        _init("c", c),
        _init("s", float(np.float32(1 / np.sqrt(D)))),
        _init("zero", 0.0),
        _init("big", -1e9),
        _init("keys_3d", [1, S, D], np.int64),
        _init("keys_t", [1, 1, D, S], np.int64),
    ]
    if spelling == "sdpa-3d":
        nodes = [
            n("Reshape", ["k", "keys_3d"], ["k_3"]),
            n("Transpose", ["k_3"], ["k_3t"], perm=[0, 2, 1]),
            n("Reshape", ["k_3t", "keys_t"], ["k_t"]),
        ]
    else:
        nodes = [n("Transpose", ["k"], ["k_t"], perm=[0, 1, 3, 2])]
    if spelling == "eager":
        nodes += [
            n("MatMul", ["q", "k_t"], ["qk"]),
            n("Mul", ["qk", "s"], ["scores"]),
            n("Where", ["keep", "zero", "big"], ["mask"]),
            n("Add", ["scores", "mask"], ["masked"]),
            n("Softmax", ["masked"], ["guarded"], axis=-1),
        ]
    else:
        nodes += [
            n("Mul", ["q", "c"], ["q_s"]),
            n("Mul", ["k_t", "c"], ["k_s"]),
            n("MatMul", ["q_s", "k_s"], ["scores"]),
            n("Add", ["scores", "mask"], ["masked"]),
            n("Softmax", ["masked"], ["probs"], axis=-1),
            n("IsNaN", ["probs"], ["nan"]),
            n("Where", ["nan", "zero", "probs"], ["guarded"]),
        ]
    nodes.append(n("MatMul", ["guarded", "v"], ["y"]))
    kv = [1, kv_heads, S, D]
    inputs = {"q": list(q_shape), "k": kv, "v": kv}
    if spelling != "eager":
        inputs["mask"] = [1, 1, S, S]
    model = _model(nodes, inits, inputs, {"y": [*q_shape[:2], S, D]}, opset=20)
    if spelling == "eager":
        model.graph.input.append(
            helper.make_tensor_value_info("keep", TensorProto.BOOL, [1, 1, S, S])
        )
    return model


def _mqa_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    feeds = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.type.tensor_type.elem_type == TensorProto.BOOL:
            feeds[i.name] = np.tril(np.ones(shape, bool))
        else:
            feeds[i.name] = RNG.standard_normal(shape).astype(np.float32)
    return feeds


def _mqa_optimized(model: onnx.ModelProto) -> Any:
    rules = [*DECODER_RULES, *load_rules(RULES_DIR / "transformer.rules")]
    return optimize(
        ronnx.load(model), Options(rules=[*rules, *load_rules(RULES_DIR / "layout.rules")])
    )


@pytest.mark.parametrize("spelling", ["sdpa", "sdpa-3d", "eager"])
def test_multi_query_attention_broadcast_by_matmul_fuses_as_gqa(spelling: str) -> None:
    model = _mqa_model(spelling)
    graph = ronnx.load(model)
    # ONNX MatMul broadcasts the one head; relsat's matmul does not: the importer keeps both
    # products opaque, and the rule matmul-broadcast-heads reads them as products by repeated heads
    assert sorted(n.params["type"] for n in graph.nodes if n.op == "opaque").count("MatMul") == 2
    result = _mqa_optimized(model)
    fused = result.graph.op_counts()
    assert fused["gqa"] == 1 and not {"repeatkv", "matmul"} & set(fused)
    assert fused["ewmul"] == 0  # both square roots of the scale went into the kernel's
    assert result.verified
    out = ronnx.to_model(result.graph, like=model)
    ops = [node.op_type for node in out.graph.node]
    # the kernel reads the one key/value head itself: nothing repeats it
    assert ops.count("Attention") == 1 and not {"MatMul", "Expand", "Tile"} & set(ops)
    feeds = _mqa_feeds(model)
    (want,) = _ort(model, feeds)
    np.testing.assert_allclose(_ort(out, feeds)[0], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "case",
    [
        "batch-broadcast",  # the keys' batch broadcast too: [2, HQ, S, D] against [1, 1, S, D]
        "left-broadcast",  # the one head on the left: q [1, 1, S, D] against 4 key heads
    ],
)
def test_products_broadcasting_otherwise_stay_as_they_are(case: str) -> None:
    if case == "batch-broadcast":
        model = _mqa_model("sdpa", q_shape=(2, HQ, S, D))
    else:
        model = _mqa_model("sdpa", q_shape=(1, 1, S, D), kv_heads=HQ)
        model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = HQ
    result = _mqa_optimized(model)
    counts = result.graph.op_counts()
    assert not {"gqa", "attention", "repeatkv"} & set(counts)
    assert ronnx.verify(model, ronnx.to_model(result.graph, like=model)).ok


def test_onnxruntime_optimizers_rmsnorm_operators_import() -> None:
    # onnxruntime's optimizers write SimplifiedLayerNormalization in the default domain (where
    # onnxruntime registers it and the ONNX checker knows no such operator), and the residual
    # add fused in as com.microsoft SkipSimplifiedLayerNormalization, its sum read by the next
    gamma = _init("g", RNG.standard_normal(N))
    plain = _model(
        [n("SimplifiedLayerNormalization", ["x", "g"], ["y"], axis=-1, epsilon=1e-6)],
        [gamma],
        {"x": [1, S, N]},
        {"y": [1, S, N]},
        opset=17,
    )
    skip = _model(
        [
            n(
                "SkipSimplifiedLayerNormalization",
                ["x", "skip", "g"],
                ["y", "", "", "sum"],
                domain="com.microsoft",
                epsilon=1e-6,
            )
        ],
        [gamma],
        {"x": [1, S, N], "skip": [1, S, N]},
        {"y": [1, S, N], "sum": [1, S, N]},
        opset=17,
        contrib=True,
    )
    for model, ops in ((plain, {"rmsnorm": 1}), (skip, {"rmsnorm": 1, "ewadd": 1})):
        graph = ronnx.load(model)
        assert {k: v for k, v in graph.op_counts().items() if k not in ("input", "weight")} == ops
        feeds = _feeds(model)
        out = ronnx.to_model(graph, like=model)
        for got, want in zip(_ort(out, feeds), _ort(model, feeds), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_product_by_one_is_its_factor() -> None:
    """transformers multiplies rotary tables computed at run time by ``attention_scaling``, 1
    for Llama: ``x * 1`` is ``x`` by the rule mul-by-one (bit for bit the same values), so the
    tables' layout for the fused kernel sees the cosine itself; a product by another scalar
    stays."""
    nodes = [
        n("Cos", ["angles"], ["cos"]),
        n("Mul", ["cos", "one"], ["y"]),
        n("Mul", ["cos", "half"], ["z"]),
    ]
    inits = [_init("one", 1.0), _init("half", 0.5)]
    shape = [1, 1, S, D // 2]
    model = _model(nodes, inits, {"angles": shape}, {"y": shape, "z": shape})
    graph = ronnx.load(model)
    assert graph.op_counts()["ewmul"] == 2  # the importer reads one operator at a time
    result = optimize(graph, Options(rules=DECODER_RULES))
    assert result.graph.op_counts()["ewmul"] == 1 and result.verified
    assert ronnx.verify(model, ronnx.to_model(result.graph, like=model)).ok
