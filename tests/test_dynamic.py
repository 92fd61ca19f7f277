"""Dynamic dims (issue 27): a model with a dynamic batch or sequence is optimized with its dims
symbolic (markers in the e-graph), written back with them, and checked in onnxruntime at three
shapes; ``static`` fixes them; a rewrite valid only at one value is left out; a model too large
to verify is refused up front. Models built with ``onnx.helper``; no torch."""

from __future__ import annotations

import math
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from relsat import GraphBuilder, Options, optimize
from relsat import onnx as ronnx
from relsat.errors import SettingsError
from relsat.graph.execute import random_values
from relsat.graph.specialize import specialize, substitute
from relsat.onnx.dimplan import plan, static_numbers
from relsat.onnx.inputs import draw
from relsat.onnx.latency import Timing
from relsat.rewrite.rulefile import RULES_DIR, load_rules

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(0)
ANALYTIC = Options(cost_model="analytic", timing=None)  # no timing: quick and deterministic
H, D = 4, 8
HIDDEN = H * D


def _model(nodes, inputs, outputs, inits, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "dyn", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _f32(name: str, shape: tuple[int, ...], scale: float = 1.0) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def _i64(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _conv_net(dims: list[int | str] | None = None) -> onnx.ModelProto:
    """A dynamic-batch conv net: two convs sharing the input (relsat merges them), ReLUs, a
    global pool, the flatten as exporters write it (Reshape to [batch, -1] via Shape), Gemm."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        n("Conv", ["x", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"]),
        n("Relu", ["c2"], ["r2"]),
        n("Add", ["r1", "r2"], ["s"]),
        n("GlobalAveragePool", ["s"], ["p"]),
        n("Shape", ["p"], ["p_shape"]),
        n("Gather", ["p_shape", "zero"], ["batch"], axis=0),
        n("Unsqueeze", ["batch", "axes0"], ["batch1"]),
        n("Concat", ["batch1", "minus1"], ["flat_shape"], axis=0),
        n("Reshape", ["p", "flat_shape"], ["flat"]),
        n("Gemm", ["flat", "wf", "bf"], ["y"], transB=1),
    ]
    inits = [
        _f32("w1", (8, 3, 3, 3), 0.3),
        _f32("b1", (8,)),
        _f32("w2", (8, 3, 3, 3), 0.3),
        _f32("b2", (8,)),
        _f32("wf", (10, 8)),
        _f32("bf", (10,)),
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        _i64("axes0", [0]),
        _i64("minus1", [-1]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims or ["N", 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [(dims or ["N"])[0], 10])
    return _model(nodes, [x], [y], inits)


def _attention_block() -> onnx.ModelProto:
    """torch's legacy SDPA spelling (as tests/test_attention.py's ``_sdpa_model``) with a
    dynamic batch and sequence: the head split's target computed from ``Shape`` as exporters
    write it, the merge's with ``0``s, an additive ``[1, 1, seq, seq]`` mask."""
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["x_shape"]),
        n("Gather", ["x_shape", "zero"], ["b"], axis=0),
        n("Gather", ["x_shape", "one"], ["s"], axis=0),
        n("Unsqueeze", ["b", "axes0"], ["b1"]),
        n("Unsqueeze", ["s", "axes0"], ["s1"]),
        n("Concat", ["b1", "s1", "hd"], ["heads"], axis=0),
    ]
    for v in "qkv":
        perm = [0, 2, 3, 1] if v == "k" else [0, 2, 1, 3]
        nodes += [
            n("MatMul", ["x", f"w{v}"], [f"{v}_proj"]),
            n("Reshape", [f"{v}_proj", "heads"], [f"{v}_split"]),
            n("Transpose", [f"{v}_split"], [f"{v}_t"], perm=perm),
        ]
    nodes += [
        n("Mul", ["q_t", "root_scale"], ["q_s"]),
        n("Mul", ["k_t", "root_scale"], ["k_s"]),
        n("MatMul", ["q_s", "k_s"], ["scores"]),
        n("Add", ["scores", "mask"], ["masked"]),
        n("Softmax", ["masked"], ["probs"], axis=-1),
        n("IsNaN", ["probs"], ["nan"]),
        n("Where", ["nan", "zero_f", "probs"], ["guarded"]),
        n("MatMul", ["guarded", "v_t"], ["ctx"]),
        n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx_t", "merged"], ["y"]),
    ]
    root = float(np.float32(math.sqrt(1 / math.sqrt(D))))
    inits = [_f32(f"w{v}", (HIDDEN, HIDDEN), 0.2) for v in "qkv"]
    inits += [
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array(1, dtype=np.int64), "one"),
        _i64("axes0", [0]),
        _i64("hd", [H, D]),
        _i64("merged", [0, 0, HIDDEN]),
        numpy_helper.from_array(np.array(root, np.float32), "root_scale"),
        numpy_helper.from_array(np.array([0.0], np.float32), "zero_f"),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", HIDDEN]),
        helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, "seq", "seq"]),
    ]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", HIDDEN])
    return _model(nodes, inputs, [y], inits)


