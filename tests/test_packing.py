"""Packed attention (relsat/graph/packing.py, the ``pack`` stage): an extracted attention whose
q, k and v are head splits of projections of one tensor becomes one ``mha`` (com.microsoft
Attention) — only when it provably is that computation, and, in the pipeline, only where the
packed form measures faster."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import test_attention
import test_dynamic
from test_dynamic import HIDDEN, _dims_of, _same_at

from relsat import GraphBuilder, Options, optimize
from relsat import onnx as ronnx
from relsat.cli import main
from relsat.errors import GraphError
from relsat.graph import packing, projections, residuals, views
from relsat.graph.builder import Tensor
from relsat.graph.execute import compare, run
from relsat.graph.graph import Graph, Ref
from relsat.graph.packing import fragment, pack, sites
from relsat.rewrite.rulefile import RULES_DIR, load_rules

ort = pytest.importorskip("onnxruntime")
B, S, H, D = 2, 6, 3, 4
E = H * D
ROOT = float(np.float32(math.sqrt(1 / math.sqrt(D))))


def _block(
    *,
    packed_projection: bool = False,
    bias: bool = True,
    cross: bool = False,
    head_layout: str = "bshd",
    mask: str = "input",
    spelled: str = "",
) -> Graph:
    """One self-attention block as extraction leaves it: projections of ``x`` (2-D GEMMs on
    ``[B * S, E]``, or one ``[E, 3E]`` projection split in three), each reshaped into heads and
    transposed, q and kt scaled by a scalar, ``attention``, the heads merged back."""
    b = GraphBuilder()
    x = b.input([B, S, E], name="x")
    other = b.input([B, S, E], name="memory") if cross else x
    rows = b.reshape(x, [B * S, E])
    other_rows = b.reshape(other, [B * S, E]) if cross else rows

    def proj(src: Tensor, width: int) -> Tensor:
        w = b.weight([E, width])
        if bias:
            return b.matmul_bias(src, w, b.weight([width]))
        return b.matmul(src, w)

    if packed_projection:
        whole = b.reshape(proj(rows, 3 * E), [B, S, 3 * E])
        q_in, rest = b.split(whole, 2, [E, 2 * E])
        k_in, v_in = b.split(rest, 2, [E, E])
    else:
        q_in, k_in, v_in = (
            b.reshape(proj(src, E), [B, S, E]) for src in (rows, other_rows, other_rows)
        )

    def heads(t: Tensor, keys: bool) -> Tensor:
        if head_layout == "bshd":
            split = b.reshape(t, [B, S, H, D])
            return b.transpose(split, [0, 2, 3, 1] if keys else [0, 2, 1, 3])
        split = b.reshape(t, [B, S, D, H])  # heads interleaved: another computation
        return b.transpose(split, [0, 3, 2, 1] if keys else [0, 3, 1, 2])

    root = b.scalar(ROOT)
    q, kt, v = b.mul(heads(q_in, False), root), b.mul(heads(k_in, True), root), heads(v_in, False)
    if mask == "input":
        m = b.input([B, 1, 1, S], name="mask")
    elif mask == "none":
        m = b.scalar(0.0)
    else:
        m = b.weight([1, 1, S, S], name="causal", value=np.triu(np.full((1, 1, S, S), -1e9), 1))
    if spelled:  # as extraction leaves it where the fused op does not price cheaper
        scores = b.matmul(q, kt)
        if mask != "none":
            scores = b.add(scores, b.finite(m) if spelled == "finite" else m)
        probs = b.softmax(scores)
        out = b.matmul(b.nanzero(probs) if spelled == "guarded" else probs, v)
    else:
        out = b.attention(q, kt, v, m, 1.0)
    return b.build(b.reshape(b.transpose(out, [0, 2, 1, 3]), [B, S, E]))


@pytest.mark.parametrize(
    "kind",
    [
        {},
        {"bias": False},
        {"packed_projection": True},
        {"mask": "none"},
        {"mask": "causal"},
        {"spelled": "guarded"},
        {"spelled": "finite"},
        {"spelled": "plain", "mask": "none"},
    ],
    ids=[
        "three-gemms",
        "no-bias",
        "gpt2-split",
        "unmasked",
        "constant-mask",
        "spelled-guarded",
        "spelled-finite-mask",
        "spelled-unmasked",
    ],
)
def test_packs_self_attention_and_computes_the_same(kind: dict[str, object]) -> None:
    graph = _block(**kind)  # type: ignore[arg-type]
    (site,) = sites(graph)
    assert site.heads == H and site.batch == B and site.seq == S
    assert site.scale == pytest.approx(ROOT * ROOT, rel=1e-6)
    if kind.get("packed_projection"):
        assert (site.q.start, site.k.start, site.v.start) == (0, E, 2 * E)
    packed = pack(graph, [site])
    counts = packed.op_counts()
    assert counts["mha"] == 1 and not {"attention", "softmax"} & set(counts)
    # the heads' split after mha and the merge after it cancel: no transpose is left
    assert "transpose" not in counts
    comparison = compare(graph, packed)
    assert comparison.ok, comparison


@pytest.mark.parametrize(
    "fill", [np.finfo(np.float32).min, -np.inf], ids=["lowest (Hugging Face)", "-inf (torch)"]
)
def test_packed_graph_runs_in_onnxruntime_as_com_microsoft_attention(fill: float) -> None:
    """Padding keys, and one sequence whose keys are all masked: the guarded softmax gives its
    rows 0 with -inf (com.microsoft Attention alone gives NaN: the export guards it) and the
    mean of v with float32's lowest."""
    graph = _block()
    packed = pack(graph, sites(graph))
    model = ronnx.to_model(packed)
    ops = {(n.domain, n.op_type) for n in model.graph.node}
    assert ("com.microsoft", "Attention") in ops
    x = np.random.default_rng(1).standard_normal((B, S, E)).astype(np.float32)
    mask = np.zeros((B, 1, 1, S), np.float32)
    mask[0, ..., S - 2 :] = fill  # padding
    mask[1] = fill  # every key masked
    want, got = (
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": x, "mask": mask}
        )[0]
        for m in (ronnx.to_model(graph), model)  # the same weights, drawn by name
    )
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, run(packed, {"x": x, "mask": mask})[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "kind",
    [{"cross": True}, {"head_layout": "bsdh"}, {"spelled": "plain"}],
    ids=["cross-attention", "heads-interleaved", "spelled-unguarded-mask"],
)
def test_near_misses_are_not_sites(kind: dict[str, object]) -> None:
    """Keys and values of another tensor; heads interleaved (another computation); a masked
    softmax without the NaN guard and no proof that the mask is finite."""
    graph = _block(**kind)  # type: ignore[arg-type]
    assert sites(graph) == []


