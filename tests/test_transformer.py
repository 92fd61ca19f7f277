"""Transformer operators: LayerNorm, Softmax, GELU and onnxruntime's fused forms, end to end.

Builder and kernels, ONNX import (strict spelling guards) and export (standard ops, com.microsoft
contrib ops that onnxruntime runs), the rules of rules/transformer.rules found by saturation, and
near misses left alone.
"""

from __future__ import annotations

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
from relsat.engine.egraph import encode_node
from relsat.errors import GraphError
from relsat.graph.execute import run
from relsat.graph.ops import f32_bits
from relsat.rewrite.rulefile import RULES_DIR, load_rules

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(0)
TRANSFORMER_RULES = load_rules(RULES_DIR / "transformer.rules")


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x)


# --- operators ------------------------------------------------------------------------------


def test_kernels_match_their_definitions() -> None:
    b = GraphBuilder()
    x, s = b.input([2, 3, 8], name="x"), b.input([2, 3, 8], name="s")
    g, be = b.weight([8], name="g"), b.weight([8], name="be")
    outs = [
        b.layernorm(x, g, be, 1e-5),
        b.skiplayernorm(x, s, b.concat(0, [g, be]), 1e-5),
        b.softmax(x),
        b.gelu(x),
        b.gelu(x, "tanh"),
        b.biasgelu(x, g),
        b.reducemean(x),
    ]
    values = {"x": RNG.standard_normal((2, 3, 8)), "s": RNG.standard_normal((2, 3, 8))}
    values |= {"g": RNG.uniform(0.5, 1.5, 8), "be": RNG.standard_normal(8)}
    ln, sln, sm, gelu, fast, bias_gelu, mean = run(b.build(*outs), values)
    xv, sv = values["x"], values["s"]

    def layernorm(v: np.ndarray) -> np.ndarray:
        m, var = v.mean(-1, keepdims=True), v.var(-1, keepdims=True)
        return (v - m) / np.sqrt(var + 1e-5) * values["g"] + values["be"]

    np.testing.assert_allclose(ln, layernorm(xv), rtol=1e-9)
    np.testing.assert_allclose(sln, layernorm(xv + sv), rtol=1e-9)
    np.testing.assert_allclose(sm.sum(-1), 1.0)
    np.testing.assert_allclose(gelu, xv * 0.5 * (1 + _erf(xv / math.sqrt(2))))
    inner = math.sqrt(2 / math.pi) * (xv + 0.044715 * xv**3)
    np.testing.assert_allclose(fast, 0.5 * xv * (1 + np.tanh(inner)))
    np.testing.assert_allclose(bias_gelu, run(b.build(b.gelu(b.add(x, g))), values)[0])
    assert mean.shape == (2, 3, 1)


def test_shape_checks_refuse_near_misses() -> None:
    b = GraphBuilder()
    x = b.input([2, 3, 8])
    with pytest.raises(GraphError, match="scale must have shape \\[8\\]"):
        b.layernorm(x, b.weight([1, 8]), b.weight([8]))
    with pytest.raises(GraphError, match="skip"):
        b.skiplayernorm(x, b.input([1, 3, 8]), b.weight([16]))  # a broadcast residual
    y = b.input([2, 2, 3, 8])  # onnxruntime's SkipLayerNormalization runs rank 2 or 3 only
    with pytest.raises(GraphError, match="rank 2 or 3"):
        b.skiplayernorm(y, y, b.weight([16]))
    with pytest.raises(GraphError, match="bias must have shape"):
        b.biasgelu(x, b.weight([3, 8]))
    with pytest.raises(GraphError, match="epsilon"):
        b.add_node("layernorm", [x, b.weight([8]), b.weight([8])], {"epsilon": 1e-7 + 1e-17})


