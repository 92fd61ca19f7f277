"""The NumPy executor against hand-computed NumPy results (SEMANTICS.md §2–3)."""

from __future__ import annotations

import numpy as np
import pytest

from relsat.errors import ExecutionError
from relsat.graph.builder import GraphBuilder
from relsat.graph.execute import allclose, compare, evaluate, random_values, register_opaque, run
from relsat.graph.graph import Ref

RNG = np.random.default_rng(1234)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def conv_loops(
    x: np.ndarray,
    w: np.ndarray,
    stride: tuple[int, int],
    pads: tuple[int, int],
    out: tuple[int, int],
) -> np.ndarray:
    """Reference grouped cross-correlation by explicit loops; zero padding ``pads`` per side."""
    n, c, h, wd = x.shape
    o, cw, kh, kw = w.shape
    g = c // cw
    res = np.zeros((n, o, *out))
    for b in range(n):
        for oc in range(o):
            j = oc // (o // g)
            for i in range(out[0]):
                for k in range(out[1]):
                    acc = 0.0
                    for ci in range(cw):
                        for di in range(kh):
                            for dk in range(kw):
                                r = i * stride[0] + di - pads[0]
                                s = k * stride[1] + dk - pads[1]
                                if 0 <= r < h and 0 <= s < wd:
                                    acc += x[b, j * cw + ci, r, s] * w[oc, ci, di, dk]
                    res[b, oc, i, k] = acc
    return res


def conv_graph(
    xs: tuple[int, ...],
    ws: tuple[int, ...],
    stride: int | tuple[int, int] = 1,
    padding: str = "SAME",
    activation: str = "NONE",
):
    b = GraphBuilder()
    y = b.conv2d(b.input(xs, name="x"), b.weight(ws, name="w"), stride, padding, activation)
    return b.build(y)


def run1(graph, **values):
    (out,) = run(graph, values)
    return out


# --- conv2d ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("xs", "ws", "stride", "padding", "pads", "out"),
    [
        ((1, 2, 5, 5), (3, 2, 3, 3), (1, 1), "SAME", (1, 1), (5, 5)),
        ((2, 3, 8, 8), (4, 3, 3, 3), (2, 2), "SAME", (1, 1), (4, 4)),  # odd total: 1 each side
        ((1, 2, 7, 6), (2, 2, 3, 2), (2, 1), "VALID", (0, 0), (3, 5)),
        ((1, 1, 6, 6), (2, 1, 4, 4), (1, 1), "SAME", (2, 2), (6, 6)),  # even kernel: 6, not 7
        ((1, 4, 6, 6), (6, 2, 3, 3), (1, 1), "SAME", (1, 1), (6, 6)),  # 2 groups
        ((1, 4, 5, 5), (4, 1, 3, 3), (2, 2), "SAME", (1, 1), (3, 3)),  # depthwise
        ((2, 2, 5, 4), (6, 1, 3, 3), (1, 1), "SAME", (1, 1), (5, 4)),  # depthwise, multiplier 3
        ((1, 3, 9, 9), (3, 1, 5, 5), (2, 2), "VALID", (0, 0), (3, 3)),  # depthwise, VALID
    ],
)
def test_conv_matches_loops(xs, ws, stride, padding, pads, out):
    g = conv_graph(xs, ws, stride, padding)
    x, w = rand(*xs), rand(*ws)
    np.testing.assert_allclose(
        run1(g, x=x, w=w), conv_loops(x, w, stride, pads, out), rtol=1e-12, atol=1e-12
    )


def test_grouped_conv_is_concat_of_group_convs():
    x, w = rand(1, 6, 5, 5), rand(9, 2, 3, 3)
    whole = run1(conv_graph((1, 6, 5, 5), (9, 2, 3, 3)), x=x, w=w)
    one = conv_graph((1, 2, 5, 5), (3, 2, 3, 3))
    parts = [run1(one, x=x[:, 2 * j : 2 * j + 2], w=w[3 * j : 3 * j + 3]) for j in range(3)]
    np.testing.assert_allclose(whole, np.concatenate(parts, axis=1), rtol=1e-12)


