"""Attention masks through the e-graph (issues 24, 27 and 39): transformers' ``sdpa_mask`` as
torch's dynamo exporter writes it (GatherND) and as the legacy exporter does (Gather from the
flattened mask), the index grid read as a view by rules over the facts ``grid`` and ``rows`` of
the index (``rules/masks.rules``; the mask's first rows where the grid is shorter), the decode
step's causal part (``Range(0, past + 1) <= past``)
settled by the facts of values (:mod:`relsat.onnx.affine`) and dropped by rules
(``rules/masks.rules``), and near misses left alone."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from relsat import Options, optimize
from relsat.onnx import load, load_symbolic
from relsat.onnx.affine import Affine, decode, grid_dims, row_dims
from relsat.onnx.dimexpr import constant, parse, sign

ort = pytest.importorskip("onnxruntime")
H = 2
ANALYTIC = Options(cost_model="analytic", timing=None)


def _mask_model(
    padding: str = "gathernd",
    *,
    query: str = "past",
    compare: str = "LessOrEqual",
    order: tuple[str, str] = ("b", "k"),
    stride: str = "kv",
    mask_batch: str = "mask_batch",
    causal_first: bool = True,
    mask_length: str = "past + 1",
) -> onnx.ModelProto:
    """Scores of one new token over ``past + 1`` keys, masked the way transformers builds the
    mask: causal (key position ``compare`` the query position, ``past``; ``query="past - 1"``
    moves it) and padding (``attention_mask[b, k]`` by a GatherND at the index grid ``order``,
    or by a Gather from the flattened mask at ``b * stride + k``), the causal part the And's
    first operand or (``causal_first=False``) its second. ``mask_length="total"``: the mask's
    length a dim of its own, of which the keys are the first ``past + 1`` (the legacy
    exporter's decode step)."""
    n = helper.make_node
    nodes = [
        n("Shape", ["attention_mask"], ["mask_shape"]),
        n("Gather", ["mask_shape", "one"], ["kv_1"], axis=0),
        n("Reshape", ["kv_1", "scalar"], ["kv"]),
        n("Shape", ["past_k"], ["past_shape"]),
        n("Gather", ["past_shape", "two"], ["past_1"], axis=0),
        n("Reshape", ["past_1", "scalar"], ["past"]),
        n("Sub", ["past", "one_s"], ["past - 1"]),
        n("Shape", ["scores"], ["scores_shape"]),
        n("Gather", ["scores_shape", "zero"], ["b_1"], axis=0),
        n("Reshape", ["b_1", "scalar"], ["b"]),
        n("Add", ["past", "one_s"], ["past + 1"]),
        n("Reshape", ["past + 1", "one"], ["keys_1"]),
        n(
            "Range",
            ["zero_s", "kv" if mask_length == "past + 1" else "past + 1", "one_s"],
            ["k_range"],
        ),
        n("Unsqueeze", ["k_range", "axes012"], ["k_idx"]),
        n("Unsqueeze", [query, "axes0123"], ["q_idx"]),
        n(compare, ["k_idx", "q_idx"], ["causal"]),
        n("Range", ["zero_s", "b", "one_s"], ["b_range"]),
        n("Unsqueeze", ["b_range", "axes123"], ["b_idx"]),
        n("Concat", ["b_1", "ones", "keys_1"], ["grid_shape"], axis=0),
        n("Cast", ["attention_mask"], ["mask_bool"], to=TensorProto.BOOL),
    ]
    if padding == "gathernd":
        nodes += [
            n("Expand", ["b_idx", "grid_shape"], ["b_grid"]),
            n("Expand", ["k_idx", "grid_shape"], ["k_grid"]),
            n("Unsqueeze", ["b_grid", "last"], ["b_part"]),
            n("Unsqueeze", ["k_grid", "last"], ["k_part"]),
            n("Concat", [f"{order[0]}_part", f"{order[1]}_part"], ["index"], axis=-1),
            n("GatherND", ["mask_bool", "index"], ["pad"]),
        ]
    else:  # "gather": Flatten to [size, 1]; "gather-reshape": Reshape to [size]
        flatten = n("Flatten", ["mask_bool"], ["flat"], axis=2)
        nodes += [
            flatten if padding == "gather" else n("Reshape", ["mask_bool", "minus_one"], ["flat"]),
            n("Mul", ["b_idx", stride], ["rows"]),
            n("Add", ["k_idx", "rows"], ["index"]),
            n("Gather", ["flat", "index"], ["picked"], axis=0),
            n("Reshape", ["picked", "grid_shape"], ["pad"]),
        ]
    nodes += [
        n("And", ["causal", "pad"] if causal_first else ["pad", "causal"], ["allowed"]),
        n("Where", ["allowed", "zero_f", "low"], ["bias"]),
        n("Add", ["scores", "bias"], ["masked"]),
        n("Softmax", ["masked"], ["y"], axis=-1),
    ]
    i64 = np.int64
    inits = [
        numpy_helper.from_array(np.array(v, dtype), name)
        for name, v, dtype in (
            ("zero", [0], i64),
            ("one", [1], i64),
            ("two", [2], i64),
            ("ones", [1, 1], i64),
            ("scalar", [], i64),
            ("zero_s", 0, i64),
            ("one_s", 1, i64),
            ("axes012", [0, 1, 2], i64),
            ("axes0123", [0, 1, 2, 3], i64),
            ("axes123", [1, 2, 3], i64),
            ("last", [-1], i64),
            ("minus_one", [-1], i64),
            ("zero_f", 0.0, np.float32),
            ("low", -1e9, np.float32),
        )
    ]
    kv = "past + 1"
    f32 = TensorProto.FLOAT
    inputs = [
        helper.make_tensor_value_info("scores", f32, ["batch", H, 1, kv]),
        helper.make_tensor_value_info("past_k", f32, ["batch", H, "past", 4]),
        helper.make_tensor_value_info(
            "attention_mask", TensorProto.INT64, [mask_batch, mask_length]
        ),
    ]
    outputs = [helper.make_tensor_value_info("y", f32, ["batch", H, 1, kv])]
    graph = helper.make_graph(nodes, "mask", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def _feeds(
    batch: int, past: int, mask_batch: int | None = None, total: int | None = None
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 1000 + past)
    mask = (rng.random((mask_batch or batch, total or past + 1)) > 0.3).astype(np.int64)
    mask[:, past] = 1  # the new token sees itself
    return {
        "scores": rng.standard_normal((batch, H, 1, past + 1)).astype(np.float32),
        "past_k": np.zeros((batch, H, past, 4), np.float32),
        "attention_mask": mask,
    }


def _written_types(model: onnx.ModelProto, options: Options = ANALYTIC) -> list[str]:
    """The operators of the model ``optimize`` writes (and that model, checked against the
    original in onnxruntime by the pipeline)."""
    return sorted(n.op_type for n in optimize(model, options).model.graph.node)


def _written(model: onnx.ModelProto, options: Options = ANALYTIC) -> onnx.ModelProto:
    return optimize(model, options).model


def _same_at(original: onnx.ModelProto, written: onnx.ModelProto, feeds) -> None:
    sessions = [ort.InferenceSession(m.SerializeToString()) for m in (original, written)]
    want, got = (s.run(None, feeds)[0] for s in sessions)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


SHAPES = ((1, 128, None), (2, 40, None), (3, 1, None), (2, 7, 3))


@pytest.mark.parametrize("causal_first", [True, False], ids=["causal-first", "causal-second"])
@pytest.mark.parametrize("padding", ["gathernd", "gather", "gather-reshape"])
def test_a_decode_steps_mask_is_a_view_of_the_attention_mask(padding, causal_first) -> None:
    """The padding part becomes the mask with unit axes inserted (at import: the index grid),
    the causal part is settled and dropped (in the e-graph: its comparison is true at every
    value of the dims, the facts of values say so, and ``and-true`` makes the And its
    other operand, in either operand order: And commutes); the written model equals the
    original at every shape."""
    model = _mask_model(padding, mask_batch="batch", causal_first=causal_first)
    written = _written(model)
    types = sorted(n.op_type for n in written.graph.node)
    for gone in ("GatherND", "Gather", "Range", "LessOrEqual", "And", "Flatten"):
        assert gone not in types, types
    assert "Unsqueeze" in types or "Reshape" in types
    assert [i.name for i in written.graph.input] == [i.name for i in model.graph.input]
    for batch, past, _ in SHAPES[:3]:
        _same_at(model, written, _feeds(batch, past))


def test_a_mask_of_its_own_batch_is_cut_to_the_scores_batch() -> None:
    """The mask's batch another dim than the scores' (two dims to dynamo), which the model caps
    by it (the GatherND reads the mask's first rows): that dim gets the smaller marker, so the
    model runs at the markers, and ``gathernd-grid-first-rows`` writes the gather as the mask's
    first rows reshaped; the written model equals the original wherever the original runs."""
    model = _mask_model("gathernd")
    dims = load_symbolic(model)[1]
    assert dims is not None
    markers, capped = dims.markers(), {d.name for d in dims.dims if d.capped}
    assert capped == {"batch"} and markers["batch"] < markers["mask_batch"]
    feeds = [_feeds(batch, past, mask_batch) for batch, past, mask_batch in SHAPES]
    _cut_by(model, "gathernd-grid-first-rows", "GatherND", feeds)


def test_a_mask_longer_than_the_keys_is_cut_to_their_length() -> None:
    """The legacy exporter's decode step: the mask's length a dim of its own, the keys the
    first ``past + 1`` of it, read by a Gather from the flattened mask at ``b * total + k``:
    the fact ``rows`` of the index is the mask's shape (its stride the mask's length, longer
    than the keys), and ``gather-flat-column-first-columns`` writes the gather as the mask's
    first columns reshaped."""
    model = _mask_model("gather", mask_batch="batch", mask_length="total")
    feeds = [
        _feeds(b, past, total=total) for b, past, total in ((1, 128, 129), (2, 40, 45), (3, 7, 8))
    ]
    _cut_by(model, "gather-flat-column-first-columns", "Gather", feeds)


@pytest.mark.parametrize(
    ("change", "kept"),
    [
        ({"padding": "gathernd", "order": ("b", "b")}, "GatherND"),  # mask[b, b]
        ({"padding": "gather", "mask_batch": "batch", "mask_length": "total"}, None),
        (
            {"padding": "gather", "mask_batch": "batch", "mask_length": "total", "stride": "past"},
            "Gather",
        ),
        (
            {
                "padding": "gather",
                "mask_batch": "batch",
                "mask_length": "total",
                "stride": "past + 1",
            },
            "Gather",
        ),
    ],
    ids=["transposed-own-batch", "cut", "rows-past-apart", "rows-keys-apart"],
)
def test_near_misses_of_a_cut_are_left_alone(change, kept) -> None:
    """Near misses of the cut: a grid reading one axis twice over a mask of its own batch, and
    rows ``past`` or ``past + 1`` apart in a mask ``total`` long (not the mask's stride): the
    gather stays, and the written model equals the original (the cut itself, for contrast,
    loses it)."""
    model = _mask_model(**change)
    written = _written(model)
    types = [n.op_type for n in written.graph.node]
    if kept is None:
        assert "Gather" not in types, types
    else:
        assert kept in types, types
    for batch, past, total in ((1, 128, 130), (2, 40, 45), (3, 7, 9)):
        own = "mask_batch" not in change  # the mask's batch its own dim: one row more
        longer = change.get("mask_length") == "total"
        feeds = _feeds(batch, past, batch + 1 if own else None, total if longer else None)
        _same_at(model, written, feeds)


def _cut_by(model: onnx.ModelProto, rule: str, gather: str, feeds: list) -> None:
    """``rule`` wrote the gather as a slice of the mask reshaped, extraction chose it, and the
    written model equals the original at each of ``feeds``."""
    result = optimize(model, ANALYTIC)
    built = result.db.execute(f"SELECT op, count(*) FROM enode WHERE rule = '{rule}' GROUP BY op")
    assert dict(built) == {"slice": 1, "reshape": 1}
    types = [n.op_type for n in result.model.graph.node]
    assert gather not in types and "Slice" in types, types
    for one in feeds:
        _same_at(model, result.model, one)


def test_the_settled_comparison_is_a_fact_of_the_e_graph() -> None:
    """The comparison's class is bounded by 1 (all true) in the e-graph's table ``fact``, its
    key positions' affine form kept beside it; the And's class holds the padding mask."""
    model = _mask_model("gathernd", mask_batch="batch")
    result = optimize(model, ANALYTIC)
    db = result.db
    rows = db.execute(
        "SELECT f.lo, f.hi, f.affine FROM fact f JOIN enode e ON e.class = f.class "
        "WHERE e.op = 'opaque' AND e.s LIKE 'LessOrEqual|%'"
    )
    assert rows and rows[0][0] == rows[0][1] == 1.0, rows
    assert decode(rows[0][2]) is not None and decode(rows[0][2]).uniform  # type: ignore[union-attr]
    ranges = db.execute(
        "SELECT f.affine FROM fact f JOIN enode e ON e.class = f.class "
        "WHERE e.op = 'opaque' AND e.s LIKE 'Range|%'"
    )
    keys = decode(ranges[0][0])
    assert keys is not None and keys.coefs == (constant(1),)  # 0, 1, ..., past
    merged = db.execute(
        "SELECT DISTINCT CASE WHEN e.op = 'opaque' THEN split_part(e.s, '|', 1) ELSE e.op END "
        "FROM enode e WHERE e.class IN "
        "(SELECT class FROM enode WHERE op = 'opaque' AND s LIKE 'And|%') ORDER BY 1"
    )
    # the And, the GatherND and its view (gathernd-grid's reshape of the mask): one class
    assert [r[0] for r in merged] == ["And", "GatherND", "reshape"], merged
    grid = db.execute(
        "SELECT f.grid FROM fact f JOIN enode e ON e.class = f.class "
        "WHERE e.op = 'opaque' AND e.s LIKE 'Concat|%' AND f.grid IS NOT NULL"
    )
    mask = db.execute(
        "SELECT c.shape FROM eclass c JOIN enode e ON e.class = c.id "
        "WHERE e.op = 'opaque' AND e.s LIKE 'Cast|%' AND len(c.shape) = 2"
    )
    assert [list(r[0]) for r in grid] == [list(mask[0][0])], (grid, mask)  # the mask read whole


def test_the_report_names_the_rule_that_merged_the_and_away() -> None:
    """``and-true`` builds no e-node (its right-hand side is an operand): the report says which
    rule merged the classes rather than "none"."""
    result = optimize(_bool_constant_model(np.array(True)), ANALYTIC)
    line = next(x for x in result.report().splitlines() if x.startswith("rewrites"))
    assert result.rewrites() == {} and "merged by and-true" in line, line


def test_one_batch_dim_needs_no_slice() -> None:
    types = _written_types(_mask_model("gathernd", mask_batch="batch"))
    assert "GatherND" not in types and "Slice" not in types, types


@pytest.mark.parametrize(
    ("padding", "rule"), [("gathernd", "gathernd-grid"), ("gather", "gather-flat-column-grid")]
)
def test_a_grid_reading_its_mask_whole_is_a_rules_view(padding, rule) -> None:
    """No view is made at import: the gather is in the e-graph, its class holding the view a
    rule built (the legacy Gather's data, the boolean mask flattened to ``[size, 1]``, is
    relsat's reshape, which the rule reads with its shape)."""
    result = optimize(_mask_model(padding, mask_batch="batch"), ANALYTIC)
    kind = "GatherND" if padding == "gathernd" else "Gather"
    views = result.db.execute(
        "SELECT count(*) FROM enode v JOIN enode g ON g.class = v.class "
        f"WHERE v.rule = '{rule}' AND g.op = 'opaque' AND g.s LIKE '{kind}|%'"
    )
    assert views[0][0] == 1
    assert kind not in [n.op_type for n in result.model.graph.node]


@pytest.mark.parametrize(
    ("change", "kept"),
    [
        ({"query": "past - 1"}, "LessOrEqual"),  # the last key is in the future: not all true
        ({"compare": "Less"}, "Less"),  # k < past fails for k = past
        ({"order": ("b", "b")}, "GatherND"),  # mask[b, b]: one axis read twice
        ({"padding": "gather", "stride": "past"}, "Gather"),  # rows past apart, not past + 1
    ],
    ids=["causal-shifted", "strict", "transposed", "wrong-stride"],
)
def test_near_misses_are_left_alone(change, kept) -> None:
    model = _mask_model(**{"mask_batch": "batch", **change})
    written = _written(model)
    assert kept in sorted(n.op_type for n in written.graph.node)
    if kept in ("LessOrEqual", "Less"):  # the causal part unsettled: its And stays
        assert "And" in sorted(n.op_type for n in written.graph.node)
    for batch, past in ((1, 128), (2, 40), (3, 7)):
        _same_at(model, written, _feeds(batch, past, batch))


def test_a_mask_at_fixed_shapes_loses_its_gather_and_its_and() -> None:
    """At fixed shapes the index is a constant, a class of its own (an opaque ``Constant``
    e-node whose fact ``grid`` says it reads the mask whole): ``gathernd-grid`` makes the
    GatherND the mask reshaped. The causal part folds to a boolean constant, another
    ``Constant`` whose facts say all true: ``and-true`` drops the And, and the constants are
    read by nothing written."""
    model = _mask_model("gathernd", mask_batch="batch")
    given = {"scores": [2, H, 1, 9], "past_k": [2, H, 8, 4], "attention_mask": [2, 9]}
    graph = load(model, input_shapes=given)
    types = [n.params["type"] for n in graph.nodes if n.op == "opaque"]
    assert "Range" not in types and types.count("Constant") == 2, types  # causal part, index
    options = dataclasses.replace(ANALYTIC, input_shapes=given, static=True)
    result = optimize(model, options)
    written = result.model
    assert result.rewrites().get("gathernd-grid") == 1, result.rewrites()
    assert not {"And", "GatherND"} & {n.op_type for n in written.graph.node}
    assert all(i.data_type != TensorProto.BOOL for i in written.graph.initializer)
    _same_at(model, written, _feeds(2, 8))


def _bool_constant_model(value: np.ndarray, op: str = "And", first: bool = True) -> onnx.ModelProto:
    """``y = Where(op(c, x > 0), x, -x)`` with ``c`` a boolean initializer (``first``: the
    And's / Or's first operand)."""
    n = helper.make_node
    pair = ["c", "pos"] if first else ["pos", "c"]
    nodes = [
        n("Greater", ["x", "zero"], ["pos"]),
        n(op, pair, ["cond"]),
        n("Neg", ["x"], ["neg"]),
        n("Where", ["cond", "x", "neg"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(value, "c"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
    ]
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "boolconst",
        [helper.make_tensor_value_info("x", f32, [2, 3])],
        [helper.make_tensor_value_info("y", f32, np.broadcast_shapes(value.shape, (2, 3)))],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("value", "op", "first", "dropped"),
    [
        (np.array(True), "And", True, True),
        (np.ones((2, 3), bool), "And", False, True),
        (np.zeros((1, 3), bool), "Or", True, True),
        (np.array([True, False, True]), "And", True, False),  # not all true: kept
        (np.array(True), "Or", True, False),  # true or b is not b
        (np.ones((3, 2, 3), bool), "And", True, False),  # broadcasts the other operand
    ],
    ids=["and-scalar", "and-second", "or-false", "not-all-true", "or-true", "broadcasting"],
)
def test_a_boolean_constant_is_a_class_the_mask_rules_read(value, op, first, dropped) -> None:
    """A boolean initializer read by an opaque node is an opaque ``Constant`` e-node, its
    facts its bounds: ``and-true`` / ``or-false`` fire where it is settled and the broadcast
    keeps the other operand's shape, and nowhere else; outputs equal."""
    model = _bool_constant_model(value, op, first)
    written = _written(model)
    assert (op not in [n.op_type for n in written.graph.node]) == dropped
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    _same_at(model, written, {"x": x})


def test_polynomial_signs_hold_at_every_value_of_the_dims() -> None:
    past = ((("past",), 1),)
    assert sign(constant(0)) == 0
    assert sign(parse("past + 1", {"past"})) == 1
    assert sign(parse("-2*past - 1", {"past"})) == -1
    assert sign(parse("past - 1", {"past"})) is None  # 0 at past = 1, -1 at past = 0
    assert sign(past) == 1


def test_index_grids_read_from_affine_forms() -> None:
    """A GatherND's components, and a Gather's row into the flattened data, as an index grid
    (:func:`relsat.onnx.affine.grid_dims`, :func:`~relsat.onnx.affine.row_dims`): the lengths
    it reads its data along, the data's dims a row index strides over (longer than the index
    where it reads the first rows); a component read twice, out of order or shifted, or a row
    index whose stride is shorter than the next axis, is none."""
    one = constant(1)
    lead = (3, 1, 1, 8)

    def position(a: int, offset=()) -> Affine:
        return Affine(lead, offset, tuple(one if i == a else () for i in range(4)))

    b, k = position(0), position(3)
    assert grid_dims([b, k], lead) == (3, 8)
    zero, k1 = Affine((1, 1, 1, 8), (), ((),) * 4), Affine((1, 1, 1, 8), (), ((),) * 3 + (one,))
    assert grid_dims([zero, k1], (1, 1, 1, 8)) == (1, 8)  # a batch of 1
    assert grid_dims([k, b], lead) is None  # out of order
    assert grid_dims([b, b], lead) is None  # axis 3 read by none
    assert grid_dims([b, position(3, one)], lead) is None  # k + 1

    def rows(stride: int, offset=()) -> Affine:
        return Affine(lead, offset, (constant(stride), (), (), one))  # b * stride + k

    assert row_dims(rows(8)) == (3, 8)  # read whole
    assert row_dims(rows(10)) == (3, 10)  # the first 8 of 10 columns
    assert row_dims(rows(7)) is None  # rows overlap
    assert row_dims(rows(8, one)) is None  # shifted
    column_major = Affine(lead, (), (one, (), (), constant(3)))
    assert row_dims(column_major) is None
