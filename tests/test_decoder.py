"""LLM decoder operators: RMSNorm and rotary embedding as fused ops, the pieces exporters spell them
with (reciprocal, neg, slice), the rules of rules/decoder.rules found by saturation, and near
misses left alone. (ONNX import and export: tests/test_decoder_onnx.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from relsat import GraphBuilder, Options, optimize
from relsat.cost.analytic import AnalyticModel
from relsat.cost.model import OpSignature
from relsat.engine.egraph import encode_node
from relsat.errors import GraphError
from relsat.graph.builder import Tensor
from relsat.graph.execute import run
from relsat.graph.ops import Params, f32_bits, int_params, param_ints
from relsat.rewrite.check import check_rule
from relsat.rewrite.rulefile import RULES_DIR, load_rules

RNG = np.random.default_rng(0)
DECODER_RULES = load_rules(RULES_DIR / "decoder.rules")


def _rms_reference(x: np.ndarray, g: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * g


def _rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], -1)


# --- operators ------------------------------------------------------------------------------


def test_kernels_match_their_definitions() -> None:
    b = GraphBuilder()
    x, g = b.input([2, 5, 8], name="x"), b.weight([8], name="g")
    q = b.input([1, 3, 5, 8], name="q")
    c, s = b.weight([1, 1, 5, 4], name="c"), b.weight([1, 1, 5, 4], name="s")
    outs = [
        b.rmsnorm(x, g, 1e-6),
        b.reciprocal(x),
        b.neg(x),
        b.slice(x, -1, 2, 7),
        b.slice(x, 1, 0, 1),
        b.rotary(q, c, s),
        b.rotary(q, c, s, interleaved=True),
    ]
    values = {"x": RNG.standard_normal((2, 5, 8)), "g": RNG.uniform(0.5, 1.5, 8)}
    values |= {"q": RNG.standard_normal((1, 3, 5, 8))}
    values |= {"c": RNG.standard_normal((1, 1, 5, 4)), "s": RNG.standard_normal((1, 1, 5, 4))}
    rms, rec, neg, piece, first, half, pairs = run(b.build(*outs), values)
    xv, qv, cv, sv = values["x"], values["q"], values["c"], values["s"]
    np.testing.assert_allclose(rms, _rms_reference(xv, values["g"], np.float32(1e-6)), rtol=1e-12)
    np.testing.assert_allclose(rec, 1 / xv)
    np.testing.assert_array_equal(neg, -xv)
    np.testing.assert_array_equal(piece, xv[..., 2:7])
    np.testing.assert_array_equal(first, xv[:, :1])
    cc, ss = np.concatenate([cv, cv], -1), np.concatenate([sv, sv], -1)
    np.testing.assert_allclose(half, qv * cc + _rotate_half(qv) * ss, rtol=1e-12)
    # GPT-J: out[2i] = x[2i] cos[i] - x[2i+1] sin[i], out[2i+1] = x[2i+1] cos[i] + x[2i] sin[i]
    even, odd = qv[..., 0::2], qv[..., 1::2]
    np.testing.assert_allclose(pairs[..., 0::2], even * cv - odd * sv, rtol=1e-12)
    np.testing.assert_allclose(pairs[..., 1::2], odd * cv + even * sv, rtol=1e-12)


def test_shape_checks_refuse_near_misses() -> None:
    b = GraphBuilder()
    x = b.input([2, 3, 8])
    q = b.input([1, 4, 5, 8])
    c = b.weight([1, 1, 5, 4])
    assert b.rotary(q, b.weight([5, 4]), b.weight([1, 5, 4])).shape == (1, 4, 5, 8)
    bad = [
        lambda: b.rmsnorm(x, b.weight([1, 8])),  # a scale that is not [N]
        lambda: b.rmsnorm(x, b.weight([3])),  # over another axis
        lambda: b.rmsnorm(x, b.weight([8]), 0.0),  # epsilon must be > 0
        lambda: b.rotary(b.input([1, 4, 5, 7]), b.weight([1, 1, 5, 3]), b.weight([1, 1, 5, 3])),
        lambda: b.rotary(q, b.weight([1, 1, 5, 8]), c),  # full-width tables
        lambda: b.rotary(q, b.weight([2, 1, 5, 4]), c),  # tables that broadcast x up
        lambda: b.rotary(q, b.weight([1, 1, 1, 5, 4]), c),  # tables of higher rank
        lambda: b.slice(x, 2, 4, 9),  # past the end
        lambda: b.slice(x, 2, 4, 4),  # empty
        lambda: b.slice(x, 3, 0, 1),  # no such axis
    ]
    for make in bad:
        with pytest.raises(GraphError):
            make()


def test_integer_parameters_are_enode_integers() -> None:
    b = GraphBuilder()
    x = b.input([1, 4, 6, 8])
    graph = b.build(b.slice(x, 3, 4, 8), b.rotary(x, b.weight([6, 4]), b.weight([6, 4]), True))
    assert encode_node(graph.nodes[1]) == ("slice", [3, 4, 8, 1, -1, -1], "")
    assert encode_node(graph.nodes[-1]) == ("rotary", [1, -1, -1, -1, -1, -1], "")
    assert param_ints("rmsnorm", Params(epsilon=1e-5)) == [f32_bits(1e-5)]
    assert int_params("slice", [3, 4, 8, 2, -1, -1]) == Params(axis=3, start=4, end=8, step=2)


def test_prices_see_one_kernel() -> None:
    model = AnalyticModel("cpu")
    xs, ms = (1, 128, 2048), (1, 128, 1)
    fused = model.cost(OpSignature("rmsnorm", (f32_bits(1e-6),), "", (xs, (2048,)), xs))
    pieces = [
        OpSignature("ewpow", (), "", (xs, ()), xs),
        OpSignature("reducemean", (), "", (xs,), ms),
        OpSignature("ewadd", (), "", (ms, ()), ms),
        OpSignature("sqrt", (), "", (ms,), ms),
        OpSignature("reciprocal", (), "", (ms,), ms),
        OpSignature("ewmul", (), "", (xs, ms), xs),
        OpSignature("ewmul", (), "", ((2048,), xs), xs),
    ]
    assert 0 < fused < sum(model.cost(p) for p in pieces)
    qs, hs = (1, 32, 128, 128), (1, 32, 128, 64)
    rotary = model.cost(OpSignature("rotary", (0,), "", (qs, (1, 1, 128, 64), (128, 64)), qs))
    sliced = model.cost(OpSignature("slice", (3, 0, 64), "", (qs,), hs))
    assert 0 < sliced < rotary


def test_every_decoder_rule_checks_ok() -> None:
    assert [check_rule(r).status for r in DECODER_RULES] == ["ok"] * len(DECODER_RULES)


# --- saturation -----------------------------------------------------------------------------


def _rms_spelled(
    b: GraphBuilder, x: Tensor, g: Tensor, eps: Tensor, spelling: str = "dynamo"
) -> Tensor:
    den = b.sqrt(b.add(b.reducemean(b.pow(x, b.scalar(2.0))), eps))
    if spelling == "dynamo":
        return b.mul(g, b.mul(x, b.reciprocal(den)))
    if spelling == "scale-last":
        return b.mul(b.mul(x, b.reciprocal(den)), g)
    if spelling == "div-one":
        return b.mul(g, b.mul(x, b.div(b.scalar(1.0), den)))
    return b.mul(g, b.div(x, den))


def _rotary_spelled(b: GraphBuilder, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    d = x.shape[-1]
    half = d // 2
    rotated = b.concat(3, [b.neg(b.slice(x, 3, half, d)), b.slice(x, 3, 0, half)])
    return b.add(b.mul(x, cos), b.mul(rotated, sin))


@pytest.mark.parametrize("spelling", ["dynamo", "scale-last", "div-one", "div"])
def test_saturation_fuses_each_rmsnorm_spelling(spelling: str) -> None:
    b = GraphBuilder()
    x = b.input([1, 16, 64], name="x")
    y1 = _rms_spelled(b, x, b.weight([64]), b.scalar(1e-5), spelling)
    y2 = _rms_spelled(b, b.relu(x), b.weight([64]), b.scalar(1e-6), spelling)
    result = optimize(b.build(y1, y2), Options(rules=DECODER_RULES))
    counts = result.graph.op_counts()
    assert counts["rmsnorm"] == 2 and not {"reducemean", "sqrt", "ewpow"} & set(counts)
    assert result.verified


@pytest.mark.parametrize("d", [64, 128])
def test_saturation_fuses_rotate_half(d: int) -> None:
    b = GraphBuilder()
    q, k = b.input([1, 4, 8, d], name="q"), b.input([1, 2, 8, d], name="k")
    c, s = b.weight([1, 1, 8, d // 2], name="c"), b.weight([1, 1, 8, d // 2], name="s")
    cos, sin = b.concat(3, [c, c]), b.concat(3, [s, s])
    graph = b.build(_rotary_spelled(b, q, cos, sin), _rotary_spelled(b, k, cos, sin))
    result = optimize(graph, Options(rules=DECODER_RULES))
    counts = result.graph.op_counts()
    assert counts["rotary"] == 2 and not {"slice", "neg", "concat"} & set(counts)
    assert result.verified


def test_near_misses_are_left_alone() -> None:
    b = GraphBuilder()
    x = b.input([1, 16, 64], name="x")
    g = b.weight([64])
    outs = [
        _rms_spelled(b, x, g, b.weight([1])),  # epsilon as a tensor
        _rms_spelled(b, x, g, b.scalar(0.5)),  # not an epsilon (the guard allows < 0.01)
        _rms_spelled(b, x, b.weight([16, 64]), b.scalar(1e-6)),  # a scale that is not [N]
        _rms_spelled(b, x, b.weight([1]), b.scalar(1e-6)),  # a scalar scale
    ]
    q = b.input([1, 4, 8, 64], name="q")
    c, s = b.weight([1, 1, 8, 32], name="c"), b.weight([1, 1, 8, 32], name="s")
    cos, sin = b.concat(3, [c, c]), b.concat(3, [s, s])
    odd = b.input([1, 4, 8, 63], name="odd")
    outs += [
        _rotary_spelled(b, q, b.weight([1, 1, 8, 64]), sin),  # a table not known to repeat
        _rotary_spelled(b, odd, b.weight([1, 1, 8, 63]), b.weight([1, 1, 8, 63])),  # odd size
        b.add(  # the halves rotated the other way: [x1, -x2]
            b.mul(q, cos),
            b.mul(b.concat(3, [b.slice(q, 3, 0, 32), b.neg(b.slice(q, 3, 32, 64))]), sin),
        ),
    ]
    result = optimize(b.build(*outs), Options(rules=DECODER_RULES))
    counts = result.graph.op_counts()
    assert "rmsnorm" not in counts and "rotary" not in counts
    assert result.verified