@pytest.mark.parametrize(
    ("act", "fn"),
    [
        ("RELU", lambda v: np.maximum(v, 0)),
        ("TANH", np.tanh),
        ("SIGMOID", lambda v: 1 / (1 + np.exp(-v))),
    ],
)
def test_conv_fused_activation(act, fn):
    x, w = rand(1, 2, 4, 4), rand(3, 2, 3, 3)
    plain = run1(conv_graph((1, 2, 4, 4), (3, 2, 3, 3)), x=x, w=w)
    fused = run1(conv_graph((1, 2, 4, 4), (3, 2, 3, 3), activation=act), x=x, w=w)
    np.testing.assert_allclose(fused, fn(plain), rtol=1e-12)


def test_float32_stays_float32():
    (y,) = run(conv_graph((1, 2, 4, 4), (3, 2, 3, 3)), dtype=np.float32)
    assert y.dtype == np.float32


# --- pooling --------------------------------------------------------------------------------


def pool_graph(kind: str, xs, kernel, stride, padding, activation="NONE"):
    b = GraphBuilder()
    x = b.input(xs, name="x")
    f = b.maxpool2d if kind == "max" else b.avgpool2d
    return b.build(f(x, kernel, stride, padding, activation))


def pool_loops(x: np.ndarray, kind: str, kernel: int, stride: int, pad: int, out: int):
    """Reference pooling by loops; padded positions are skipped (max) or not counted (avg)."""
    res = np.zeros((*x.shape[:2], out, out))
    for i in range(out):
        for k in range(out):
            r0, s0 = i * stride - pad, k * stride - pad
            win = x[:, :, max(r0, 0) : r0 + kernel, max(s0, 0) : s0 + kernel]
            res[:, :, i, k] = win.max(axis=(2, 3)) if kind == "max" else win.mean(axis=(2, 3))
    return res


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize(
    ("size", "kernel", "stride", "padding", "pad", "out"),
    [
        (8, 3, 2, "SAME", 1, 4),
        (7, 3, 2, "SAME", 1, 4),
        (6, 3, 1, "SAME", 1, 6),
        (7, 3, 2, "VALID", 0, 3),
        (6, 2, 2, "VALID", 0, 3),
    ],
)
def test_pool_matches_loops(kind, size, kernel, stride, padding, pad, out):
    x = rand(2, 3, size, size)
    y = run1(pool_graph(kind, x.shape, kernel, stride, padding), x=x)
    np.testing.assert_allclose(y, pool_loops(x, kind, kernel, stride, pad, out), rtol=1e-12)


def test_avgpool_same_excludes_padding():
    x = rand(1, 2, 4, 4)
    y = run1(pool_graph("avg", (1, 2, 4, 4), 3, 1, "SAME"), x=x)
    assert y.shape == (1, 2, 4, 4)
    np.testing.assert_allclose(y[:, :, 0, 0], x[:, :, :2, :2].mean(axis=(2, 3)))  # divides by 4
    np.testing.assert_allclose(y[:, :, 1, 1], x[:, :, :3, :3].mean(axis=(2, 3)))
    np.testing.assert_allclose(y[:, :, 0, 2], x[:, :, :2, 1:4].mean(axis=(2, 3)))


def test_maxpool_same_pads_with_minus_infinity():
    x = -np.abs(rand(1, 1, 5, 5)) - 1  # all negative: a zero pad would win
    y = run1(pool_graph("max", (1, 1, 5, 5), 3, 2, "SAME"), x=x)  # total 2, pad 1 each side
    assert y.shape == (1, 1, 3, 3)
    assert y[0, 0, 0, 0] == x[0, 0, :2, :2].max()
    assert y[0, 0, 1, 2] == x[0, 0, 1:4, 3:5].max()


def test_pool_valid_and_fused_relu():
    x = rand(1, 3, 6, 6)
    y = run1(pool_graph("max", (1, 3, 6, 6), 2, 2, "VALID", "RELU"), x=x)
    np.testing.assert_allclose(y, np.maximum(x.reshape(1, 3, 3, 2, 3, 2).max(axis=(3, 5)), 0))
    y = run1(pool_graph("avg", (1, 3, 6, 6), 2, 2, "VALID"), x=x)
    np.testing.assert_allclose(y, x.reshape(1, 3, 3, 2, 3, 2).mean(axis=(3, 5)))


# --- matmul and element-wise -----------------------------------------------------------------