@pytest.mark.parametrize(
    "kind",
    [
        {},
        {"packed_projection": True},
        {"spelled": "guarded"},
        {"cross": True},
        {"head_layout": "bsdh"},
    ],
    ids=["three-gemms", "gpt2-split", "spelled-guarded", "cross-attention", "heads-interleaved"],
)
def test_a_layout_too_large_to_replay_is_checked_at_sampled_positions(
    kind: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Symbolic dims at their markers (an image's token count near a million) make the head
    layout too large to replay: it is followed back at its corners and sampled positions, and
    finds the same sites (and the same near misses) as the replay."""
    graph = _block(**kind)  # type: ignore[arg-type]
    replayed = sites(graph)
    monkeypatch.setattr(packing, "MAX_INDEX", 1)
    assert sites(graph) == replayed
    assert len(replayed) == (0 if {"cross", "head_layout"} & set(kind) else 1)


def test_a_projection_with_an_activation_or_a_non_scalar_factor_is_not_a_site() -> None:
    b = GraphBuilder()
    x = b.input([S, E], name="x")
    q = b.transpose(
        b.reshape(b.matmul(x, b.weight([E, E]), activation="RELU"), [1, S, H, D]), [0, 2, 1, 3]
    )
    k = b.reshape(b.matmul(x, b.weight([E, E])), [1, S, H, D])
    kt = b.mul(b.transpose(k, [0, 2, 3, 1]), b.weight([1, H, D, S]))  # a tensor, not a scalar
    v = b.transpose(b.reshape(b.matmul(x, b.weight([E, E])), [1, S, H, D]), [0, 2, 1, 3])
    graph = b.build(b.attention(q, kt, v, b.scalar(0.0), 0.5))
    assert sites(graph) == []


@pytest.mark.parametrize("spelled", ["", "finite"], ids=["fused", "finite"])
def test_fragment_is_the_site_with_its_head_merge(spelled: str) -> None:
    """The fragment reads x and the mask; an eager attention's mask keeps its ``finite`` mark
    inside (without it the fragment would be no site: it crashed the pack stage)."""
    graph = _block(spelled=spelled)
    part, site = fragment(graph, sites(graph)[0])
    assert [n.name for n in part.inputs] == ["x", "mask"]
    assert part.output_shapes == [(B, S, E)]
    assert compare(part, pack(part, [site])).ok


def test_mha_shape_check_names_what_is_wrong() -> None:
    b = GraphBuilder()
    x, m = b.input([B, S, E], name="x"), b.scalar(0.0)
    with pytest.raises(GraphError, match="mha needs x"):
        b.mha(x, b.weight([E, 3 * E + 1]), b.weight([3 * E + 1]), m, H, 0.5)
    with pytest.raises(GraphError, match="mha b must have shape"):
        b.mha(x, b.weight([E, 3 * E]), b.weight([E]), m, H, 0.5)
    with pytest.raises(GraphError, match="does not broadcast"):
        b.mha(x, b.weight([E, 3 * E]), b.weight([3 * E]), b.input([B, 1, S, S + 1]), H, 0.5)
    with pytest.raises(GraphError, match="heads"):
        b.mha(x, b.weight([E, 3 * E]), b.weight([3 * E]), m, 0, 0.5)


# --- the pipeline ----------------------------------------------------------------------------


def _drawn(module: Any, build: Callable[[], onnx.ModelProto]) -> onnx.ModelProto:
    """``build()`` of another test module, its weights drawn without moving that module's
    random generator (its own tests draw from it in order)."""
    state = module.RNG.bit_generator.state
    try:
        return build()
    finally:
        module.RNG.bit_generator.state = state


def _sdpa() -> onnx.ModelProto:
    """tests/test_attention.py's torch SDPA block, masked and guarded."""
    return _drawn(test_attention, lambda: test_attention._sdpa_model(mask=True, guard=True))


RULES = load_rules(RULES_DIR / "transformer.rules")


def test_pipeline_times_the_packing_and_says_what_it_did() -> None:
    model = _sdpa()  # torch's SDPA block
    options = Options(rules=RULES, keep_slower=True, cost_model="analytic-cpu")
    result = optimize(model, options)
    assert result.packing.endswith(")") and " of 1 attentions packed" in result.packing
    assert result.ort_check == "passed"  # packed or not, onnxruntime agrees with the input
    assert f"pack     {result.packing}" in result.report()
    packed = "mha" in result.graph.op_counts()
    assert packed == ("1 of 1 attentions" in result.packing)
    off = optimize(model, replace(options, packing=False))
    assert off.packing == "off" and "mha" not in off.graph.op_counts()


def test_packing_is_off_for_a_graph_input_and_for_gpu_prices() -> None:
    graph = _block()
    result = optimize(graph, Options(rules=RULES))
    assert result.packing == "off" and "mha" not in result.graph.op_counts()
    model = _sdpa()
    gpu = optimize(model, Options(rules=RULES, cost_model="analytic", keep_slower=True))
    assert gpu.graph.op_counts()["attention"] == 1 and gpu.packing == "off"


def test_onnx_helper_block_is_a_site_after_extraction() -> None:
    """The e-graph fuses torch's spelling into attention; the extracted graph around it is
    what packing recognizes (whatever the timing then decides)."""
    model = _sdpa()  # torch's SDPA block
    options = Options(rules=RULES, cost_model="analytic-cpu", packing=False)
    result = optimize(model, options)
    assert result.graph.op_counts()["attention"] == 1
    (site,) = sites(result.graph)
    packed = pack(result.graph, [site])
    out = ronnx.to_model(packed, like=model)
    assert ronnx.verify(model, out).ok


def test_a_packed_model_keeps_its_symbolic_dims_and_runs_at_every_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever this machine's timing says, a packed model with dynamic batch and sequence is
    written with them symbolic (the mha's input and output reshapes written as exporters write
    them), checked at three shapes, and runs at others."""
    from relsat.pipeline import pack as stage

    monkeypatch.setattr(stage, "time_fragment", lambda part, packed, settings, timing: (True, 0.5))
    model = _drawn(test_dynamic, test_dynamic._attention_block)
    result = optimize(model, Options(rules=RULES, cost_model="analytic-cpu", keep_slower=True))
    assert "1 of 1 attentions" in result.packing and "mha" in result.graph.op_counts()
    assert len(result.checked_at) == 3 and result.ort_check == "passed"
    written = result.model
    assert ("com.microsoft", "Attention") in {(n.domain, n.op_type) for n in written.graph.node}
    assert _dims_of(written.graph.input) == [["batch", "seq", HIDDEN], [1, 1, "seq", "seq"]]
    assert _dims_of(written.graph.output) == [["batch", "seq", HIDDEN]]
    for b, s in ((1, 128), (2, 33), (3, 7)):
        _same_at(model, written, {"x": (b, s, HIDDEN), "mask": (1, 1, s, s)})


def test_cli_says_what_packing_did_and_can_turn_it_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "sdpa.onnx"
    onnx.save(_sdpa(), src)
    common = ["--cost-model", "analytic-cpu", "--timing-seconds", "0.2", "--threads", "1"]
    common += ["--keep-slower", "--rules", str(RULES_DIR / "transformer.rules")]
    assert main(["optimize", str(src), "-o", str(tmp_path / "a.onnx"), *common]) == 0
    assert "packing: " in capsys.readouterr().out
    assert (
        main(["optimize", str(src), "-o", str(tmp_path / "b.onnx"), "--no-packing", *common]) == 0
    )
    assert "packing: " not in capsys.readouterr().out


# --- projections: the bias folded into the kernel after it --------------------------------


def _encoder_tail(*, read_twice: bool = False, broadcast_skip: bool = False) -> Graph:
    """A projection to a GELU and one to a residual add and LayerNorm, as extraction leaves
    them: 2-D GEMMs between a flatten and an unflatten of the leading dims."""
    b = GraphBuilder()
    x = b.input([B, S, E], name="x")

    def proj(t: Tensor, n: int) -> Tensor:
        k = t.shape[-1]
        flat = b.matmul_bias(b.reshape(t, [B * S, k]), b.weight([k, n]), b.weight([n]))
        return b.reshape(flat, [B, S, n])

    up = proj(x, 2 * E)
    hidden = b.gelu(up)
    down = proj(hidden, E)
    skip = b.input([1, 1, E], name="skip") if broadcast_skip else x
    out = b.layernorm(b.add(down, skip), b.weight([E]), b.weight([E]), 1e-12)
    return b.build([out, up] if read_twice else [out])


def test_projection_biases_fold_into_biasgelu_and_skiplayernorm() -> None:
    graph = _encoder_tail()
    found = projections.sites(graph)
    assert sorted(s.kind for s in found) == ["biasgelu", "skiplayernorm"]
    folded = projections.fold(graph, found)
    counts = folded.op_counts()
    assert counts["linear"] == 2 and counts["biasgelu"] == 1 and counts["skiplayernorm"] == 1
    assert not {"reshape", "matmul_bias", "gelu", "layernorm", "ewadd"} & set(counts)
    assert compare(graph, folded).ok
    model = ronnx.to_model(folded)
    kinds = {(n.domain, n.op_type) for n in model.graph.node}
    assert {("", "MatMul"), ("com.microsoft", "BiasGelu")} <= kinds
    skip_ln = next(n for n in model.graph.node if n.op_type == "SkipLayerNormalization")
    assert len(skip_ln.input) == 5  # input, skip, scale, bias and the projection's bias
    x = np.random.default_rng(2).standard_normal((B, S, E)).astype(np.float32)
    want, got = (
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": x}
        )[0]
        for m in (ronnx.to_model(graph), model)
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_projection_near_misses_are_not_folded() -> None:
    """The GELU's input read elsewhere too; a residual that broadcasts (SkipLayerNormalization
    takes equal shapes)."""
    kinds = [s.kind for s in projections.sites(_encoder_tail(read_twice=True))]
    assert kinds == ["skiplayernorm"]
    kinds = [s.kind for s in projections.sites(_encoder_tail(broadcast_skip=True))]
    assert kinds == ["biasgelu"]


def test_a_model_rewritten_only_by_the_pack_stage_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No rule rewrites anything here (no rules at all): what the pack stage rewrote is still
    exported, checked and handed back."""
    from relsat.pipeline import pack as stage

    def only_projections(faster: bool) -> Callable[..., tuple[bool, float]]:
        return lambda run, graph, rewritten, lowering: (
            faster and lowering.what.startswith("projection"),
            0.9,
        )

    monkeypatch.setattr(stage, "time_fragment", lambda *args: (True, 0.5))
    monkeypatch.setattr(stage, "_time_models", only_projections(False))
    model = ronnx.to_model(_encoder_tail(), opset=20)  # ONNX Gelu
    result = optimize(model, Options(rules=[], cost_model="analytic-cpu", keep_slower=True))
    assert "0 of 2 projection biases" in result.packing and result.kept == "original"
    monkeypatch.setattr(stage, "_time_models", only_projections(True))
    result = optimize(model, Options(rules=[], cost_model="analytic-cpu", keep_slower=True))
    assert "0 of 1 layer norms kept apart" in result.packing
    assert "2 of 2 projection biases" in result.packing
    assert result.kept == "optimized" and result.ort_check == "passed"
    assert "linear" in result.graph.op_counts()


# --- layer norms kept apart from their residual add -----------------------------------------


def _residual(*, read_twice: bool = False, broadcast: bool = False, output: bool = False) -> Graph:
    """``layernorm(x + skip)`` feeding a projection, as extraction leaves a post-LN encoder."""
    b = GraphBuilder()
    x = b.input([B, S, E], name="x")
    skip = b.input([1, 1, E] if broadcast else [B, S, E], name="skip")
    added = b.add(x, skip)
    normed = b.layernorm(added, b.weight([E]), b.weight([E]), 1e-12)
    flat = b.matmul_bias(b.reshape(normed, [B * S, E]), b.weight([E, E]), b.weight([E]))
    outs = [b.reshape(flat, [B, S, E]), normed]
    return b.build([*outs, b.relu(added)] if read_twice else [*outs, added] if output else outs)


def _fused_by_onnxruntime(graph: Graph, tmp_path: Path) -> set[str]:
    """The op types onnxruntime runs ``graph``'s export as, after its own fusions."""
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    model = ronnx.to_model(graph)
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return {n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node}


def test_layer_norm_kept_apart_computes_the_same_and_is_not_fused(tmp_path: Path) -> None:
    """onnxruntime fuses the residual add into its layer norm (SkipLayerNormalization); over
    the 2-D view it does not, and the projection reads the 2-D output directly."""
    graph = _residual()
    found = residuals.sites(graph)
    assert len(found) == 1
    kept = residuals.apart(graph, found)
    assert compare(graph, kept).ok
    layernorm = next(n for n in kept.nodes if n.op == "layernorm")
    assert len(layernorm.shape) == 2
    projection = next(n for n in kept.nodes if n.op == "matmul_bias")
    assert projection.inputs[0] == Ref(layernorm.id, 0)  # the reshapes folded
    assert "SkipLayerNormalization" in _fused_by_onnxruntime(graph, tmp_path)
    fused = _fused_by_onnxruntime(kept, tmp_path)
    assert "SkipLayerNormalization" not in fused and "LayerNormalization" in fused
    part, site = residuals.fragment(graph, found[0])
    assert [n.name for n in part.nodes if n.op == "input"] == ["x", "skip"]
    assert compare(part, residuals.apart(part, [site])).ok


def test_layer_norm_near_misses_are_not_sites() -> None:
    """The add read elsewhere too, a broadcast residual or the add a graph output: onnxruntime
    does not fuse these, so there is nothing to keep apart."""
    for graph in (_residual(read_twice=True), _residual(broadcast=True), _residual(output=True)):
        assert residuals.sites(graph) == []


def test_pipeline_keeps_layer_norms_apart_where_that_times_faster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from relsat.pipeline import pack as stage

    def residuals_faster(run: Any, graph: Graph, rewritten: Graph, lowering: Any) -> Any:
        return lowering.what.startswith("layer norms"), 0.93

    monkeypatch.setattr(stage, "_time_models", residuals_faster)
    model = ronnx.to_model(_residual())
    result = optimize(model, Options(rules=[], cost_model="analytic-cpu", keep_slower=True))
    assert (
        "1 of 1 layer norms kept apart" in result.packing and "whole model 0.930" in result.packing
    )
    assert result.kept == "optimized" and result.ort_check == "passed"
    (layernorm,) = (n for n in result.graph.nodes if n.op == "layernorm")
    assert len(layernorm.shape) == 2


@pytest.mark.parametrize(
    ("fill", "proved"),
    [(float(np.finfo(np.float32).min), True), (-1e9, True), (-np.inf, False)],
    ids=["lowest", "-1e9", "-inf"],
)
def test_a_mask_proved_free_of_infinity_needs_no_guard(fill: float, proved: bool) -> None:
    """Where(keep, 0, fill) from a boolean input: read back through the opaque nodes of the
    imported graph, its values are {0, fill}; the exported mha is guarded only when fill may be
    infinite."""
    from onnx import TensorProto, helper, numpy_helper

    from relsat.onnx.masks import no_infinity

    nodes = [
        helper.make_node("Where", ["keep", "zero", "fill"], ["bias"]),
        helper.make_node("Add", ["x", "bias"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        numpy_helper.from_array(np.array(fill, np.float32), "fill"),
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "mask",
            [
                helper.make_tensor_value_info("keep", TensorProto.BOOL, [B, 1, 1, S]),
                helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, 1, 1, S]),
            ],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, 1, 1, S])],
            inits,
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    graph = ronnx.load(model)
    where = next(n for n in graph.nodes if n.op == "opaque" and n.params["type"] == "Where")
    assert no_infinity(graph, Ref(where.id, 0)) == proved
    assert not no_infinity(graph, Ref(graph.tensor("x").id, 0))  # a float input: unknown
    # the same mask read by a packed attention: the export's guard follows the proof
    for extra in (False, True):
        b = GraphBuilder()
        x = b.input([B, S, E], name="x")
        mask = b.weight([B, 1, 1, S], name="m", value=np.full((B, 1, 1, S), fill, np.float32))
        if extra:  # an input added to it: nothing is known
            mask = b.add(mask, b.input([B, 1, 1, S], name="extra"))
        w = b.weight([E, 3 * E])
        y = b.mha(x, w, b.weight([3 * E]), mask, H, 0.5)
        guards = [n.op_type for n in ronnx.to_model(b.build(y)).graph.node].count("IsNaN")
        assert guards == (0 if proved and not extra else 1)