def test_float_parameters_are_float32_bits_in_the_egraph() -> None:
    b = GraphBuilder()
    x = b.input([2, 8])
    half = b.scalar(0.5)
    ln = b.layernorm(x, b.weight([8]), b.weight([8]), 1e-12)
    g = b.build(ln, b.mul(x, half))
    assert encode_node(g.node(half.ref))[1][0] == f32_bits(0.5) == 1056964608
    assert encode_node(g.node(ln.ref))[1][0] == f32_bits(1e-12)
    rule = TRANSFORMER_RULES["gelu-erf-fuse"]
    assert "(scalar 1.4142135)" in str(rule.lhs[0])  # written and printed as a float


def test_costs_price_every_transformer_op() -> None:
    model = AnalyticModel("cpu")
    shape = (1, 128, 256)
    for op, ins, params in [
        ("layernorm", (shape, (256,), (256,)), (f32_bits(1e-5),)),
        ("skiplayernorm", (shape, shape, (512,)), (f32_bits(1e-5),)),
        ("gelu", (shape,), ()),
        ("biasgelu", (shape, (256,)), ()),
        ("softmax", (shape,), ()),
        ("ewdiv", (shape, ()), ()),
    ]:
        sig = OpSignature(op, params, "", ins, shape)
        assert model.cost(sig) > 0
        assert unit_graph(sig).nodes[-1].op == op  # what the onnxruntime model times
    fused = model.cost(OpSignature("gelu", (), "", (shape,), shape))
    pieces = sum(
        model.cost(OpSignature(op, (), "", ins, shape))
        for op, ins in [("ewdiv", (shape, ())), ("erf", (shape,)), ("ewadd", (shape, ()))]
    )
    assert fused < pieces


# --- ONNX -----------------------------------------------------------------------------------


def _model(
    nodes: list, inputs: dict, outputs: dict, inits: list, opset: int = 17
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()],
        inits,
    )
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _const(name: str, value: object, shape: tuple[int, ...] = ()) -> onnx.TensorProto:
    return numpy_helper.from_array(np.full(shape, value, dtype=np.float32), name)


def _vec(name: str, n: int) -> onnx.TensorProto:
    return numpy_helper.from_array(RNG.standard_normal(n).astype(np.float32), name)


def test_import_maps_transformer_ops_with_strict_guards() -> None:
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1, epsilon=1e-12),
        helper.make_node("LayerNormalization", ["x", "g2", "b"], ["ln_axis1"], axis=1),
        helper.make_node("Softmax", ["ln"], ["sm"], axis=-1),
        helper.make_node("Softmax", ["ln"], ["sm1"], axis=1),
        helper.make_node("ReduceMean", ["sm"], ["rm"], axes=[-1], keepdims=1),
        helper.make_node("ReduceMean", ["sm"], ["rm0"], axes=[-1], keepdims=0),
        helper.make_node("Mul", ["half", "sm1"], ["m"]),
        helper.make_node("Gelu", ["m"], ["gelu"], domain="com.microsoft"),
        helper.make_node("Gelu", ["ln_axis1"], ["gelu2"], domain="com.microsoft"),
    ]
    inits = [_vec("g", 8), _vec("b", 8), _const("g2", 1.0, (3, 8)), _const("half", 0.5)]
    outputs = {"rm": [2, 3, 1], "rm0": [2, 3], "gelu": [2, 3, 8], "gelu2": [2, 3, 8]}
    model = _model(nodes, {"x": [2, 3, 8]}, outputs, inits)
    graph = ronnx.load(model)
    counts = graph.op_counts()
    opaque = sorted(n.params["type"] for n in graph.nodes if n.op == "opaque")
    # the last-axis forms map; another axis, keepdims=0, a [3, 8] scale stay opaque
    assert opaque == ["LayerNormalization", "ReduceMean", "Softmax"]
    assert counts["layernorm"] == counts["softmax"] == counts["reducemean"] == 1
    assert counts["gelu"] == 2
    mul = next(n for n in graph.nodes if n.op == "ewmul")  # Mul(0.5, x): the scalar second
    assert graph.node(mul.inputs[1]).op == "scalar"
    assert ronnx.verify(model, ronnx.to_model(graph, like=model)).ok