def _dims_of(value_infos) -> list[list[int | str]]:
    return [
        [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in value_infos
    ]


def _same_at(original: onnx.ModelProto, written: onnx.ModelProto, shapes) -> None:
    """Both models run in onnxruntime at ``shapes`` (input → dims) and agree."""
    feeds = draw({k: ("tensor(float)", v) for k, v in shapes.items()}, {}, seed=1)
    sessions = [ort.InferenceSession(m.SerializeToString()) for m in (original, written)]
    want, got = (s.run(None, feeds) for s in sessions)
    for a, b in zip(want, got, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4)


# --- dynamic in, dynamic out -----------------------------------------------------------------


def test_dynamic_batch_conv_net_keeps_its_batch_and_runs_at_three_batches() -> None:
    model = _conv_net()
    result = optimize(model, ANALYTIC)
    assert result.shapes is not None and result.shapes.symbolic
    assert result.shapes.note == "N kept symbolic; priced at N=1"
    assert result.kept == "optimized" and result.rewrites()
    written = result.model
    assert _dims_of(written.graph.input) == [["N", 3, 16, 16]]
    assert _dims_of(written.graph.output) == [["N", 10]]
    assert result.checked_at == ("N=1", "N=2", "N=3")  # the check's three shapes
    for batch in (1, 2, 5):
        _same_at(model, written, {"x": (batch, 3, 16, 16)})
    assert "shapes   N kept symbolic; priced at N=1" in result.report()


def test_dynamic_sequence_attention_block_fuses_and_keeps_batch_and_sequence() -> None:
    model = _attention_block()
    result = optimize(model, ANALYTIC)
    assert result.shapes is not None and result.shapes.symbolic
    assert result.graph.op_counts()["attention"] == 1
    written = result.model
    assert "Attention" in {node.op_type for node in written.graph.node}
    assert _dims_of(written.graph.input) == [["batch", "seq", HIDDEN], [1, 1, "seq", "seq"]]
    assert _dims_of(written.graph.output) == [["batch", "seq", HIDDEN]]
    for b, s in ((1, 128), (2, 128), (1, 65), (3, 7)):
        _same_at(model, written, {"x": (b, s, HIDDEN), "mask": (1, 1, s, s)})


def _rotary_block(heads: int = 2, d: int = 32) -> onnx.ModelProto:
    """Llama's rotary embedding of q and k under a dynamic sequence length, as torch exports
    it: the tables computed at run time from the positions, ``cos(cat(f, f))`` with ``f =
    positions * inv_freq``, unsqueezed to ``[1, 1, seq, d]`` and read by both rotations."""
    half = d // 2
    inv = (1.0 / 10000 ** (np.arange(0, d, 2) / d)).astype(np.float32)
    nodes = [
        helper.make_node("Mul", ["pos", "inv_freq"], ["freqs"]),
        helper.make_node("Concat", ["freqs", "freqs"], ["emb"], axis=-1),
        helper.make_node("Cos", ["emb"], ["cos_3"]),
        helper.make_node("Sin", ["emb"], ["sin_3"]),
        helper.make_node("Unsqueeze", ["cos_3", "one"], ["cos"]),
        helper.make_node("Unsqueeze", ["sin_3", "one"], ["sin"]),
    ]
    for t in "qk":
        nodes += [
            helper.make_node("Mul", [t, "cos"], [f"{t}_cos"]),
            helper.make_node("Slice", [t, "zero", "half", "last"], [f"{t}_1"]),
            helper.make_node("Slice", [t, "half", "end", "last"], [f"{t}_2"]),
            helper.make_node("Neg", [f"{t}_2"], [f"{t}_neg"]),
            helper.make_node("Concat", [f"{t}_neg", f"{t}_1"], [f"{t}_rot"], axis=-1),
            helper.make_node("Mul", [f"{t}_rot", "sin"], [f"{t}_sin"]),
            helper.make_node("Add", [f"{t}_cos", f"{t}_sin"], [f"{t}_out"]),
        ]
    inits = [numpy_helper.from_array(inv, "inv_freq")]
    inits += [_i64(k, [v]) for k, v in (("one", 1), ("zero", 0), ("half", half), ("end", d))]
    inits.append(_i64("last", [3]))
    x = [helper.make_tensor_value_info(t, TensorProto.FLOAT, [1, heads, "seq", d]) for t in "qk"]
    pos = helper.make_tensor_value_info("pos", TensorProto.FLOAT, [1, "seq", 1])
    outs = [
        helper.make_tensor_value_info(f"{t}_out", TensorProto.FLOAT, [1, heads, "seq", d])
        for t in "qk"
    ]
    return _model(nodes, [*x, pos], outs, inits)


def test_rotary_tables_computed_at_run_time_fuse_under_a_dynamic_sequence() -> None:
    model = _rotary_block()
    result = optimize(model, ANALYTIC)
    assert result.shapes is not None and result.shapes.symbolic
    assert result.graph.op_counts()["rotary"] == 2
    written = result.model
    assert [n.op_type for n in written.graph.node].count("RotaryEmbedding") == 2
    assert _dims_of(written.graph.input)[0] == [1, 2, "seq", 32]
    for s in (128, 65, 7):
        _same_at(model, written, {"q": (1, 2, s, 32), "k": (1, 2, s, 32), "pos": (1, s, 1)})


def _position_table_model() -> onnx.ModelProto:
    """x [1, seq, 8] plus a learned position embedding: rows 0..seq-1 of a [16, 8] table, so
    the model runs only for seq <= 16 (GPT-2's wpe, BERT's position embeddings)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
        helper.make_node("Range", ["zero", "seq", "one"], ["positions"]),
        helper.make_node("Gather", ["table", "positions"], ["rows"], axis=0),
        helper.make_node("Add", ["x", "rows"], ["sum"]),
        helper.make_node("Relu", ["sum"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.ones((16, 8), np.float32), "table"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", 8])
    return _model(nodes, [x], [y], inits)


def test_a_pricing_shape_beyond_the_models_bound_is_refused_up_front() -> None:
    model = _position_table_model()
    with pytest.raises(ronnx.PricingShapeError, match=r"x dim 1 \(seq\) = 128") as err:
        optimize(model, ANALYTIC)  # the default sequence, 128, is past the 16-row table
    assert err.value.dims == ("seq",) and "onnxruntime failed" in str(err.value)
    result = optimize(
        model, Options(cost_model="analytic", timing=None, input_shapes={"x": [1, 8, 8]})
    )
    assert result.shapes is not None and result.kept in ("optimized", "original")


def test_a_default_pricing_shape_that_does_not_run_moves_to_one_that_does() -> None:
    """A legacy decode step names its mask's length on its own (``total``) and runs only where
    it is the cache's (``past``) plus one: at the defaults (128 and 128) it fails, so one
    defaulted dim moves by one (total = 129), said in the note; given shapes are never moved."""
    nodes = [
        helper.make_node("Shape", ["cache"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["past"], axis=0),
        helper.make_node("Gather", ["mask", "past"], ["last"], axis=1),  # mask[:, past]
        helper.make_node("Mul", ["cache", "last"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one")]
    inputs = [
        helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, "total"]),
        helper.make_tensor_value_info("cache", TensorProto.FLOAT, [1, "past"]),
    ]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "past"])
    model = _model(nodes, inputs, [y], inits)
    result = optimize(model, ANALYTIC)
    assert result.shapes is not None and result.kept in ("optimized", "original")
    assert "total 129: the model does not run at the default 128" in result.shapes.note
    assert "total=129" in result.shapes.note and "past=128" in result.shapes.note
    given = {"mask": [1, 128], "cache": [1, 128]}
    with pytest.raises(ronnx.PricingShapeError, match=r"total\) = 128"):
        optimize(model, Options(cost_model="analytic", timing=None, input_shapes=given))


def test_static_fixes_the_interface_to_the_pricing_shape() -> None:
    model = _attention_block()
    shapes = {"x": [2, 16, HIDDEN], "mask": [1, 1, 16, 16]}
    result = optimize(model, Options(cost_model="analytic", timing=None, input_shapes=shapes))
    assert result.shapes is not None and result.shapes.note.startswith("batch, seq kept symbolic")
    assert result.shapes.note.endswith("priced at batch=2, seq=16")
    fixed = optimize(
        model, Options(cost_model="analytic", timing=None, static=True, input_shapes=shapes)
    )
    assert fixed.shapes is not None and not fixed.shapes.symbolic
    assert fixed.shapes.note == "fixed at batch=2, seq=16 (static)"
    assert _dims_of(fixed.model.graph.input) == [[2, 16, HIDDEN], [1, 1, 16, 16]]
    assert fixed.graph.op_counts()["attention"] == 1


def test_pricing_substitutes_the_markers() -> None:
    """The e-graph holds markers; prices are those of the pricing shape: the same cost as the
    graph imported at that shape."""
    model = _conv_net()
    symbolic = optimize(model, Options(cost_model="analytic", timing=None, batch=4))
    fixed = optimize(model, Options(cost_model="analytic", timing=None, batch=4, static=True))
    marker = symbolic.shapes.dims.dim("N").marker  # type: ignore[union-attr]
    assert symbolic.original.inputs[0].shape == (marker, 3, 16, 16)
    assert fixed.original.inputs[0].shape == (4, 3, 16, 16)
    assert symbolic.cost_before == pytest.approx(fixed.cost_before, rel=1e-9)
    assert symbolic.cost_after == pytest.approx(fixed.cost_after, rel=1e-9)


def test_a_rewrite_valid_only_at_batch_one_is_left_out() -> None:
    """concat(x + w, w + z) on the batch axis becomes (concat(x, w) + concat(w, z)) only when
    x, w, z have equal shapes (no broadcasting): true at batch 1, where w is [1, ...], false for
    a symbolic batch."""
    n = helper.make_node
    nodes = [
        n("Add", ["x", "w"], ["a"]),
        n("Add", ["w", "z"], ["b"]),
        n("Concat", ["a", "b"], ["y"], axis=0),
    ]
    shape = ["N", 4, 8, 8]
    inputs = [helper.make_tensor_value_info(v, TensorProto.FLOAT, shape) for v in "xz"]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["2*N", 4, 8, 8])
    model = _model(nodes, inputs, [out], [_f32("w", (1, 4, 8, 8))])
    rules = load_rules(RULES_DIR / "concat.rules")
    rule = "concat-batch-of-ewadds-to-ab-bc"

    def fired(result) -> int:
        return result.db.execute("SELECT count(*) FROM enode WHERE rule = $r", {"r": rule})[0][0]

    fixed = optimize(model, Options(cost_model="analytic", timing=None, rules=rules, static=True))
    assert fired(fixed) >= 1  # at batch 1 the rewrite is sound
    symbolic = optimize(model, Options(cost_model="analytic", timing=None, rules=rules))
    assert symbolic.shapes is not None and symbolic.shapes.symbolic
    assert fired(symbolic) == 0  # for every batch it is not


def test_a_dynamic_image_size_through_strided_convs_stays_symbolic() -> None:
    """Stride-2 convolutions on dynamic image sides: each output side is ``(H + 1)//2``, a dim
    of its own read off the convolution's shape function; the merged convs are written with
    the sides symbolic and agree with the original at even and odd sides."""
    model = _conv_net(["N", 3, "H", "W"])
    for conv in model.graph.node[:2]:
        conv.attribute.append(helper.make_attribute("strides", [2, 2]))
    result = optimize(model, ANALYTIC)
    assert result.shapes is not None and result.shapes.symbolic
    assert result.shapes.note == (
        "N, H, W kept symbolic; priced at N=1, H=128, W=128; (H + 1)//2, (W + 1)//2 with them"
    )
    assert result.kept == "optimized" and result.rewrites()
    written = result.model
    assert _dims_of(written.graph.input) == [["N", 3, "H", "W"]]
    assert _dims_of(written.graph.output) == [["N", 10]]
    for shape in ((1, 3, 16, 16), (2, 3, 17, 9), (1, 3, 1, 2)):
        _same_at(model, written, {"x": shape})


def test_a_table_resized_to_the_image_is_not_evaluated_at_import(monkeypatch) -> None:
    """A position table resized to the image's sides (ViT at any size) follows the dims: its
    shape differs at the two marker assignments, so shape folding never evaluates it (at the
    markers the reference evaluator's bicubic Resize took 90 s); the model still optimizes."""
    from relsat.onnx import shapefold

    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["shape"]),
        n("Slice", ["shape", "two", "four"], ["sides"]),
        n("Concat", ["lead", "sides"], ["sizes"], axis=0),
        n("Resize", ["table", "", "", "sizes"], ["grid"], mode="cubic"),
        n("Add", ["x", "grid"], ["y"]),
    ]
    inits = [_f32("table", (1, 8, 4, 4)), _i64("two", [2]), _i64("four", [4])]
    inits.append(_i64("lead", [1, 8]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, "H", "W"])
    model = _model(nodes, [x], [y], inits)
    evaluated: list[str] = []
    run = shapefold._run

    def spy(node: onnx.NodeProto, feeds: dict[str, np.ndarray], opset: int) -> list[np.ndarray]:
        evaluated.append(node.op_type)
        return run(node, feeds, opset)

    monkeypatch.setattr(shapefold, "_run", spy)
    result = optimize(model, ANALYTIC)
    assert "Slice" in evaluated and "Resize" not in evaluated
    assert result.shapes is not None and result.shapes.symbolic
    for shape in ((1, 8, 16, 16), (1, 8, 7, 5)):
        _same_at(model, result.model, {"x": shape})


