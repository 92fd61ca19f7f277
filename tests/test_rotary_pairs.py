"""GPT-J's interleaved rotary embedding through ONNX: torch's spellings of ``rotate_every_two``
(strided Slices, Neg, Unsqueeze, Concat, Reshape) and of its tables' ``repeat_interleave(t, 2,
-1)`` (Unsqueeze, Expand or Tile, Reshape; or folded into a constant: tables of equal pairs, a
fact of values) import one operator at a time, fuse by rules/decoder.rules into ``rotary``
(interleaved) and export as ONNX
RotaryEmbedding on the ``[B, S, H, D]`` layout GPT-J rotates in; near misses stay unfused.
Built with onnx.helper as the legacy and the dynamo exporter write them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from relsat import GraphBuilder, Options, optimize
from relsat import onnx as ronnx
from relsat.graph.execute import run
from relsat.rewrite.rulefile import RULES_DIR, load_rules

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(7)
DECODER_RULES = load_rules(RULES_DIR / "decoder.rules")
S, H, D = 6, 3, 16  # tokens, heads, head size (no rule names a head size: any even one fuses)
BIG = 2**63 - 1
n = helper.make_node


def _init(name: str, value: object, dtype: object = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(a) for a in session.run(None, feeds)]


def _turned(x: str, spelling: str, *, swap: bool = False, axis: int = 3) -> tuple[list, str]:
    """``rotate_every_two(x)`` as torch writes it (``swap``: the even entries negated instead,
    a turn the other way; ``axis``: the strided slices on another axis)."""
    neg_of, kept = ("even", "odd") if swap else ("odd", "even")
    nodes = [
        n("Slice", [x, "zero", "big", f"axis{axis}", "two"], [f"{x}_even"]),
        n("Slice", [x, "one", "big", f"axis{axis}", "two"], [f"{x}_odd"]),
        n("Neg", [f"{x}_{neg_of}"], [f"{x}_neg"]),
        n("Unsqueeze", [f"{x}_neg", "minus1"], [f"{x}_neg_col"]),
        n("Unsqueeze", [f"{x}_{kept}", "minus1"], [f"{x}_kept_col"]),
        n("Concat", [f"{x}_neg_col", f"{x}_kept_col"], [f"{x}_stacked"], axis=-1),
        n("Reshape", [f"{x}_stacked", "x_shape"], [f"{x}_turned"]),
    ]
    if spelling == "legacy":  # the target computed from the stacked shape, as torch.flatten(-2)
        nodes[-1:] = [
            n("Shape", [f"{x}_stacked"], [f"{x}_dims"]),
            n("Slice", [f"{x}_dims", "zero", "minus2"], [f"{x}_lead"]),
            n("Concat", [f"{x}_lead", "minus1"], [f"{x}_target"], axis=0),
            n("Reshape", [f"{x}_stacked", f"{x}_target"], [f"{x}_turned"]),
        ]
    return nodes, f"{x}_turned"


def _doubled(t: str, spelling: str, *, repeats: tuple[int, ...] = (1, 1, 1, 1, 2)) -> list:
    """``repeat_interleave(t[:, :, None, :], 2, 3)`` of a ``[1, S, D/2]`` table: dynamo's
    Unsqueeze at [2, 4], Expand, Reshape; the legacy exporter's two Unsqueezes and a Tile."""
    if spelling == "dynamo":
        return [
            n("Unsqueeze", [t, "axes24"], [f"{t}_col"]),
            n("Expand", [f"{t}_col", _repeats_name(repeats)], [f"{t}_pairs"]),
            n("Reshape", [f"{t}_pairs", "table_shape"], [f"{t}_wide"]),
        ]
    return [
        n("Unsqueeze", [t, "axes2"], [f"{t}_heads"]),
        n("Unsqueeze", [f"{t}_heads", "axes4"], [f"{t}_col"]),
        n("Tile", [f"{t}_col", _repeats_name(repeats)], [f"{t}_pairs"]),
        n("Reshape", [f"{t}_pairs", "table_shape"], [f"{t}_wide"]),
    ]


