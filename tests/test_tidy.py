"""The ``tidy`` stage (relsat/pipeline/tidy.py): after extraction only writing remains. Every
fused kernel comes from a rule (no rules: none written), layout chains fold, and a layer norm
extraction kept apart from its residual add is written so that onnxruntime does not fuse the two
back."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from relsat import GraphBuilder, Options, optimize
from relsat.graph import residuals
from relsat.models.encoder import PATH as ENCODER
from relsat.rewrite.rulefile import load_rules

pytest.importorskip("onnxruntime")


def _ops(model: onnx.ModelProto) -> set[tuple[str, str]]:
    return {(n.domain, n.op_type) for n in model.graph.node}


def test_without_rules_no_fused_kernel_is_written(tmp_path: Path) -> None:
    """``relsat optimize encoder.onnx --rules EMPTY.rules``: no Attention, Gelu, BiasGelu,
    SkipLayerNormalization… that the input did not have; only what the tidy stage writes."""
    empty = tmp_path / "EMPTY.rules"
    empty.write_text("")
    result = optimize(
        ENCODER, Options(rules=load_rules(empty), timing=None, keep_slower=True, verify=True)
    )
    assert result.exported is not None
    original = _ops(onnx.load(ENCODER))
    written = _ops(result.exported)
    assert written - original <= {("", "Reshape"), ("", "Gemm")}, written - original
    assert not any(domain for domain, _ in written)
    assert "layer norms written apart" in result.tidying


def test_with_the_shipped_rules_the_fused_kernels_come_from_rules() -> None:
    """The analytic CPU prices (deterministic) favour every fused kernel: each was made by a
    rule and chosen by extraction."""
    result = optimize(ENCODER, Options(timing=None, cost_model="analytic-cpu"))
    assert {"mha", "biasgelu", "skiplayernorm", "linear"} <= set(result.graph.op_counts())
    rules = result.rewrites()
    assert {"attention-packed", "bias-gelu-of-linear", "skip-layernorm-of-linear"} <= set(rules)
    fused = {t for d, t in _ops(result.exported)} - {t for d, t in _ops(onnx.load(ENCODER))}
    assert fused >= {"Attention", "BiasGelu", "SkipLayerNormalization"}


def test_a_layer_norm_kept_apart_is_written_over_its_2d_view() -> None:
    b = GraphBuilder()
    x, skip = b.input([1, 4, 8], name="x"), b.input([1, 4, 8], name="skip")
    g = b.build(b.layernorm(b.add(x, skip), b.weight([8]), b.weight([8])))
    (site,) = residuals.sites(g)
    apart = residuals.apart(g, [site])
    ops = [n.op for n in apart.nodes if n.op not in ("input", "weight")]
    assert ops == ["ewadd", "reshape", "layernorm", "reshape"]
    # read twice (pre-LN), or 2-D: onnxruntime does not fuse it, nothing to write apart
    b = GraphBuilder()
    x, skip = b.input([4, 8], name="x"), b.input([4, 8], name="skip")
    assert residuals.sites(b.build(b.layernorm(b.add(x, skip), b.weight([8]), b.weight([8])))) == []