def test_a_side_divided_by_several_strides_is_one_quotient() -> None:
    """Two stride-2 convolutions: ``floor((floor((H + 1)/2) + 1)/2)`` is ``(H + 3)//4``."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Conv", ["a", "w2"], ["b"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("MaxPool", ["b"], ["y"], kernel_shape=[3, 3], strides=[3, 3]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, "H", 12])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, None, 1])
    model = _model(nodes, [x], [y], [_f32("w1", (4, 2, 3, 3)), _f32("w2", (4, 4, 3, 3))])
    graph, dims = ronnx.load_symbolic(model)
    assert dims is not None
    assert [(s.name, s.divisor) for s in dims.sums] == [
        ("(H + 1)//2", 2),
        ("(H + 3)//4", 4),
        ("(H + 3)//12", 12),
    ]
    pool = next(n for n in graph.nodes if n.op == "poolmax")
    assert dims.value(pool.shape[2], {"H": 100}) == (((100 + 1) // 2 + 1) // 2 - 3) // 3 + 1


def test_a_dim_that_cannot_stay_symbolic_is_fixed_and_said() -> None:
    """A Split of a dynamic side into three: its last part, ``H - 2*((H + 2)//3)``, is no sum
    relsat keeps (not monotone in ``H``); the model is optimized at the pricing shape, the note
    names the input and dim."""
    n = helper.make_node
    nodes = [n("Split", ["x"], ["a", "b", "c"], axis=2, num_outputs=3), n("Relu", ["c"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, "H"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, None])
    model = _model(nodes, [x], [y], [], opset=18)
    result = optimize(model, Options(cost_model="analytic", timing=None))
    assert result.shapes is not None and not result.shapes.symbolic
    note = result.shapes.note
    assert note.startswith("fixed at H=128: ") and "(Split)" in note and "x dim 2 (H)" in note
    assert "\n" not in note
    assert result.original.inputs[0].shape == (1, 4, 128)  # imported at the pricing shape


def test_a_concat_of_a_class_token_and_the_patches_is_their_sum() -> None:
    """ViT's tokens: a class token concatenated with the patches of a stride-4 convolution,
    ``(H//4)*(W//4) + 1``, a sum of a product of sides and one."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w"], ["p"], kernel_shape=[4, 4], strides=[4, 4]),
        n("Reshape", ["p", "flat"], ["f"]),
        n("Transpose", ["f"], ["t"], perm=[0, 2, 1]),
        n("Concat", ["cls", "t"], ["y"], axis=1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, None, 8])
    inits = [_f32("w", (8, 3, 4, 4)), _f32("cls", (1, 1, 8)), _i64("flat", [1, 8, -1])]
    model = _model(nodes, [x], [y], inits)
    _, dims = ronnx.load_symbolic(model)
    assert dims is not None
    assert [s.name for s in dims.sums] == ["H//4", "W//4", "(H//4)*(W//4) + 1"]
    assert dims.sum("(H//4)*(W//4) + 1").at(dims.resolve({"H": 64, "W": 32})) == 16 * 8 + 1


def _with_integer_division(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with a second output: integer input ``k`` [N, 10] divided by input ``d`` [10]
    (onnxruntime fails on a zero divisor, which relsat's small drawn integers hold)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    g.node.append(helper.make_node("Div", ["k", "d"], ["q"]))
    g.input.extend(
        [
            helper.make_tensor_value_info("k", TensorProto.INT64, ["N", 10]),
            helper.make_tensor_value_info("d", TensorProto.INT64, [10]),
        ]
    )
    g.output.append(helper.make_tensor_value_info("q", TensorProto.INT64, ["N", 10]))
    return out


def test_inputs_give_values_relsat_cannot_draw() -> None:
    """A divisor input: drawn values hold a zero and onnxruntime fails, so the pricing shape is
    refused up front, naming ``--inputs``; with the divisor given, the model optimizes, its
    checks run at three shapes (the divisor's shape is the same at each) and it is written with
    its dims symbolic."""
    model = _with_integer_division(_conv_net())
    with pytest.raises(ronnx.PricingShapeError, match=r"--inputs \(Options.inputs\)"):
        optimize(model, ANALYTIC)
    divisor = np.arange(1, 11, dtype=np.int32)  # cast to the input's int64
    result = optimize(model, replace(ANALYTIC, inputs={"d": divisor}))
    assert result.shapes is not None and result.shapes.symbolic
    assert result.kept == "optimized" and result.rewrites()
    assert result.checked_at == ("N=1", "N=2", "N=3")
    assert _dims_of(result.model.graph.input)[1:] == [["N", 10], [10]]


def test_bad_inputs_are_refused_naming_the_input() -> None:
    model = _with_integer_division(_conv_net())
    bad = [
        ({"e": np.ones(10)}, "names of the model's inputs"),
        ({"d": np.ones(3, dtype=np.int64)}, r"an array of the input's shape \[10\]"),
        ({"d": np.ones(10, dtype=np.float32)}, r"values of the input's type \(int64\)"),
        ({"x": np.ones((2, 3, 15, 16), dtype=np.float32)}, "input's shape"),
    ]
    for inputs, words in bad:
        with pytest.raises(SettingsError, match=words):
            optimize(model, replace(ANALYTIC, inputs=inputs))
    with pytest.raises(SettingsError, match="a mapping of input name to an array"):
        Options(inputs=[np.ones(3)])


def test_a_transposed_convolution_doubles_a_side_less_one() -> None:
    """A stride-2 ConvTranspose on a dynamic side: ``2*H - 1``, a sum read off its shape
    function (a multiplier of 2), kept symbolic."""
    n = helper.make_node
    nodes = [
        n("ConvTranspose", ["x", "w"], ["t"], strides=[2, 2], pads=[1, 1, 1, 1]),
        n("Relu", ["t"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, None, None])
    model = _model(nodes, [x], [y], [_f32("w", (4, 2, 3, 3))])
    _, dims = ronnx.load_symbolic(model)
    assert dims is not None
    assert [(s.name, s.divisor) for s in dims.sums] == [("2*H - 1", 1), ("2*W - 1", 1)]
    result = optimize(model, ANALYTIC)
    assert result.shapes is not None and result.shapes.symbolic


def test_an_input_declared_empty_is_not_refused_up_front() -> None:
    """An ``axes`` input declared of length 0 (reduce over all axes): relsat prices its length
    as a dynamic dim; onnxruntime runs the model only with it empty, so the pricing shape does
    not run, but the model is not refused for that."""
    n = helper.make_node
    nodes = [n("ReduceSum", ["data", "axes"], ["y"], keepdims=1)]
    inputs = [
        helper.make_tensor_value_info("data", TensorProto.FLOAT, [3, 2, 2]),
        helper.make_tensor_value_info("axes", TensorProto.INT64, [0]),
    ]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 1])
    model = _model(nodes, inputs, [y], [], opset=13)
    result = optimize(model, ANALYTIC)
    assert result.kept == "original"
    assert result.shapes is not None and result.shapes.note.startswith("axes[0] kept symbolic")


def test_timing_at_the_pricing_shape_and_the_timing_shapes() -> None:
    timing = Timing(max_seconds=0.2, min_rounds=3, max_rounds=3, warmup=1)
    options = Options(cost_model="analytic", timing=timing, timing_shapes=[{"N": 4}])
    result = optimize(_conv_net(), options)
    assert [label for label, _ in result.latencies] == ["N=1", "N=4"]
    assert result.latency is result.latencies[0][1]
    verdicts = {c.verdict for _, c in result.latencies}
    assert result.kept == ("optimized" if verdicts == {"faster"} else "original")
    with pytest.raises(Exception, match="timing_shapes"):
        optimize(_conv_net(), Options(cost_model="analytic", timing_shapes=[{"T": 4}]))


def test_onnxruntime_difference_at_another_shape_keeps_the_original(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from relsat.pipeline import ort as stages

    real = ronnx.verify

    def verify_wrong_at_batch_two(original, optimized, **kwargs):
        comparison = real(original, optimized, **kwargs)
        if kwargs.get("shapes", {}).get("x", (1,))[0] == 2:
            from dataclasses import replace

            return replace(comparison, ok=False)
        return comparison

    monkeypatch.setattr(ronnx, "verify", verify_wrong_at_batch_two)
    result = optimize(_conv_net(), ANALYTIC)
    assert result.kept == "original" and "N=2" in result.why
    assert stages.is_rejected(result)  # type: ignore[arg-type]


# --- bad input -------------------------------------------------------------------------------


def test_a_model_too_large_to_verify_is_refused_up_front_naming_the_memory() -> None:
    n = helper.make_node
    big = helper.make_tensor_value_info("x", TensorProto.FLOAT, [100000, 100000])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [100000, 100000])
    model = _model([n("Relu", ["x"], ["r"]), n("Relu", ["r"], ["y"])], [big], [y], [])
    with pytest.raises(ronnx.TooLargeError) as info:
        optimize(model, ANALYTIC)
    text = str(info.value)
    assert (
        "input 'x' is 100000x100000 (37.3 GiB as float32)" in text and "GiB are available" in text
    )
    assert "\n" not in text and info.value.needed > info.value.available
    # with the same dims symbolic it is verified at its pricing shape instead
    sym = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 100000])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 100000])
    small = _model([n("Relu", ["x"], ["r"]), n("Relu", ["r"], ["y"])], [sym], [out], [])
    result = optimize(small, ANALYTIC)
    assert result.shapes is not None and result.shapes.note.endswith("priced at n=1")