def _repeats_name(repeats: tuple[int, ...]) -> str:
    return "rep_" + "_".join(map(str, repeats))


def _gptj_model(
    spelling: str = "dynamo",
    tables: str = "run time",
    *,
    swap: bool = False,
    axis: int = 3,
    repeats: tuple[int, ...] = (1, 1, 1, 1, 2),
    pairs_differ: bool = False,
) -> onnx.ModelProto:
    """GPT-J's ``apply_rotary_pos_emb`` on ``x`` ``[1, S, H, D]``: ``x * cos' + rotate_every_two(x)
    * sin'``, the tables given at run time (inputs ``cos``, ``sin`` ``[1, S, D/2]``, widened
    as torch writes it) or constant (widened by the exporter: ``pairs_differ`` breaks their
    pairs)."""
    nodes, turned = _turned("x", spelling, swap=swap, axis=axis)
    inputs = {"x": [1, S, H, D]}
    inits = []
    if tables == "run time":
        for t in ("cos", "sin"):
            nodes += _doubled(t, spelling, repeats=repeats)
            inputs[t] = [1, S, D // 2]
        cos, sin = "cos_wide", "sin_wide"
    else:
        angles = RNG.uniform(0, 3, (1, S, 1, D // 2))
        for t, fn in (("cos", np.cos), ("sin", np.sin)):
            wide = np.repeat(fn(angles), 2, axis=-1)
            if pairs_differ:
                wide[..., 1::2] *= 0.5
            inits.append(_init(f"{t}_wide", wide))
        cos, sin = "cos_wide", "sin_wide"
    nodes += [
        n("Mul", ["x", cos], ["straight"]),
        n("Mul", [turned, sin], ["turning"]),
        n("Add", ["straight", "turning"], ["y"]),
    ]
    ints = {"zero": [0], "one": [1], "big": [BIG], "two": [2], "minus1": [-1], "minus2": [-2]}
    ints |= {f"axis{a}": [a] for a in range(4)}
    ints |= {"axes24": [2, 4], "axes2": [2], "axes4": [4], "x_shape": [1, S, H, D]}
    ints |= {"table_shape": [1, S, 1, -1], _repeats_name(repeats): list(repeats)}
    inits += [_init(k, v, np.int64) for k, v in ints.items()]
    graph = helper.make_graph(
        nodes,
        "gptj_rotary",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, S, H, D])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {
        i.name: RNG.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in model.graph.input
    }


@pytest.mark.parametrize("tables", ["run time", "constant"])
@pytest.mark.parametrize("spelling", ["dynamo", "legacy"])
def test_interleaved_rotary_spellings_fuse_and_run_as_one_kernel(spelling, tables) -> None:
    model = _gptj_model(spelling, tables)
    graph = ronnx.load(model)
    counts = graph.op_counts()  # one operator at a time (the legacy exporter's Tile: opaque)
    assert counts["slice"] == 2 and counts["neg"] == 1
    result = optimize(graph, Options(rules=DECODER_RULES))
    fused = result.graph.op_counts()
    assert fused["rotary"] == 1 and "neg" not in fused
    assert result.verified or "opaque" in counts  # a Tile: checked in onnxruntime below
    (rotary,) = (nd for nd in result.graph.nodes if nd.op == "rotary")
    assert rotary.params["interleaved"] == 1
    out = ronnx.to_model(result.graph, like=model)
    (kernel,) = (nd for nd in out.graph.node if nd.op_type == "RotaryEmbedding")
    attrs = {a.name: helper.get_attribute_value(a) for a in kernel.attribute}
    assert attrs == {"interleaved": 1, "num_heads": H}  # [B, S, H, D] viewed as [B, S, H*D]
    feeds = _feeds(model)
    for got, want in zip(_ort(out, feeds), _ort(model, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_interleaved_rotary_near_misses_stay_unfused() -> None:
    cases = {
        "the even entries negated (a turn the other way)": _gptj_model(swap=True),
        "strided slices of another axis": _gptj_model(axis=1),
        "a table doubled on another axis": _gptj_model(repeats=(1, 1, 2, 1, 1)),
        "a constant table whose pairs differ": _gptj_model(tables="constant", pairs_differ=True),
    }
    for why, model in cases.items():
        result = optimize(ronnx.load(model), Options(rules=DECODER_RULES, verify=False))
        assert "rotary" not in result.graph.op_counts(), why
        assert ronnx.verify(model, ronnx.to_model(result.graph, like=model)).ok, why


@pytest.mark.parametrize("opset", [23, 17])
def test_pair_ops_and_the_head_last_rotary_export_as_numpy_computes(opset: int) -> None:
    """``turnpairs``, ``repeat2`` and an interleaved ``rotary`` on ``[B, S, H, D]`` (tables at
    run time and weight-only) written at opset 23 (the fused kernel) and 17 (spelled out): what
    onnxruntime computes is what the NumPy kernels compute."""
    b = GraphBuilder()
    x = b.input([2, S, H, D], name="x")
    angles = b.input([2, S, 1, D // 2], name="angles")
    cos, sin = b.cos(angles), b.sin(angles)
    outs = [
        b.turnpairs(x),
        b.repeat2(angles),
        b.rotary(x, cos, sin, interleaved=True),
        b.rotary(x, b.weight([1, S, 1, D // 2]), b.weight([1, S, 1, D // 2]), interleaved=True),
        b.rotary(x, cos, sin),
    ]
    graph = b.build(*outs)
    out = ronnx.to_model(graph, opset=opset)
    kernels = [nd.op_type for nd in out.graph.node].count("RotaryEmbedding")
    assert kernels == (3 if opset == 23 else 0)
    feeds = {
        "x": RNG.standard_normal((2, S, H, D)).astype(np.float32),
        "angles": RNG.uniform(0, 3, (2, S, 1, D // 2)).astype(np.float32),
    }
    for got, want in zip(_ort(out, feeds), run(graph, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_an_empty_piece_of_a_concat_is_left_out() -> None:
    """GPT-J with the rotary dim the whole head: ``cat([rotated, k[..., D:]], -1)`` concatenates
    an empty tensor, which relsat cannot hold: it is left out, and the model imports whole."""
    nodes = [
        n("Slice", ["x", "zero", "d", "last"], ["rot"]),
        n("Slice", ["x", "d", "big", "last"], ["rest"]),  # empty
        n("Neg", ["rot"], ["turned"]),
        n("Concat", ["turned", "rest"], ["y"], axis=-1),
    ]
    inits = [_init(k, [v], np.int64) for k, v in (("zero", 0), ("d", D), ("big", BIG), ("last", 3))]
    graph = helper.make_graph(
        nodes,
        "empty_piece",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, S, H, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, S, H, D])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    imported = ronnx.load(model)
    assert imported.op_counts()["neg"] == 1 and "opaque" not in imported.op_counts()
    assert ronnx.verify(model, ronnx.to_model(imported, like=model)).ok


def test_rows_gathered_from_a_constant_node_import() -> None:
    """GPT-J's legacy export gathers its rotary table's rows from a Constant node at constant
    positions: not a mask's index grid (which reads a flattened mask), and it imports."""
    table = RNG.standard_normal((4 * S, D)).astype(np.float32)
    nodes = [
        n("Constant", [], ["table"], value=numpy_helper.from_array(table)),
        n("Gather", ["table", "positions"], ["rows"], axis=0),
        n("Mul", ["x", "rows"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "rows",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, S, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, S, D])],
        [_init("positions", np.arange(S)[None], np.int64)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    assert ronnx.verify(model, ronnx.to_model(ronnx.load(model), like=model)).ok