def test_matmul_2d_batched_and_fused():
    b = GraphBuilder()
    a2, w2 = b.input([3, 4], name="a2"), b.weight([4, 5], name="w2")
    a3, w3 = b.input([2, 3, 4], name="a3"), b.weight([2, 4, 5], name="w3")
    g = b.build(b.matmul(a2, w2), b.matmul(a3, w3, "RELU"))
    v = {"a2": rand(3, 4), "w2": rand(4, 5), "a3": rand(2, 3, 4), "w3": rand(2, 4, 5)}
    y2, y3 = run(g, v)
    np.testing.assert_allclose(y2, v["a2"] @ v["w2"])
    np.testing.assert_allclose(y3, np.maximum(np.einsum("bij,bjk->bik", v["a3"], v["w3"]), 0))


def test_elementwise_broadcasting_and_activations():
    b = GraphBuilder()
    x, y = b.input([2, 3, 4], name="x"), b.input([3, 1], name="y")
    g = b.build(b.add(x, y), b.mul(x, y), b.relu(x), b.tanh(x), b.sigmoid(x), b.dropout(x))
    vx, vy = rand(2, 3, 4), rand(3, 1)
    add, mul, relu, tanh, sig, drop = run(g, {"x": vx, "y": vy})
    np.testing.assert_allclose(add, vx + vy)
    np.testing.assert_allclose(mul, vx * vy)
    np.testing.assert_allclose(relu, np.maximum(vx, 0))
    np.testing.assert_allclose(tanh, np.tanh(vx))
    np.testing.assert_allclose(sig, 1 / (1 + np.exp(-vx)))
    np.testing.assert_array_equal(drop, vx)


# --- plumbing ------------------------------------------------------------------------------


def test_transpose_reshape_concat_split():
    b = GraphBuilder()
    x = b.input([2, 3, 4], name="x")
    t = b.transpose(x, [1, 0, 2])
    r = b.reshape(x, [4, 6])
    c = b.concat(1, [x, x, b.relu(x)])
    pieces = b.split(c, 1, [2, 5, 2])
    g = b.build(t, r, c, pieces)
    vx = rand(2, 3, 4)
    yt, yr, yc, p0, p1, p2 = run(g, {"x": vx})
    np.testing.assert_array_equal(yt, np.transpose(vx, (1, 0, 2)))
    np.testing.assert_array_equal(yr, vx.reshape(4, 6))
    np.testing.assert_array_equal(yc, np.concatenate([vx, vx, np.maximum(vx, 0)], axis=1))
    np.testing.assert_array_equal(p0, yc[:, :2])
    np.testing.assert_array_equal(p1, yc[:, 2:7])
    np.testing.assert_array_equal(p2, yc[:, 7:])


def test_enlarge_centres_the_kernel():
    b = GraphBuilder()
    w, ref = b.weight([2, 3, 1, 3], name="w"), b.weight([4, 3, 5, 5], name="ref")
    vw = rand(2, 3, 1, 3)
    y = run1(b.build(b.enlarge(w, ref)), w=vw)
    expected = np.zeros((2, 3, 5, 5))
    expected[:, :, 2:3, 1:4] = vw
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("k", [1, 3])
def test_conv_of_enlarged_weight_is_unchanged(k):
    b = GraphBuilder()
    x, w, ref = (
        b.input([1, 4, 7, 7], name="x"),
        b.weight([3, 4, k, k], name="w"),
        b.weight([3, 4, 5, 5], name="ref"),
    )
    g = b.build(b.conv2d(x, w), b.conv2d(x, b.enlarge(w, ref)))
    plain, enlarged = run(g)
    np.testing.assert_allclose(plain, enlarged, rtol=1e-12, atol=1e-12)


