"""Property tests of shape and split-history inference (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relsat import GraphBuilder, GraphError
from relsat.graph.ops import OPS, OpError, Params, TensorType, conv_out_size, infer

dims = st.integers(min_value=1, max_value=9)
shapes = st.lists(dims, min_size=1, max_size=4).map(tuple)


def _valid_splits(t: TensorType) -> bool:
    return len(t.splits) == t.rank and all(
        all(0 < p < d for p in s) for s, d in zip(t.splits, t.shape, strict=True)
    )


@given(st.data())
def test_elementwise_matches_numpy_broadcasting(data: st.DataObject) -> None:
    a = data.draw(shapes)
    b = tuple(data.draw(st.sampled_from([1, d])) for d in a[data.draw(st.integers(0, len(a))) :])
    for x, y in ((a, b), (b, a)):
        if not y:
            continue
        (out,) = infer("ewadd", Params(), [TensorType(x), TensorType(y)])
        assert out.shape == np.broadcast_shapes(x, y)


@given(shapes, shapes)
def test_elementwise_rejects_exactly_what_numpy_rejects(a: tuple, b: tuple) -> None:
    try:
        expected = np.broadcast_shapes(a, b)
    except ValueError:
        with pytest.raises(OpError):
            infer("ewmul", Params(), [TensorType(a), TensorType(b)])
    else:
        assert infer("ewmul", Params(), [TensorType(a), TensorType(b)])[0].shape == expected


@given(st.lists(dims, min_size=0, max_size=2), dims, dims, dims)
def test_matmul_matches_numpy(batch: list[int], m: int, k: int, n: int) -> None:
    a, b = (*batch, m, k), (*batch, k, n)
    (out,) = infer("matmul", Params(activation="NONE"), [TensorType(a), TensorType(b)])
    assert out.shape == np.matmul(np.zeros(a), np.zeros(b)).shape


@given(
    n=st.integers(1, 2),
    groups=st.integers(1, 4),
    cw=st.integers(1, 3),
    per_group=st.integers(1, 3),
    h=st.integers(1, 20),
    w=st.integers(1, 20),
    kh=st.integers(1, 5),
    kw=st.integers(1, 5),
    sh=st.integers(1, 3),
    sw=st.integers(1, 3),
    padding=st.sampled_from(["SAME", "VALID"]),
)
def test_conv_shape_formula(
    n: int,
    groups: int,
    cw: int,
    per_group: int,
    h: int,
    w: int,
    kh: int,
    kw: int,
    sh: int,
    sw: int,
    padding: str,
) -> None:
    x = TensorType((n, groups * cw, h, w))
    wt = TensorType((groups * per_group, cw, kh, kw))
    params = Params(stride=(sh, sw), padding=padding, activation="RELU")
    if padding == "VALID" and (kh > h or kw > w):
        with pytest.raises(OpError, match="larger than input"):
            infer("conv2d", params, [x, wt])
        return
    (out,) = infer("conv2d", params, [x, wt])
    expect_h = -(-h // sh) if padding == "SAME" else (h - kh) // sh + 1
    expect_w = -(-w // sw) if padding == "SAME" else (w - kw) // sw + 1
    assert out.shape == (n, groups * per_group, expect_h, expect_w)
    assert conv_out_size(h, kh, sh, padding) == expect_h


@given(st.lists(dims, min_size=2, max_size=4), st.data())
def test_concat_then_split_at_concat_inverts(parts: list[int], data: st.DataObject) -> None:
    rest = data.draw(st.lists(dims, min_size=1, max_size=3))
    axis = data.draw(st.integers(0, len(rest)))
    b = GraphBuilder()

    def shape(k: int) -> list[int]:
        return [*rest[:axis], k, *rest[axis:]]

    tensors = [b.input(shape(k)) for k in parts]
    joined = b.concat(axis, tensors)
    assert joined.shape[axis] == sum(parts)
    assert _valid_splits(joined.type)
    head, last = b.split_at_concat(joined, axis)
    assert last.shape == tuple(shape(parts[-1]))
    assert head.shape == tuple(shape(sum(parts[:-1])))
    # the head keeps the earlier boundaries, so the nesting can be undone step by step
    for k in reversed(parts[1:-1]):
        head, piece = b.split_at_concat(head, axis)
        assert piece.shape[axis] == k
    assert head.shape[axis] == parts[0]


@given(st.lists(dims, min_size=2, max_size=4), st.data())
def test_nested_concats_keep_a_valid_history(sizes: list[int], data: st.DataObject) -> None:
    b = GraphBuilder()
    items = [b.input([2, k]) for k in sizes]
    while len(items) > 1:  # join neighbours in a random tree shape
        i = data.draw(st.integers(0, len(items) - 2))
        items[i : i + 2] = [b.concat(1, items[i : i + 2])]
    (root,) = items
    assert _valid_splits(root.type)
    assert len(root.type.splits[1]) == len(sizes) - 1
    assert sorted(root.type.splits[1]) == list(np.cumsum(sizes)[:-1])


@given(shapes, st.data())
def test_transpose_inverse(shape: tuple, data: st.DataObject) -> None:
    perm = data.draw(st.permutations(range(len(shape))))
    inverse = list(np.argsort(perm))
    b = GraphBuilder()
    x = b.input(list(shape))
    y = b.transpose(x, perm)
    assert y.shape == np.transpose(np.zeros(shape), perm).shape
    assert b.transpose(y, inverse).type == x.type


@given(shapes, st.data())
def test_reshape_requires_equal_volume(shape: tuple, data: st.DataObject) -> None:
    target = data.draw(shapes)
    b = GraphBuilder()
    x = b.input(list(shape))
    if np.prod(target) == np.prod(shape):
        assert b.reshape(x, target).shape == target
    else:
        with pytest.raises(GraphError, match="cannot reshape"):
            b.reshape(x, target)


@given(st.lists(dims, min_size=2, max_size=5), st.integers(1, 4))
@settings(max_examples=50)
def test_split_sizes_cover(sizes: list[int], rows: int) -> None:
    b = GraphBuilder()
    parts = b.split(b.input([rows, sum(sizes)]), 1, sizes)
    assert [p.shape for p in parts] == [(rows, k) for k in sizes]


@given(
    o=st.integers(1, 8),
    cw=st.integers(1, 4),
    k=st.sampled_from([1, 3, 5]),
    r=st.sampled_from([1, 3, 5, 7]),
    count=st.integers(1, 4),
)
def test_enlarge_and_merge_shapes(o: int, cw: int, k: int, r: int, count: int) -> None:
    w, ref = TensorType((o, cw, k, k)), TensorType((o, cw, r, r))
    if k <= r:
        assert infer("enlarge", Params(), [w, ref])[0].shape == (o, cw, r, r)
    else:
        with pytest.raises(OpError):
            infer("enlarge", Params(), [w, ref])
    assert infer("merge", Params(count=count), [w])[0].shape == (o, count * cw, k, k)


def test_every_op_has_a_doc_and_arity() -> None:
    for name, spec in OPS.items():
        assert spec.doc, name
        assert spec.arity is not None or spec.min_arity >= 1 or name == "opaque"


@given(
    c=st.integers(1, 3),
    h=st.integers(1, 12),
    w=st.integers(1, 12),
    k=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    s=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    padding=st.sampled_from(["SAME", "VALID"]),
    op=st.sampled_from(["conv2d", "poolmax", "poolavg"]),
)
@settings(max_examples=60, deadline=None)
def test_executor_agrees_with_inferred_shapes(
    c: int, h: int, w: int, k: tuple, s: tuple, padding: str, op: str
) -> None:
    from relsat import run

    b = GraphBuilder()
    x = b.input([1, c, h, w])
    try:
        if op == "conv2d":
            y = b.conv2d(x, b.weight([2, c, *k]), stride=s, padding=padding)
        elif op == "poolmax":
            y = b.maxpool2d(x, k, s, padding)
        else:
            y = b.avgpool2d(x, k, s, padding)
    except GraphError:
        assert padding == "VALID" and (k[0] > h or k[1] > w)
        return
    (out,) = run(b.build(y))
    assert out.shape == y.shape
    assert np.isfinite(out).all()