def test_cli_prints_the_shapes_and_refuses_an_oversized_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from relsat.cli import main

    src, out = tmp_path / "conv.onnx", tmp_path / "out.onnx"
    onnx.save(_conv_net(), str(src))
    args = ["optimize", str(src), "-o", str(out), "--cost-model", "analytic", "--no-timing"]
    assert main([*args, "--timing-shape", "N=4"]) == 0
    text = capsys.readouterr().out
    assert "shapes: N kept symbolic; priced at N=1" in text
    assert "outputs match the original at N=1 | N=2 | N=3" in text
    assert _dims_of(onnx.load(str(out)).graph.input) == [["N", 3, 16, 16]]
    assert main([*args, "--static", "--batch", "2"]) == 0
    assert _dims_of(onnx.load(str(out)).graph.input) == [[2, 3, 16, 16]]
    capsys.readouterr()
    for bad in ("N", "N=0", "N=2,N=3"):
        assert main([*args, "--timing-shape", bad]) == 2
        assert "--timing-shape wants DIM=V" in capsys.readouterr().err
    big = helper.make_tensor_value_info("x", TensorProto.FLOAT, [100000, 100000])
    relu = helper.make_node("Relu", ["x"], ["y"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [100000, 100000])
    onnx.save(_model([relu], [big], [y], []), str(src))
    assert main(["optimize", str(src), "-o", str(out), "--no-timing"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs about" in err and "GiB" in err


def test_random_values_are_drawn_in_the_tensors_own_dtype() -> None:
    b = GraphBuilder()
    x = b.input([3, 5], name="x")
    g = b.build(b.relu(b.matmul(x, b.weight([5, 4], name="w"))))
    for dtype in (np.float32, np.float64):
        values = random_values(g, dtype=dtype)
        assert {v.dtype for v in values.values()} == {np.dtype(dtype)}
    wide, narrow = random_values(g), random_values(g, dtype=np.float32)
    rng = np.random.default_rng([0, zlib.crc32(b"x")])  # float64 draws are what they were
    assert np.array_equal(wide["x"], rng.standard_normal((3, 5)))
    assert narrow["x"].shape == (3, 5) and np.isfinite(narrow["w"]).all()
    drawn = draw({"a": ("tensor(float)", [2, 3]), "h": ("tensor(float16)", [2])}, {}, seed=0)
    assert drawn["a"].dtype == np.float32 and drawn["h"].dtype == np.float16


# --- the pieces ------------------------------------------------------------------------------


def test_plan_markers_are_distinct_primes_dividing_no_static_number() -> None:
    model = _attention_block()
    dims = plan(model)
    assert dims is not None and dims.names == ("batch", "seq")
    assert dims.pricing() == {"batch": 1, "seq": 128}
    markers = [d.marker for d in dims.dims]
    assert len(set(markers)) == 2
    assert all(m >= 23 and all(m % p for p in range(2, m)) for m in markers)
    assert all(n % m for n in static_numbers(model) for m in markers)
    assert dims.marked() == {
        "x": (markers[0], markers[1], HIDDEN),
        "mask": (1, 1, markers[1], markers[1]),
    }
    assert dims.check_shapes() == (
        {"batch": 1, "seq": 128},
        {"batch": 2, "seq": 128},
        {"batch": 1, "seq": 65},
    )
    given = plan(model, {"x": [2, 64, HIDDEN]})
    assert given is not None and given.pricing() == {"batch": 2, "seq": 64}
    with pytest.raises(ronnx.OnnxError, match="gives dim 'seq' = 32 here and 64"):
        plan(model, {"x": [2, 64, HIDDEN], "mask": [1, 1, 32, 32]})
    with pytest.raises(ronnx.OnnxError, match="the model fixes it to 32"):
        plan(model, {"x": [2, 64, 31]})
    assert (
        plan(
            _model(
                [helper.make_node("Relu", ["x"], ["y"])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                [],
            )
        )
        is None
    )


@pytest.mark.parametrize("opset", [None, 14])
def test_exported_shape_values_are_written_the_way_exporters_write_them(opset: int | None) -> None:
    model = _attention_block()
    graph, dims = ronnx.load_symbolic(model)
    assert dims is not None
    written = ronnx.to_model(graph, like=model, dims=dims, opset=opset)
    targets = {
        tuple(numpy_helper.to_array(t).tolist())
        for t in written.graph.initializer
        if (t.data_type == TensorProto.INT64 and t.dims == [4]) or t.dims == [3]
    }
    assert (0, 0, H, D) in targets  # the head split copies batch and seq
    shapes = [n for n in written.graph.node if n.op_type == "Shape"]  # the merge computes
    gathers = [n for n in written.graph.node if n.op_type == "Gather"]
    if opset is None:  # opset 17: each dim read by one Shape with start and end
        assert len(shapes) == 2 and not gathers
        assert all({a.name for a in n.attribute} == {"start", "end"} for n in shapes)
    else:  # before opset 15 Shape has no start/end: one Shape, a Gather per dim
        assert len(shapes) == 1 and len(gathers) == 2
    for b, s in ((1, 5), (4, 9)):
        _same_at(model, written, {"x": (b, s, HIDDEN), "mask": (1, 1, s, s)})


def test_specialize_rebuilds_a_graph_at_other_sizes() -> None:
    b = GraphBuilder()
    x = b.input([61, 113, 8], name="x")
    y = b.reshape(b.relu(x), [61 * 113, 8])
    g = b.build(y)
    size = {61: 2, 113: 5}
    at = specialize(g, lambda d: math.prod(size.get(f, f) for f in _factors(d)))
    assert [n.shape for n in at.nodes] == [(2, 5, 8), (2, 5, 8), (10, 8)]
    table = {"dtype": "INT64", "dims": [1, 9], "data": list(range(61, 70))}
    assert substitute({"t": table, "s": [61, True, 0.5]}, lambda d: 7 if d == 61 else d) == {
        "t": table,
        "s": [7, True, 0.5],
    }


def _factors(d: int) -> list[int]:
    out = []
    for p in (61, 113):
        while d % p == 0:
            out.append(p)
            d //= p
    return [*out, d] if d != 1 or not out else out


def test_a_value_that_cannot_be_written_symbolically_keeps_the_dynamic_original(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The optimized model could only be written at the pricing shape: it is checked there,
    and the input is kept (its dynamic interface), the reason naming ``--static``."""
    from relsat.onnx import exporter

    def refuse(model, dims, interface, shapes=None):
        raise ronnx.SymbolicDimError("attribute 'split' of Split holds 2*N", dims=("N",))

    monkeypatch.setattr(exporter, "symbolize", refuse)
    result = optimize(_conv_net(), Options(cost_model="analytic", timing=None, batch=2))
    assert result.shapes is not None and not result.shapes.symbolic
    assert result.shapes.note == ("written at N=2 (fixed): attribute 'split' of Split holds 2*N")
    assert result.checked_at == ("x=[2, 3, 16, 16]",) and result.kept == "original"
    assert result.why == (
        "not timed; its dims could not stay symbolic, so it is written fixed at "
        "x=[2, 3, 16, 16]: --static (Options.static) keeps it"
    )
    assert _dims_of(result.model.graph.input) == [["N", 3, 16, 16]]


def test_bad_timing_shapes_are_refused() -> None:
    for bad in ({"N": 2}, [{"N": 0}], [{}], "N=2", [{"N": 2.0}]):
        with pytest.raises(ValueError, match="timing_shapes"):
            Options(timing_shapes=bad)  # type: ignore[arg-type]
    assert Options(timing_shapes=[{"N": 2}]).timing_shapes == ({"N": 2},)


def test_a_sequence_bounded_by_a_position_table_below_the_markers_is_fixed() -> None:
    """Positions sliced from a 32-row table: a marker above 32 breaks the import (the slice
    clamps); relsat then optimizes at the pricing shape and says why, never worse than that."""
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["shape"]),
        n("Gather", ["shape", "one"], ["s"], axis=0),
        n("Unsqueeze", ["s", "axes0"], ["end"]),
        n("Slice", ["pos", "start", "end", "axes0"], ["table"]),
        n("Add", ["x", "table"], ["y"]),
    ]
    inits = [
        _f32("pos", (32, 8)),
        numpy_helper.from_array(np.array(1, dtype=np.int64), "one"),
        _i64("axes0", [0]),
        _i64("start", [0]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "S", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "S", 8])
    model = _model(nodes, [x], [y], inits)
    result = optimize(
        model, Options(cost_model="analytic", timing=None, input_shapes={"x": [1, 16, 8]})
    )
    assert result.shapes is not None and not result.shapes.symbolic
    assert result.shapes.note.startswith("fixed at S=16: ")
    assert "\n" not in result.shapes.note


def test_a_masks_chain_of_reshapes_is_one_reshape_with_0_and_minus_1() -> None:
    """A bool mask [batch, seq] unsqueezed twice, flattened and reshaped to [batch, 1, 1, seq]
    from Shape (how exporters build an attention mask) is one Reshape to ``[0, 1, 1, -1]``:
    no Shape, Gather or Concat left for it, the same outputs at three shapes."""
    node = helper.make_node
    nodes = [
        node("Cast", ["mask"], ["flag"], to=TensorProto.BOOL),
        node("Unsqueeze", ["flag", "one"], ["u1"]),
        node("Unsqueeze", ["u1", "two"], ["u2"]),
        node("Reshape", ["u2", "flat"], ["f"]),
        node("Shape", ["mask"], ["s"]),
        node("Gather", ["s", "zero"], ["b"], axis=0),
        node("Gather", ["s", "one"], ["n"], axis=0),
        node("Concat", ["b", "ones", "n"], ["target"], axis=0),
        node("Reshape", ["f", "target"], ["m"]),
        node("Where", ["m", "nil", "low"], ["bias"]),
        node("MatMul", ["x", "w1"], ["a1"]),
        node("Add", ["a1", "b1"], ["r1"]),
        node("Relu", ["r1"], ["c1"]),
        node("MatMul", ["x", "w2"], ["a2"]),
        node("Add", ["a2", "b1"], ["r2"]),
        node("Relu", ["r2"], ["c2"]),
        node("Add", ["c1", "c2"], ["y"]),
    ]
    inits = [
        _i64("one", [1]),
        _i64("two", [2]),
        _i64("zero", [0]),
        _i64("flat", [-1]),
        _i64("ones", [1, 1]),
        numpy_helper.from_array(np.array(0.0, np.float32), "nil"),
        numpy_helper.from_array(np.array(-1e4, np.float32), "low"),
        _f32("w1", (16, 16)),
        _f32("w2", (16, 16)),
        _f32("b1", (16,)),
    ]
    inputs = [
        helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16]),
    ]
    outputs = [
        helper.make_tensor_value_info("bias", TensorProto.FLOAT, ["batch", 1, 1, "seq"]),
        helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16]),
    ]
    model = _model(nodes, inputs, outputs, inits)
    result = optimize(model, ANALYTIC)
    assert result.kept == "optimized" and result.shapes is not None and result.shapes.symbolic
    written = result.model
    ops = [n.op_type for n in written.graph.node]
    assert "Unsqueeze" not in ops and "Shape" not in ops and "Concat" not in ops
    (reshape,) = [n for n in written.graph.node if n.op_type == "Reshape"]
    target = {t.name: numpy_helper.to_array(t) for t in written.graph.initializer}[reshape.input[1]]
    assert target.tolist() == [0, 1, 1, -1]
    sessions = [ort.InferenceSession(m.SerializeToString()) for m in (model, written)]
    for batch, seq in ((1, 128), (2, 128), (1, 65)):
        rng = np.random.default_rng(batch * seq)
        feeds = {
            "mask": rng.integers(0, 2, (batch, seq)).astype(np.int64),
            "x": rng.standard_normal((batch, 16)).astype(np.float32),
        }
        want, got = (s.run(None, feeds) for s in sessions)
        for a, b in zip(want, got, strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4)