def test_export_declares_contrib_domain_and_runs_in_onnxruntime() -> None:
    b = GraphBuilder()
    x, s = b.input([1, 16, 32], name="x"), b.input([1, 16, 32], name="s")
    g, be = b.weight([32]), b.weight([32])
    outs = [
        b.layernorm(x, g, be, 1e-12),
        b.skiplayernorm(x, s, b.concat(0, [g, be]), 1e-5),
        b.gelu(x),
        b.gelu(x, "tanh"),
        b.biasgelu(x, g),
        b.softmax(x),
        b.div(b.sub(x, b.scalar(0.5)), b.sqrt(b.pow(s, b.scalar(2.0)))),
    ]
    graph = b.build(*outs)
    feeds = {k: RNG.standard_normal((1, 16, 32)).astype(np.float32) for k in ("x", "s")}
    want = run(graph, feeds)
    for opset in (17, 13):  # below 17, LayerNormalization is spelled out
        model = ronnx.to_model(graph, opset=opset)
        domains = {o.domain: o.version for o in model.opset_import}
        assert domains["com.microsoft"] == 1
        types = {n.op_type for n in model.graph.node}
        assert {"Gelu", "FastGelu", "BiasGelu", "SkipLayerNormalization"} <= types
        assert ("LayerNormalization" in types) == (opset >= 17)
        session = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        for got, expected in zip(session.run(None, feeds), want, strict=True):
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
        assert ronnx.load(model).op_counts()["skiplayernorm"] == 1  # and back in


# --- saturation -----------------------------------------------------------------------------


def test_skip_layernorm_whose_sum_is_read_imports_as_add_and_layernorm() -> None:
    """onnxruntime's optimizer writes a pre-norm model's residual sum as SkipLayerNormalization's
    fourth output; relsat reads it as the add and a layernorm (and the sum), with the bias input
    added first."""
    shape = (1, 8, 16)
    sln = helper.make_node(
        "SkipLayerNormalization",
        ["x", "s", "g", "b", "bias"],
        ["y", "", "", "sum"],
        domain="com.microsoft",
        epsilon=1e-5,
    )
    tail = helper.make_node("Add", ["sum", "y"], ["out"])
    model = _model(
        [sln, tail],
        {"x": shape, "s": shape},
        {"out": shape},
        [_vec("g", 16), _vec("b", 16), _vec("bias", 16)],
    )
    model.graph.value_info.extend(  # as onnxruntime's symbolic shape inference writes them
        helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("y", "sum")
    )
    graph = ronnx.load(model)
    counts = graph.op_counts()
    assert counts["layernorm"] == 1 and counts["ewadd"] == 3 and not counts["opaque"]
    assert ronnx.verify(model, ronnx.to_model(graph, like=model)).ok


def test_skip_layernorm_of_another_rank_stays_opaque() -> None:
    """onnxruntime runs SkipLayerNormalization on 2-D and 3-D input only (a 4-D one fails when
    it runs): the op refuses other ranks, so such a node is kept as it is."""
    shape = (1, 2, 4, 16)
    sln = helper.make_node(
        "SkipLayerNormalization", ["x", "s", "g", "b"], ["y"], domain="com.microsoft"
    )
    model = _model([sln], {"x": shape, "s": shape}, {"y": shape}, [_vec("g", 16), _vec("b", 16)])
    counts = ronnx.load(model).op_counts()
    assert counts["opaque"] == 1 and not counts["skiplayernorm"]


def _gelu_torch(b: GraphBuilder, x: object) -> object:
    inner = b.add(b.erf(b.div(x, b.scalar(math.sqrt(2)))), b.scalar(1.0))
    return b.mul(b.mul(x, inner), b.scalar(0.5))


def _layernorm_spelled(b: GraphBuilder, x: object, g: object, be: object, eps: object) -> object:
    d = b.sub(x, b.reducemean(x))
    var = b.reducemean(b.pow(d, b.scalar(2.0)))
    return b.add(b.mul(b.div(d, b.sqrt(b.add(var, eps))), g), be)