def test_whole_model_timing_sees_the_model_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model with dynamic dims is timed with its dims symbolic, as it is written (onnxruntime
    fuses a residual add into SkipLayerNormalization only at static dims, so timing a static
    copy would keep layer norms apart for nothing)."""
    import relsat.onnx.latency as latency
    from relsat.pipeline import pack as stage

    timed: list[onnx.ModelProto] = []
    real = latency.compare_latency

    def spy(before: onnx.ModelProto, after: onnx.ModelProto, **kwargs: Any) -> Any:
        timed.extend([before, after])
        return real(before, after, **kwargs)

    monkeypatch.setattr(latency, "compare_latency", spy)
    monkeypatch.setattr(stage, "time_fragment", lambda *args: (False, 1.0))
    h = onnx.helper
    x, skip = (h.make_tensor_value_info(n, onnx.TensorProto.FLOAT, ["batch", S, E]) for n in "xs")
    y = h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", S, E])
    scale, bias = (onnx.numpy_helper.from_array(np.ones(E, np.float32), n) for n in "gb")
    nodes = [
        h.make_node("Add", ["x", "s"], ["sum"]),
        h.make_node("LayerNormalization", ["sum", "g", "b"], ["y"], axis=-1, epsilon=1e-5),
    ]
    graph = h.make_graph(nodes, "residual", [x, skip], [y], [scale, bias])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    fast = Options(rules=[], cost_model="analytic-cpu", keep_slower=True, timing=stage.FOLD_TIMING)
    result = optimize(model, fast)
    assert "layer norms kept apart" in result.packing
    assert timed, "the pack stage timed whole models"
    for written in timed:
        assert written.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"


def test_consecutive_reshapes_of_the_extracted_graph_are_folded_before_packing() -> None:
    """A reshape of a reshape (the e-graph's 2-D GEMM views next to the heads split) is one
    reshape in the written model: onnxruntime folds such chains only at static dims."""
    model = _sdpa()
    result = optimize(model, Options(rules=RULES, keep_slower=True, cost_model="analytic-cpu"))
    assert "consecutive reshapes and transposes folded" in result.packing
    chains = [
        n
        for n in result.graph.nodes
        if n.op == "reshape" and result.graph.node(n.inputs[0]).op == "reshape"
    ]
    assert chains == [] and result.ort_check == "passed"


def test_projections_lose_their_2d_views() -> None:
    """A projection between a flatten and an unflatten of its leading dims is one MatMul on the
    N-D input (a linear), the reshape after it kept only where it splits the heads; a matmul
    whose output is read as 2-D, or read twice, is no site."""
    b = GraphBuilder()
    x = b.input([1, 16, 32], name="x")
    flat = b.reshape(x, [16, 32])
    heads = b.reshape(b.matmul(flat, b.weight([32, 32])), [1, 16, 4, 8])
    two_d = b.relu(b.matmul(flat, b.weight([32, 8])))  # read as 2-D: stays
    g = b.build([b.relu(b.reshape(heads, [1, 16, 32])), two_d])
    (site,) = views.sites(g)
    undone = views.undo(g, [site])
    assert undone.op_counts()["linear"] == 1 and undone.op_counts()["matmul"] == 1
    assert compare(g, undone).ok
    part, found = views.fragment(g, site)
    assert compare(part, views.undo(part, [found])).ok and part.op_counts()["matmul"] == 1


def test_the_pack_stage_times_a_decode_steps_projections_without_their_2d_views() -> None:
    """The pipeline's pack stage finds a KV-cache decode step's projections between 2-D views,
    times the whole model with them written as one MatMul each (taken where faster), says so,
    and what it hands back passes the onnxruntime check."""
    import test_dynamic_sums

    model = test_dynamic_sums._decode_step("past + 1", "past + 1")
    result = optimize(model, Options(keep_slower=True, cost_model="analytic-cpu"))
    assert "projections written as one MatMul on their N-D input" in result.packing
    assert result.ort_check == "passed"


def test_a_fragment_faster_only_by_its_median_is_decided_on_the_whole_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kind whose fragment timing saw a gain it could not tell from noise is not dropped: the
    whole model, timed with those sites rewritten against without, decides (and says so)."""
    import relsat.pipeline.pack as pack_stage

    monkeypatch.setattr(pack_stage, "time_fragment", lambda *args: (False, 0.9))
    model = _sdpa()
    options = Options(rules=RULES, keep_slower=True, cost_model="analytic-cpu")
    result = optimize(model, options)
    assert "attentions packed" in result.packing
    assert "(timed rewritten/as extracted: 0.90, the undecided on the whole model" in result.packing
    assert result.ort_check == "passed"
    monkeypatch.setattr(pack_stage, "time_fragment", lambda *args: (False, 0.99))  # no gain
    result = optimize(model, options)
    assert "0 of 1 attentions" in result.packing and "undecided" not in result.packing


def test_a_whole_model_timing_keeps_the_rewrite_when_faster_or_faster_by_the_median() -> None:
    """Both forms are the optimized model: faster beyond noise keeps the rewrite, and so does a
    lower median when the budget ends undecided; a decided "same" or "slower" does not."""
    from relsat.pipeline.pack import chosen

    assert chosen("faster", "decided", 0.9)
    assert chosen("same", "time limit", 0.97)
    assert not chosen("same", "time limit", 1.01)
    assert not chosen("same", "decided", 0.99)
    assert not chosen("slower", "decided", 1.2)
