"""Graph builder, validation and JSON round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest

from relsat import Graph, GraphBuilder, GraphError, GraphFormatError, Ref
from relsat.graph.ops import same_padding
from relsat.graph.serial import from_json, to_json


def small_graph() -> Graph:
    b = GraphBuilder()
    x = b.input([1, 8, 10, 10], name="x")
    w1 = b.weight([8, 4, 3, 3])
    w2 = b.weight([8, 8, 1, 1], value=np.arange(64, dtype=np.float32).reshape(8, 8, 1, 1))
    y = b.conv2d(x, w1, padding="SAME", activation="RELU")
    z = b.conv2d(x, w2)
    c = b.concat(1, [y, z])
    p, q = b.split_at_concat(c, 1)
    (o,) = b.opaque("LayerNorm", [b.add(p, q)], [[1, 8, 10, 10]], {"eps": 1e-5, "axis": -1})
    return b.build(o, b.maxpool2d(z, 2, 2))


# --- shapes --------------------------------------------------------------------------------


def test_conv_shapes_same_and_valid() -> None:
    b = GraphBuilder()
    x = b.input([1, 3, 224, 224])
    assert b.conv2d(x, b.weight([64, 3, 7, 7]), stride=2, padding="SAME").shape == (1, 64, 112, 112)
    assert b.conv2d(x, b.weight([64, 3, 3, 3]), stride=2, padding="VALID").shape == (
        1,
        64,
        111,
        111,
    )
    assert b.conv2d(x, b.weight([63, 1, 3, 3]), padding=0).shape == (1, 63, 224, 224)  # 3 groups


def test_pool_and_matmul_shapes() -> None:
    b = GraphBuilder()
    x = b.input([1, 64, 112, 112])
    assert b.maxpool2d(x, 3, 2, "SAME").shape == (1, 64, 56, 56)
    assert b.avgpool2d(x, [13, 13], [13, 13], "VALID").shape == (1, 64, 8, 8)
    a = b.input([16, 64, 32])
    assert b.matmul(a, b.weight([16, 32, 8])).shape == (16, 64, 8)


def test_taso_same_padding() -> None:
    # SEMANTICS.md §3: total = max(k - s, 0) if H % s == 0 else max(k - H % s, 0);
    # pad = (total + 1) // 2
    assert same_padding(112, 3, 2) == 1  # total 1 → TASO pads 1 on each side
    assert same_padding(224, 7, 2) == 3
    assert same_padding(56, 3, 1) == 1
    assert same_padding(35, 3, 2) == 1
    assert same_padding(8, 1, 1) == 0


def test_split_history_follows_taso() -> None:
    b = GraphBuilder()
    a, c, d = (b.input([2, n], name=f"t{n}") for n in (3, 4, 5))
    inner = b.concat(1, [c, d])  # boundary at 4
    outer = b.concat(1, [a, inner])  # a's list + (inner's list + 3) + [3]
    assert outer.type.splits == ((), (7, 3))
    left, right = b.split_at_concat(outer, 1)
    assert (left.shape, right.shape) == ((2, 3), (2, 9))
    assert right.type.splits == ((), (4,))
    # matmul carries dim -1 from b: the worked example of SEMANTICS.md §4
    x = b.input([1, 6], name="x")
    w = b.concat(1, [b.weight([6, 2]), b.weight([6, 3])])
    p0, p1 = b.split_at_concat(b.matmul(x, w), 1)
    assert (p0.shape, p1.shape) == ((1, 2), (1, 3))


def test_split_explicit_sizes_and_multi_output_graph() -> None:
    b = GraphBuilder()
    x = b.input([4, 10])
    parts = b.split(x, 1, [2, 3, 5])
    g = b.build(parts)
    assert g.output_shapes == [(4, 2), (4, 3), (4, 5)]
    assert g.outputs == (Ref(1, 0), Ref(1, 1), Ref(1, 2))


def test_all_weights_flag() -> None:
    b = GraphBuilder()
    x = b.input([1, 4])
    w = b.matmul(b.weight([4, 4]), b.weight([4, 4]))
    g = b.build(b.matmul(x, w))
    assert g.all_weights() == [False, True, True, True, False]


def test_reachable_drops_dead_nodes() -> None:
    b = GraphBuilder()
    x = b.input([2, 2])
    b.weight([9])  # unused, like the biases of a .model file
    g = b.build(b.relu(x)).reachable()
    assert [n.op for n in g] == ["input", "relu"]
    assert g.outputs == (Ref(1, 0),)


# --- validation ----------------------------------------------------------------------------

BAD_CALLS = [
    ("conv2d", lambda b: b.conv2d(b.input([1, 6, 8, 8]), b.weight([4, 4, 3, 3])), "divisible"),
    (
        "conv2d",
        lambda b: b.conv2d(b.input([1, 6, 8, 8]), b.weight([5, 3, 3, 3])),
        "output channels 5 not divisible by groups 2",
    ),
    (
        "conv2d",
        lambda b: b.conv2d(b.input([1, 3, 2, 2]), b.weight([4, 3, 3, 3]), padding="VALID"),
        "larger than input",
    ),
    (
        "conv2d",
        lambda b: b.conv2d(b.input([1, 3, 8, 8]), b.weight([4, 3, 3, 3]), padding="FULL"),
        "padding",
    ),
    (
        "conv2d",
        lambda b: b.conv2d(b.input([1, 3, 8, 8]), b.weight([4, 3, 3, 3]), stride=0),
        "stride",
    ),
    ("matmul", lambda b: b.matmul(b.input([2, 3]), b.weight([4, 5])), "inner dims"),
    ("matmul", lambda b: b.matmul(b.input([2, 2, 3]), b.weight([3, 3, 5])), "batch dims"),
    (
        "matmul",
        lambda b: b.matmul(b.input([2, 3]), b.weight([3, 3]), activation="GELU"),
        "activation",
    ),
    ("ewadd", lambda b: b.add(b.input([2, 3]), b.input([3, 2])), "broadcastable"),
    ("concat", lambda b: b.concat(1, [b.input([2, 3]), b.input([3, 3])]), "outside axis"),
    ("concat", lambda b: b.concat(2, [b.input([2, 3]), b.input([2, 3])]), "out of range"),
    ("concat", lambda b: b.concat(0, [b.input([2, 3])]), "at least 2"),
    ("split", lambda b: b.split(b.input([2, 6]), 1, [2, 3]), "do not cover"),
    ("split", lambda b: b.split_at_concat(b.input([2, 6]), 1), "no concat boundary"),
    ("reshape", lambda b: b.reshape(b.input([2, 6]), [5, 2]), "cannot reshape"),
    ("transpose", lambda b: b.transpose(b.input([2, 6]), [0, 0]), "not a permutation"),
    (
        "enlarge",
        lambda b: b.enlarge(b.weight([4, 4, 5, 5]), b.weight([4, 4, 3, 3])),
        "larger than reference",
    ),
    ("merge", lambda b: b.merge(b.weight([4, 4]), 2), "4-D"),
    ("merge", lambda b: b.merge(b.weight([4, 4, 3, 3]), 0), "count"),
    ("input", lambda b: b.input([1, 0, 3]), "shape"),
    ("input", lambda b: b.input([1, -2]), "shape"),
    ("input", lambda b: b.input(["a"]), "not a list of integers"),
    ("poolmax", lambda b: b.maxpool2d(b.input([1, 3, 8]), 2, 2), "4-D"),
    (
        "batchnorm",
        lambda b: b.batchnorm(*(b.input([1, 3, 4, 4]), *tuple(b.weight([4]) for _ in range(4)))),
        "must be [3]",
    ),
    ("opaque", lambda b: b.opaque("Gelu", [b.input([2])], []), "at least one output"),
    ("relu", lambda b: b.relu(b.noop(b.input([2]))), "noop"),
]


@pytest.mark.parametrize(
    ("op", "call", "reason"), BAD_CALLS, ids=[f"{op}-{i}" for i, (op, _, _) in enumerate(BAD_CALLS)]
)
def test_bad_builder_calls_raise_graph_error(op: str, call, reason: str) -> None:
    b = GraphBuilder()
    with pytest.raises(GraphError) as info:
        call(b)
    assert info.value.op == op
    assert reason in str(info.value)
    assert info.value.node is not None


def test_error_names_node_op_and_shapes() -> None:
    b = GraphBuilder()
    x = b.input([1, 6, 8, 8])
    with pytest.raises(GraphError) as info:
        b.conv2d(x, b.weight([4, 4, 3, 3]), name="stem")
    err = info.value
    assert (err.node, err.op, err.name, err.shapes) == (
        2,
        "conv2d",
        "stem",
        [[1, 6, 8, 8], [4, 4, 3, 3]],
    )
    assert str(err).startswith("conv2d node 2 'stem': input channels 6 not divisible")


def test_unknown_op_and_foreign_tensor() -> None:
    b, other = GraphBuilder(), GraphBuilder()
    x = b.input([2, 2])
    with pytest.raises(GraphError, match="unknown op 'frobnicate'"):
        b.add_node("frobnicate", [x])
    with pytest.raises(GraphError, match="not a tensor of this graph"):
        b.relu(other.input([2, 2]))
    with pytest.raises(GraphError, match="parameters must be"):
        b.add_node("relu", [x], {"alpha": 1})


def test_duplicate_names_and_bad_values() -> None:
    b = GraphBuilder()
    b.input([2], name="x")
    with pytest.raises(GraphError, match="duplicate tensor name 'x'"):
        b.weight([2], name="x")
    with pytest.raises(GraphError, match="value shape"):
        b.weight([2, 2], value=np.zeros(3))


def test_merge_only_feeds_conv_weights() -> None:
    b = GraphBuilder()
    x = b.input([1, 8, 4, 4])
    m = b.merge(b.weight([8, 2, 3, 3]), 2)
    assert b.conv2d(x, m).shape == (1, 8, 4, 4)
    b.relu(m)
    with pytest.raises(GraphError, match="merged weight can only feed"):
        b.build(b.conv2d(x, m))


def test_merge_checks_groups_before_merging() -> None:
    b = GraphBuilder()
    x = b.input([1, 8, 4, 4])
    # 4 groups after merging, but 8 before: 4 output channels do not split into 8 groups
    with pytest.raises(GraphError, match="before merging"):
        b.conv2d(x, b.merge(b.weight([4, 1, 3, 3]), 2))


# --- JSON ----------------------------------------------------------------------------------


def test_json_round_trip_is_stable() -> None:
    g = small_graph()
    text = to_json(g, indent=1)
    again = from_json(text)
    assert again == g
    assert to_json(again, indent=1) == text
    assert np.array_equal(again.values["w1"], g.values["w1"])
    doc = json.loads(text)
    assert (doc["format"], doc["version"]) == ("relsat-graph", 1)
    opaque = next(n for n in doc["nodes"] if n["op"] == "opaque")
    assert opaque["params"]["attrs"] == {"axis": -1, "eps": 1e-5}


def test_json_accepts_any_topological_id_order() -> None:
    doc = json.loads(to_json(small_graph()))
    doc["nodes"].reverse()
    g = from_json(json.dumps(doc))
    assert g == small_graph()


def _doc() -> dict:
    return json.loads(to_json(small_graph()))


def _broken(edit) -> str:
    doc = _doc()
    edit(doc)
    return json.dumps(doc)


BAD_JSON = [
    ("syntax", '{"format": "relsat-graph",\n "version": 1,,}', "invalid JSON"),
    ("format", json.dumps({"format": "onnx"}), "not a relsat graph"),
    ("version", _broken(lambda d: d.update(version=99)), "unsupported graph format version 99"),
    ("unknown-op", _broken(lambda d: d["nodes"][5].update(op="frob")), "unknown op 'frob'"),
    ("dangling", _broken(lambda d: d["nodes"][5].update(inputs=[[42, 0]])), "dangling input"),
    (
        "bad-index",
        _broken(lambda d: d["nodes"][5].update(inputs=[[3, 7], [4, 0]])),
        "has 1 outputs",
    ),
    ("cycle", _broken(lambda d: d["nodes"][3].update(inputs=[[0, 0], [5, 0]])), "cycle"),
    ("shape", _broken(lambda d: d["nodes"][0]["params"].update(shape=[1, 8, 0, 10])), "shape"),
    ("outputs", _broken(lambda d: d["nodes"][3].update(outputs=[[1, 2]])), "disagree"),
    ("no-outputs", _broken(lambda d: d.update(outputs=[])), "outputs"),
    ("value", _broken(lambda d: d["values"]["w1"].update(data="!!")), "bad value"),
    ("missing-field", _broken(lambda d: d["nodes"][1].pop("inputs")), "field 'inputs'"),
    (
        "conv-channels",
        _broken(
            lambda d: d["nodes"][1].update(params={"shape": [8, 3, 3, 3]}, outputs=[[8, 3, 3, 3]])
        ),
        "not divisible",
    ),
]


@pytest.mark.parametrize(("case", "text", "reason"), BAD_JSON, ids=[c for c, _, _ in BAD_JSON])
def test_bad_json_is_refused(case: str, text: str, reason: str) -> None:
    with pytest.raises(GraphFormatError) as info:
        from_json(text, path="g.json")
    assert reason in str(info.value)
    assert str(info.value).startswith("g.json")


def test_bad_json_cites_line_and_column() -> None:
    with pytest.raises(GraphFormatError) as info:
        from_json('{"format": "relsat-graph",\n "version": 1,,}', path="g.json")
    assert (info.value.line, info.value.column) == (2, 15)


def test_cycle_error_names_the_nodes() -> None:
    with pytest.raises(GraphFormatError) as info:
        from_json(BAD_JSON[6][1])
    assert info.value.node in (3, 4, 5)
    assert "cycle among nodes [3, 5]" in str(info.value)