def test_saturation_finds_the_fused_forms() -> None:
    b = GraphBuilder()
    x, r = b.input([1, 16, 32], name="x"), b.input([1, 16, 32], name="r")
    h = _gelu_torch(b, x)
    ln = _layernorm_spelled(b, b.add(h, r), b.weight([32]), b.weight([32]), b.scalar(1e-5))
    result = optimize(b.build(ln), Options(rules=TRANSFORMER_RULES))
    counts = result.graph.op_counts()
    assert counts["gelu"] == 1 and counts["skiplayernorm"] == 1
    assert not {"erf", "ewdiv", "reducemean", "ewpow"} & set(counts)
    assert result.verified


def test_near_misses_are_left_alone() -> None:
    b = GraphBuilder()
    x = b.input([1, 16, 32], name="x")
    # epsilon as a tensor, a value no epsilon guard allows (0.5), a GELU with the wrong constant
    as_tensor = _layernorm_spelled(b, x, b.weight([32]), b.weight([32]), b.weight([1]))
    odd_eps = _layernorm_spelled(b, x, b.weight([32]), b.weight([32]), b.scalar(0.5))
    inner = b.add(b.erf(b.div(x, b.scalar(1.5))), b.scalar(1.0))
    wrong = b.mul(b.mul(x, inner), b.scalar(0.5))
    # a residual of another shape: layernorm fuses, the skip form does not
    r = b.input([1, 1, 32], name="r")
    scale, shift = b.weight([32]), b.weight([32])
    broadcast = _layernorm_spelled(b, b.add(x, r), scale, shift, b.scalar(1e-5))
    result = optimize(
        b.build(as_tensor, odd_eps, wrong, broadcast), Options(rules=TRANSFORMER_RULES)
    )
    counts = result.graph.op_counts()
    assert counts["layernorm"] == 1 and "skiplayernorm" not in counts and "gelu" not in counts
    assert result.verified


def test_torch_exports_of_both_spellings_fuse(tmp_path: object) -> None:
    torch = pytest.importorskip("torch")
    from pathlib import Path

    class Block(torch.nn.Module):
        def __init__(self, approximate: str) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(32, 32)
            self.ln = torch.nn.LayerNorm(32)
            self.approximate = approximate

        def forward(self, x: object) -> object:
            h = torch.nn.functional.gelu(self.fc(x), approximate=self.approximate)
            return self.ln(h + x)

    for approximate, fused in (("none", "Gelu"), ("tanh", "FastGelu")):
        path = Path(str(tmp_path)) / f"block-{approximate}.onnx"
        torch.manual_seed(0)
        with torch.no_grad():
            torch.onnx.export(
                Block(approximate).eval(),
                (torch.randn(1, 16, 32),),
                str(path),
                dynamo=False,
                opset_version=13,  # LayerNorm spelled out: ReduceMean, Sub, Pow, Sqrt, Div
                input_names=["x"],
            )
        graph = ronnx.load(path)
        assert graph.op_counts()["reducemean"] == 2
        result = optimize(graph, Options(rules=TRANSFORMER_RULES, verify=False))
        counts = result.graph.op_counts()
        assert counts["gelu" if approximate == "none" else "gelu_tanh"] == 1
        assert counts["layernorm"] + counts["skiplayernorm"] == 1
        out = ronnx.to_model(result.graph, like=path)
        assert fused in {n.op_type for n in out.graph.node}
        assert ronnx.verify(path, out).ok


def test_its_own_contrib_gelu_export_reads_back_as_gelu() -> None:
    """com.microsoft Gelu has no ONNX shape inference: its output's type is open, and the
    reshape after it must still see a float tensor (it read as opaque, then failed)."""
    b = GraphBuilder()
    x = b.input([2, 3, 4], name="x")
    y = b.reshape(b.gelu(b.reshape(x, [6, 4])), [2, 3, 4])
    model = ronnx.to_model(b.build(y))
    assert ("com.microsoft", "Gelu") in {(n.domain, n.op_type) for n in model.graph.node}
    counts = ronnx.load(model).op_counts()
    assert counts["gelu"] == 1 and "opaque" not in counts