def merge_graph(groups: int, counts: list[int]):
    """conv(x, w) and conv(x, merge(...merge(w, c1)..., cn)), w of a conv with ``groups``."""
    b = GraphBuilder()
    x, w = b.input([1, 8, 5, 5], name="x"), b.weight([8, 8 // groups, 3, 3], name="w")
    merged = w
    for c in counts:
        merged = b.merge(merged, c)
    return b.build(b.conv2d(x, w, 1, "SAME", "RELU"), b.conv2d(x, merged, 1, "SAME", "RELU"))


@pytest.mark.parametrize(
    ("groups", "counts"), [(2, [2]), (4, [2]), (8, [2]), (8, [4]), (8, [2, 2]), (8, [2, 4])]
)
def test_conv_of_merged_weight_is_unchanged(groups, counts):
    original, merged = run(merge_graph(groups, counts))
    # Equal up to summation order: the merged conv adds the same products plus exact zeros.
    np.testing.assert_allclose(original, merged, rtol=1e-12, atol=1e-14)


def test_nested_merge_equals_one_merge():
    (_, twice), (_, once) = run(merge_graph(8, [2, 2])), run(merge_graph(8, [4]))
    np.testing.assert_array_equal(twice, once)


def hand_merge(w: np.ndarray, count: int, groups: int) -> np.ndarray:
    """SEMANTICS §2 merge by loops: row o (old group j) holds w[o] in input block j mod count."""
    o, cw = w.shape[:2]
    out = np.zeros((o, count * cw, *w.shape[2:]))
    for row in range(o):
        j = row // (o // groups)
        out[row, (j % count) * cw : (j % count + 1) * cw] = w[row]
    return out


def test_merge_through_concat_and_split():
    b = GraphBuilder()
    x = b.input([1, 8, 5, 5], name="x")
    w1, w2 = b.weight([4, 2, 3, 3], name="w1"), b.weight([4, 2, 3, 3], name="w2")
    cat = b.concat(0, [b.merge(w1, 2), b.merge(w2, 2)])  # [8, 4, 3, 3]: consumer groups 2
    s1, _ = b.split(cat, 0, [4, 4])
    g = b.build(b.conv2d(x, cat), b.conv2d(x, b.enlarge(s1, b.weight([1, 1, 5, 5]))))
    v = random_values(g)
    y, y1 = run(g, v)
    m1, m2 = hand_merge(v["w1"], 2, 4), hand_merge(v["w2"], 2, 4)  # old groups 2 * 2
    w_cat = np.concatenate([m1, m2])
    np.testing.assert_allclose(y, conv_loops(v["x"], w_cat, (1, 1), (1, 1), (5, 5)), rtol=1e-12)
    np.testing.assert_allclose(y1, conv_loops(v["x"], m1, (1, 1), (1, 1), (5, 5)), rtol=1e-12)


def test_merged_weight_outside_a_conv_is_rejected():
    b = GraphBuilder()
    w = b.weight([4, 2, 3, 3], name="w")
    g = b.build(b.concat(0, [b.merge(w, 2), b.merge(w, 2)]))
    with pytest.raises(ExecutionError, match="merged weight"):
        run(g)


def test_noop_outputs_flatten_depth_first():
    b = GraphBuilder()
    x = b.input([2, 2], name="x")
    r, t, s = b.relu(x), b.tanh(x), b.sigmoid(x)
    g = b.build(b.noop(b.noop(r, t), s), x)
    outs = run(g, {"x": np.eye(2) - 0.5})
    assert len(outs) == 4
    np.testing.assert_array_equal(outs[0], np.maximum(np.eye(2) - 0.5, 0))
    np.testing.assert_array_equal(outs[1], np.tanh(np.eye(2) - 0.5))
    np.testing.assert_array_equal(outs[3], np.eye(2) - 0.5)


def test_batchnorm_inference_formula():
    b = GraphBuilder()
    x = b.input([2, 3, 2, 2], name="x")
    params = [b.weight([3], name=n) for n in ("scale", "bias", "mean", "var")]
    g = b.build(b.batchnorm(x, *params, epsilon=1e-3))
    v = random_values(g)
    assert (v["var"] > 0).all()
    y = run1(g, **v)
    c = (1, 3, 1, 1)
    eps = float(np.float32(1e-3))  # a float parameter: float32, as rules bind it
    scale = v["scale"].reshape(c) / np.sqrt(v["var"].reshape(c) + eps)
    expected = (v["x"] - v["mean"].reshape(c)) * scale + v["bias"].reshape(c)
    np.testing.assert_allclose(y, expected, rtol=1e-12)


def test_opaque_registry():
    b = GraphBuilder()
    x = b.input([2, 3], name="x")
    lo, hi = b.opaque("test.clip_split", [x], [[2, 1], [2, 2]], attrs={"lo": -0.1})
    g = b.build(lo, hi)
    with pytest.raises(ExecutionError, match=r"opaque node 1.*test\.clip_split") as err:
        run(g)
    assert err.value.node == 1 and err.value.op == "opaque"
    register_opaque(
        "test.clip_split", lambda attrs, a: (np.maximum(a[:, :1], attrs["lo"]), a[:, 1:])
    )
    try:
        vx = rand(2, 3)
        y0, y1 = run(g, {"x": vx})
        np.testing.assert_array_equal(y0, np.maximum(vx[:, :1], -0.1))
        np.testing.assert_array_equal(y1, vx[:, 1:])
        register_opaque("test.clip_split", lambda attrs, a: (a, a))
        with pytest.raises(ExecutionError, match="returned shapes"):
            run(g)
    finally:
        register_opaque("test.clip_split", None)


# --- values --------------------------------------------------------------------------------


def test_bad_values_raise():
    g = conv_graph((1, 2, 4, 4), (3, 2, 3, 3))
    with pytest.raises(ExecutionError, match=r"'w'.*shape") as err:
        run(g, {"w": np.zeros((3, 2, 1, 1))})
    assert err.value.op == "weight"
    with pytest.raises(ExecutionError, match="nope"):
        run(g, {"nope": np.zeros(1)})


def test_random_values_deterministic_by_name():
    b1 = GraphBuilder()
    b1.weight([4, 8], name="a")
    x1 = b1.input([2, 4], name="x")
    b1.weight([5], name="v")
    g1 = b1.build(x1)
    b2 = GraphBuilder()
    x2 = b2.input([2, 4], name="x")
    b2.weight([4, 8], name="a")
    g2 = b2.build(x2)
    v1, v2 = random_values(g1, seed=3), random_values(g2, seed=3)
    for name in ("x", "a"):
        np.testing.assert_array_equal(v1[name], v2[name])
    assert not np.array_equal(random_values(g1, seed=4)["x"], v1["x"])
    assert ((v1["v"] >= 0.5) & (v1["v"] < 1.5)).all()
    assert abs(v1["a"].std() * np.sqrt(8) - 1) < 0.5  # scaled by 1/sqrt(fan-in)


def test_real_weight_data_is_used():
    b = GraphBuilder()
    w = b.weight([2, 2], name="w", value=np.eye(2))
    x = b.input([2, 2], name="x")
    g = b.build(b.matmul(x, w))
    v = random_values(g)
    np.testing.assert_array_equal(v["w"], np.eye(2))
    np.testing.assert_allclose(run1(g), v["x"])


def test_evaluate_returns_every_tensor():
    b = GraphBuilder()
    x = b.input([2, 2], name="x")
    r = b.relu(x)
    g = b.build(b.tanh(r))
    env = evaluate(g)
    assert set(env) == {Ref(0), Ref(1), Ref(2)}
    np.testing.assert_array_equal(env[Ref(2)], np.tanh(env[Ref(1)]))


# --- compare ---------------------------------------------------------------------------------


def act_graph(act: str, extra_weight: bool = False):
    b = GraphBuilder()
    x, w = b.input([3, 4], name="x"), b.weight([4, 4], name="w")
    if extra_weight:
        b.weight([7], name="unused")
    return b.build(getattr(b, act)(b.matmul(x, w)))


def test_compare_equal_graphs():
    result = compare(act_graph("relu"), act_graph("relu", extra_weight=True))
    assert result.ok and allclose(act_graph("relu"), act_graph("relu"))
    assert result.max_abs == (0.0,)
    assert result.report().startswith("equal")


def test_compare_different_graphs():
    result = compare(act_graph("relu"), act_graph("tanh"))
    assert not result.ok and result.max_abs[0] > 0
    assert "output 0" in result.report()
    assert not allclose(act_graph("relu"), act_graph("tanh"))


def test_compare_output_mismatch_is_not_an_exception():
    b = GraphBuilder()
    x, w = b.input([3, 4], name="x"), b.weight([4, 4], name="w")
    two = b.build(b.relu(x), b.matmul(x, w))
    result = compare(act_graph("relu"), two)
    assert not result.ok and result.reason == "1 outputs vs 2"
    b = GraphBuilder()
    x, w = b.input([3, 4], name="x"), b.weight([4, 2], name="w2")
    result = compare(act_graph("relu"), b.build(b.matmul(x, w)))
    assert not result.ok and "shape" in (result.reason or "")


def test_compare_requires_same_inputs():
    b = GraphBuilder()
    g = b.build(b.relu(b.input([3, 5], name="x")))
    with pytest.raises(ExecutionError, match="inputs differ"):
        compare(act_graph("relu"), g)
