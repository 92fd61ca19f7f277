"""Scaled dot-product attention as one op: kernel and shape check, the engine's four-child
nodes, import of torch's SDPA spelling and of ONNX Attention, the rules of
rules/transformer.rules found by saturation, export as ONNX Attention (opset 23) that
onnxruntime runs, and near misses left alone."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from relsat import GraphBuilder, Options, optimize
from relsat import onnx as ronnx
from relsat.cost.analytic import AnalyticModel
from relsat.cost.model import OpSignature
from relsat.cost.ort import unit_graph
from relsat.engine.compile import compile_rules
from relsat.engine.egraph import EGraph
from relsat.engine.explore import Limits, explore
from relsat.errors import GraphError
from relsat.graph.execute import run
from relsat.graph.ops import f32_bits
from relsat.onnx.exporter import spelled_out
from relsat.rewrite.rulefile import RULES_DIR, load_rules

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(0)
TRANSFORMER_RULES = load_rules(RULES_DIR / "transformer.rules")
B, H, S, D = 1, 4, 16, 8
HIDDEN = H * D
ROOT_SCALE = float(np.float32(math.sqrt(1 / math.sqrt(D))))  # torch multiplies q and kt by it


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# --- operator -------------------------------------------------------------------------------


def test_kernel_is_the_guarded_softmax_of_scaled_scores() -> None:
    b = GraphBuilder()
    q, kt = b.input([B, H, S, D], name="q"), b.input([B, H, D, S], name="kt")
    v, mask = b.input([B, H, S, D], name="v"), b.input([1, 1, S, S], name="mask")
    graph = b.build(b.attention(q, kt, v, mask, 0.125), b.nanzero(mask))
    values = {k: RNG.standard_normal(graph.tensor(k).shape) for k in ("q", "kt", "v", "mask")}
    values["mask"][..., 3, :] = -np.inf  # query row 3 masked entirely
    values["mask"][..., 5, 2] = np.nan
    out, cleaned = run(graph, values)
    scores = values["q"] @ values["kt"] * 0.125 + values["mask"]
    want = _softmax(scores[..., :3, :]) @ values["v"][..., :, :]
    np.testing.assert_allclose(out[..., :3, :], want, rtol=1e-12)
    assert not out[..., 3, :].any()  # a row masked entirely gives zeros, as onnxruntime's
    assert not out[..., 5, :].any() and not np.isnan(cleaned).any()


def test_shape_check_refuses_what_is_not_attention() -> None:
    b = GraphBuilder()
    q, kt, v = b.input([2, H, S, D]), b.input([2, H, D, S]), b.input([2, H, S, 5])
    assert b.attention(q, kt, v, b.input([2, 1, 1, S]), 0.5).shape == (2, H, S, 5)
    assert b.attention(q, kt, v, b.scalar(0.0), 0.5).shape == (2, H, S, 5)
    bad = [
        (q, b.input([2, H, S, D]), v, b.scalar(0.0)),  # keys not transposed
        (q, kt, b.input([1, H, S, 5]), b.scalar(0.0)),  # values of another batch
        (q, kt, v, b.input([3, 1, S, S])),  # a mask that broadcasts the scores up
        (q, kt, v, b.input([1, 2, H, S, S])),  # a mask of higher rank
        (b.input([H, S, D]), b.input([H, D, S]), b.input([H, S, D]), b.scalar(0.0)),  # 3-D
    ]
    for args in bad:
        with pytest.raises(GraphError):
            b.attention(*args, 0.5)
    with pytest.raises(GraphError):
        b.attention(q, kt, v, b.scalar(0.0), 0.0)  # the scale must be > 0


def test_engine_matches_and_builds_four_child_nodes() -> None:
    program = compile_rules(TRANSFORMER_RULES)
    names = program.names
    pnode, tnode = program.pnode.to_pylist(), program.tnode.to_pylist()
    unfuse = names.index("attention-unfuse")
    root = next(r for r in pnode if r["rule"] == unfuse and r["is_root"])
    assert root["op"] == "attention" and root["arity"] == 4 and root["x3"] >= 0
    fuse = names.index("attention-masked-fuse")
    built = next(t for t in tnode if t["rule"] == fuse and t["op"] == "attention")
    assert built["k3"] == 1 and built["p0"] == f32_bits(1.0)


def test_prices_see_one_kernel() -> None:
    model = AnalyticModel("cpu")
    qs, kts, ss = (B, H, 128, 64), (B, H, 64, 128), (B, H, 128, 128)
    sig = OpSignature("attention", (f32_bits(1.0),), "", (qs, kts, qs, (1, 1, 128, 128)), qs)
    fused = model.cost(sig)
    pieces = [
        OpSignature("matmul", (0,), "", (qs, kts), ss),
        OpSignature("ewadd", (), "", (ss, (1, 1, 128, 128)), ss),
        OpSignature("softmax", (), "", (ss,), ss),
        OpSignature("nanzero", (), "", (ss,), ss),
        OpSignature("matmul", (0,), "", (ss, qs), qs),
    ]
    assert 0 < fused < sum(model.cost(p) for p in pieces)
    unit = unit_graph(sig)  # what the onnxruntime cost model exports and times
    assert unit.nodes[-1].op == "attention"
    written = {n.op_type for n in ronnx.to_model(unit).graph.node}
    # the keys read from the transpose they come from: the kernel alone is timed
    assert "Attention" in written and "Transpose" not in written


def test_the_fused_kernel_reads_the_keys_the_transpose_came_from() -> None:
    """``kt`` as exporters write it, ``k.transpose(-1, -2)``, times torch SDPA's sqrt(scale) or
    not: ONNX Attention reads ``k`` (scaled, where it was), and neither the transpose nor one
    back to ``k`` is written; keys computed otherwise are transposed back."""
    b = GraphBuilder()
    q, k, v = (b.input([B, H, S, D], name=x) for x in "qkv")
    kt = b.transpose(k, [0, 1, 3, 2])
    outs = [
        b.attention(q, kt, v, b.scalar(0.0), 1.0),
        b.attention(q, b.mul(kt, b.scalar(0.5)), v, b.scalar(0.0), 1.0),
    ]
    graph = b.build(*outs)
    written = ronnx.to_model(graph)
    assert "Transpose" not in {n.op_type for n in written.graph.node}
    feeds = {x: RNG.standard_normal((B, H, S, D)).astype(np.float32) for x in "qkv"}
    session = ort.InferenceSession(written.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, want in zip(session.run(None, feeds), run(graph, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    b = GraphBuilder()  # keys computed otherwise: transposed back
    q, kt_in, v = (
        b.input(shape, name=x)
        for x, shape in zip("qkv", [[B, H, S, D], [B, H, D, S], [B, H, S, D]], strict=True)
    )
    graph = b.build(b.attention(q, b.neg(kt_in), v, b.scalar(0.0), 1.0))
    assert "Transpose" in {n.op_type for n in ronnx.to_model(graph).graph.node}


def test_keys_transposed_from_another_layout_take_one_transpose() -> None:
    """``kt`` a transpose of the heads layout ``[B, S, H, D]`` (torch's dynamo export of ViT:
    ``k.permute(0, 2, 1, 3).transpose(-1, -2)``, which the rules compose): ONNX Attention reads
    the keys through one Transpose, not the composed one and a second back."""
    b = GraphBuilder()
    q, v = (b.input([B, H, S, D], name=x) for x in "qv")
    k = b.input([B, S, H, D], name="k")
    graph = b.build(b.attention(q, b.transpose(k, [0, 2, 3, 1]), v, b.scalar(0.0), 0.5))
    written = ronnx.to_model(graph)
    transposes = [n for n in written.graph.node if n.op_type == "Transpose"]
    assert [list(t.attribute[0].ints) for t in transposes] == [[0, 2, 1, 3]]
    feeds = {x: RNG.standard_normal((B, H, S, D)).astype(np.float32) for x in "qv"}
    feeds["k"] = RNG.standard_normal((B, S, H, D)).astype(np.float32)
    session = ort.InferenceSession(written.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, want in zip(session.run(None, feeds), run(graph, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# --- ONNX: torch's spelling -----------------------------------------------------------------


def _sdpa_model(
    *,
    softmax_axis: int = -1,
    guard: bool = True,
    zero: float = 0.0,
    mask: bool = True,
) -> onnx.ModelProto:
    """One attention block as torch.onnx.export writes scaled_dot_product_attention (opset 17):
    projections, head split, q and kt each scaled by sqrt(1/sqrt(D)), the additive mask, softmax,
    Where(IsNaN(p), 0, p), the product with v, heads merged."""
    n = helper.make_node
    nodes = []
    for x in "qkv":
        perm = [0, 2, 3, 1] if x == "k" else [0, 2, 1, 3]
        nodes += [
            n("MatMul", ["x", f"w{x}"], [f"{x}_proj"]),
            n("Reshape", [f"{x}_proj", "heads"], [f"{x}_split"]),
            n("Transpose", [f"{x}_split"], [f"{x}_t"], perm=perm),
        ]
    nodes += [
        n("Mul", ["q_t", "root_scale"], ["q_s"]),
        n("Mul", ["k_t", "root_scale"], ["k_s"]),
        n("MatMul", ["q_s", "k_s"], ["scores"]),
    ]
    probs_in = "scores"
    if mask:
        nodes.append(n("Add", ["scores", "mask"], ["masked"]))
        probs_in = "masked"
    nodes.append(n("Softmax", [probs_in], ["probs"], axis=softmax_axis))
    probs = "probs"
    if guard:
        nodes += [
            n("IsNaN", ["probs"], ["nan"]),
            n("Where", ["nan", "zero", "probs"], ["guarded"]),
        ]
        probs = "guarded"
    nodes += [
        n("MatMul", [probs, "v_t"], ["ctx"]),
        n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx_t", "merged"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(RNG.standard_normal((HIDDEN, HIDDEN)).astype(np.float32), f"w{x}")
        for x in "qkv"
    ]
    inits += [
        numpy_helper.from_array(np.array([B, S, H, D], np.int64), "heads"),
        numpy_helper.from_array(np.array([B, S, HIDDEN], np.int64), "merged"),
        numpy_helper.from_array(np.array(ROOT_SCALE, np.float32), "root_scale"),
        numpy_helper.from_array(np.array([zero], np.float32), "zero"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, HIDDEN])]
    if mask:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, S, S]))
    graph = helper.make_graph(
        nodes,
        "sdpa",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, HIDDEN])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    feeds = {"x": RNG.standard_normal((B, S, HIDDEN)).astype(np.float32)}
    if any(i.name == "mask" for i in model.graph.input):
        m = np.zeros((1, 1, S, S), np.float32)
        m[..., S - 4 :] = -np.inf  # the last keys padded
        m[..., 2, :] = -np.inf  # and one query row masked entirely: torch's guard gives 0
        feeds["mask"] = m
    return feeds


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, feeds)[0])


@pytest.mark.parametrize("mask", [True, False], ids=["masked", "unmasked"])
def test_torch_spelling_fuses_and_runs_as_onnx_attention(mask: bool) -> None:
    model = _sdpa_model(mask=mask, guard=mask)
    graph = ronnx.load(model)
    counts = graph.op_counts()
    kept = sorted(n.params["type"] for n in graph.nodes if n.op == "opaque")
    assert counts["softmax"] == 1 and "nanzero" not in counts  # the importer reads no idiom:
    assert kept == (["IsNaN", "Where"] if mask else [])  # the NaN guard is a rule's (nanzero-guard)
    result = optimize(graph, Options(rules=TRANSFORMER_RULES))  # analytic prices: no timing
    fused = result.graph.op_counts()
    assert fused["attention"] == 1
    assert not {"softmax", "nanzero", "opaque"} & set(fused)
    assert result.verified
    out = ronnx.to_model(result.graph, like=model)
    assert {o.domain: o.version for o in out.opset_import}[""] == 23
    assert "Attention" in {n.op_type for n in out.graph.node}
    feeds = _feeds(model)
    want, got = _ort(model, feeds), _ort(out, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)  # masked row included
    back = ronnx.load(out).op_counts()  # and ONNX Attention imports as the op
    assert back["attention"] == 1 and "opaque" not in back


@pytest.mark.parametrize("settled", [True, False], ids=["all-true", "mixed"])
def test_a_mask_settled_to_zero_is_dropped(settled: bool) -> None:
    """torch's dynamo export of ViT masks nothing with ``Where(c, 0, -inf)``, ``c`` a constant
    all true: the mask is 0 everywhere (a fact of values), and the kernel runs without it
    (attention-zero-mask). A condition not all true keeps its mask."""
    model = _sdpa_model()
    graph_ = model.graph
    graph_.input.pop()  # the mask is computed from constants
    cond = np.full((1, 1, S, S), True)
    if not settled:
        cond[..., -1] = False
    graph_.initializer.extend(
        [
            numpy_helper.from_array(cond, "cond"),
            numpy_helper.from_array(np.array(0.0, np.float32), "nought"),
            numpy_helper.from_array(np.array(-np.inf, np.float32), "fill"),
        ]
    )
    graph_.node.insert(0, helper.make_node("Where", ["cond", "nought", "fill"], ["mask"]))
    result = optimize(ronnx.load(model), Options(rules=TRANSFORMER_RULES))
    assert result.graph.op_counts()["attention"] == 1  # (Where has no NumPy kernel: ORT below)
    out = ronnx.to_model(result.graph, like=model)
    (kernel,) = [n for n in out.graph.node if n.op_type == "Attention"]
    assert (len(kernel.input) == 3) == settled
    assert ("Where" in {n.op_type for n in out.graph.node}) != settled
    feeds = {"x": RNG.standard_normal((B, S, HIDDEN)).astype(np.float32)}
    np.testing.assert_allclose(_ort(out, feeds), _ort(model, feeds), rtol=1e-4, atol=1e-5)


def test_a_row_masked_with_the_lowest_float_matches_after_fusion() -> None:
    """Hugging Face fills masks with float32's lowest, which onnxruntime's Attention reads as
    -inf: a fully masked row must still give what the unfused softmax gives (the mean of v)."""
    model = _sdpa_model(mask=True, guard=True)
    result = optimize(ronnx.load(model), Options(rules=TRANSFORMER_RULES))
    out = ronnx.to_model(result.graph, like=model)
    assert "Attention" in {n.op_type for n in out.graph.node}
    feeds = _feeds(model)
    lowest = np.finfo(np.float32).min
    feeds["mask"] = np.where(np.isinf(feeds["mask"]), lowest, feeds["mask"]).astype(np.float32)
    assert (feeds["mask"][..., 2, :] == lowest).all()  # one query row masked entirely
    want, got = _ort(model, feeds), _ort(out, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_near_misses_stay_unfused() -> None:
    cases = {
        "softmax over another axis": _sdpa_model(softmax_axis=2),
        "masked softmax without the NaN guard": _sdpa_model(guard=False),
        "a guard that writes 1, not 0": _sdpa_model(zero=1.0),
    }
    for why, model in cases.items():
        graph = ronnx.load(model)
        result = optimize(graph, Options(rules=TRANSFORMER_RULES, verify=False))
        assert "attention" not in result.graph.op_counts(), why
        assert ronnx.verify(model, ronnx.to_model(result.graph, like=model)).ok, why
    # a mask that broadcasts the scores up to the values' batch: well-typed, not attention
    b = GraphBuilder()
    q, kt = b.input([1, H, S, D], name="q"), b.input([1, H, D, S], name="kt")
    v, m = b.input([2, H, S, D], name="v"), b.input([2, H, S, S], name="m")
    y = b.matmul(b.nanzero(b.softmax(b.add(b.matmul(q, kt), m))), v)
    result = optimize(b.build(y), Options(rules=TRANSFORMER_RULES))
    assert "attention" not in result.graph.op_counts() and result.verified


def test_spelled_out_below_opset_23_and_for_opaque_nodes_that_change_meaning() -> None:
    b = GraphBuilder()
    q, kt = b.input([B, H, S, D], name="q"), b.input([B, H, D, S], name="kt")
    v, mask = b.input([B, H, S, D], name="v"), b.input([1, 1, S, S], name="mask")
    graph = b.build(b.attention(q, kt, v, mask, 0.25))
    feeds = {
        k: RNG.standard_normal(graph.tensor(k).shape).astype(np.float32)
        for k in ["q", "kt", "v", "mask"]
    }
    (want,) = run(graph, feeds)
    for opset in (17, 13):
        out = ronnx.to_model(graph, opset=opset)
        types = {n.op_type for n in out.graph.node}
        assert "Attention" not in types and {"Softmax", "IsNaN", "Where"} <= types
        np.testing.assert_allclose(_ort(out, feeds), want, rtol=1e-4, atol=1e-5)
    # an opaque ReduceMax imported at opset 17 (axes an attribute; an input from 18 on) keeps
    # the model at 17, so attention is spelled out there
    reduce = helper.make_node("ReduceMax", ["x"], ["r"], axes=[-1], keepdims=1)
    opaque = helper.make_graph(
        [reduce],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, H, S, S])],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, [B, H, S, 1])],
    )
    imported = ronnx.load(helper.make_model(opaque, opset_imports=[helper.make_opsetid("", 17)]))
    b = GraphBuilder()
    x = b.input([B, H, S, S], name="x")
    attrs = json.loads(imported.nodes[-1].params["attrs"])
    (r,) = b.opaque("ReduceMax", [x], [(B, H, S, 1)], attrs)
    qq, kk, vv = b.input([B, H, S, D]), b.input([B, H, D, S]), b.input([B, H, S, D])
    both = ronnx.to_model(b.build(r, b.attention(qq, kk, vv, b.scalar(0.0), 0.25)))
    assert {o.domain: o.version for o in both.opset_import}[""] == 17
    assert "Attention" not in {n.op_type for n in both.graph.node}


def test_spelled_out_attention_adds_no_scale_of_one_and_no_guard_without_a_mask() -> None:
    """Below opset 23 attention is written as the softmax it stands for, and no more: a Mul only
    for a scale other than 1, the NaN guard only for a mask that may hold -inf."""
    b = GraphBuilder()
    q, kt, v = b.input([B, H, S, D]), b.input([B, H, D, S]), b.input([B, H, S, D])
    for scale, mul in ((1.0, False), (0.25, True)):
        graph = b.build(b.attention(q, kt, v, b.scalar(0.0), scale))
        types = [n.op_type for n in ronnx.to_model(graph, opset=17).graph.node]
        assert ("Mul" in types) == mul
        assert "Softmax" in types and not {"IsNaN", "Where"} & set(types)


def _with_opaque_reduce(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (opset 17) with an opaque ReduceMax of x beside it, its axes an attribute (an
    input from opset 18 on): the model cannot be written at opset 23."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.node.append(helper.make_node("ReduceMax", ["x"], ["r"], axes=[-1], keepdims=1))
    out.graph.output.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [B, S, 1]))
    return out


def test_attention_that_would_be_spelled_out_is_not_chosen() -> None:
    """A fused op the exporter must spell out (the model's opaque nodes keep it below the
    kernel's opset) is priced as the kernel it is not written as: extraction is never offered
    it, and the model comes back in its own spelling."""
    plain = _sdpa_model(mask=True, guard=True)
    model = _with_opaque_reduce(plain)
    assert spelled_out(ronnx.load(model)) >= {"attention", "rmsnorm"}
    assert not spelled_out(ronnx.load(plain))
    options = Options(rules=TRANSFORMER_RULES, cost_model="analytic", timing=None)
    assert optimize(plain, options).graph.op_counts()["attention"] == 1
    result = optimize(model, options)
    assert "attention" not in result.graph.op_counts()
    out = result.model
    assert {o.domain: o.version for o in out.opset_import}[""] == 17
    feeds = _feeds(model)
    np.testing.assert_allclose(_ort(out, feeds), _ort(model, feeds), rtol=1e-4, atol=1e-5)


def test_onnx_attention_imports_with_strict_guards() -> None:
    n = helper.make_node
    nodes = [
        n("Attention", ["q", "k", "v", "mask"], ["y"], scale=0.25),
        n("Attention", ["q", "k", "v"], ["y_plain"]),
        n("Attention", ["q", "k", "v"], ["y_causal"], is_causal=1),
    ]
    shape = [B, H, S, D]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape) for x in "qkv"]
        + [helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, S, S])],
        [
            helper.make_tensor_value_info(y, TensorProto.FLOAT, shape)
            for y in ("y", "y_plain", "y_causal")
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    imported = ronnx.load(model)
    counts = imported.op_counts()
    assert counts["attention"] == 2 and counts["opaque"] == 1  # the causal one stays opaque
    scales = sorted(round(n.params["scale"], 6) for n in imported.nodes if n.op == "attention")
    assert scales == sorted([round(1 / math.sqrt(D), 6), 0.25])
    assert ronnx.verify(model, ronnx.to_model(imported, like=model)).ok


def _guard_model(fill: float, test: str, other: bool) -> onnx.ModelProto:
    """x -> Where(test(x), fill, x or y): torch's NaN guard (IsNaN, 0, x) or a near miss."""
    n = helper.make_node
    nodes = [
        n(test, ["x"], ["t"]),
        n("Where", ["t", "fill", "y" if other else "x"], ["out"]),
    ]
    inputs = [helper.make_tensor_value_info(v, TensorProto.FLOAT, [2, 3]) for v in "xy"]
    graph = helper.make_graph(
        nodes,
        "guard",
        inputs,
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.array(fill, np.float32), "fill")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize(
    ("fill", "test", "other", "fused"),
    [
        (0.0, "IsNaN", False, True),  # Where(IsNaN(x), 0, x): the guard
        (0.0, "IsNaN", True, False),  # Where(IsNaN(x), 0, y)
        (1.0, "IsNaN", False, False),  # Where(IsNaN(x), 1, x)
        (0.0, "IsInf", False, False),  # Where(IsInf(x), 0, x)
    ],
    ids=["guard", "another-tensor", "fill-1", "isinf"],
)
def test_the_nan_guard_is_read_by_a_rule_and_its_near_misses_are_not(
    fill: float, test: str, other: bool, fused: bool
) -> None:
    graph = ronnx.load(_guard_model(fill, test, other))
    assert {n.params["type"] for n in graph.nodes if n.op == "opaque"} == {test, "Where"}
    eg = EGraph.from_graph(graph)
    explore(eg, TRANSFORMER_RULES, limits=Limits(iterations=3))
    assert eg.db.scalar("SELECT count(*) FROM enode WHERE op = 'nanzero'") == int(fused)
