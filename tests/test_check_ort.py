"""relsat.rewrite.ortcheck: rules with a fused kernel run in onnxruntime too (``relsat rules
check``): the shipped fusions pass, a side onnxruntime disagrees with fails naming the shapes and
parameter values, a kernel whose NumPy model is wrong shows, a side onnxruntime cannot run is a
skip with its reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from relsat.cli import main
from relsat.graph import kernels
from relsat.graph.builder import GraphBuilder
from relsat.onnx import exporter
from relsat.onnx.errors import OnnxError
from relsat.rewrite.check import check_rule, evaluate
from relsat.rewrite.ortcheck import check_ort, check_rule_ort, fused_ops, with_ort
from relsat.rewrite.rulefile import load_rules, parse_rules

SHIPPED = {r.name: r for r in load_rules()}


def _rule(text: str) -> Any:
    (rule,) = parse_rules(f"# name: r\n{text}\n")
    return rule


@pytest.mark.parametrize(
    ("name", "kernel"),
    [
        ("quick-gelu-fuse", "QuickGelu"),
        ("gelu-erf-fuse", "Gelu"),
        ("rmsnorm-fuse", "RMSNormalization"),
        ("skip-layernorm-fuse", "SkipLayerNormalization"),
    ],
)
def test_shipped_fusions_pass_in_onnxruntime(name: str, kernel: str) -> None:
    verdict = check_rule_ort(SHIPPED[name])
    assert verdict.ok and verdict.ort is not None and verdict.ort.ok, verdict.line()
    assert kernel in verdict.ort.kernels and verdict.ort.instances >= 2
    assert f"onnxruntime: {verdict.ort.instances} instances equal (" in verdict.line()


def test_a_rule_without_a_fused_kernel_is_not_run() -> None:
    rule = _rule("(relu (relu ?x)) => (relu ?x)")
    assert fused_ops(rule) == ()
    assert with_ort(check_rule(rule)).ort is None


@pytest.mark.parametrize("op", ["quickgelu", "gelu"])
def test_the_fused_table_names_what_the_exporter_writes(op: str) -> None:
    b = GraphBuilder()
    x = b.input([2, 4], name="x")
    model = exporter.build_model(b.build(getattr(b, op)(x)))
    assert [n.op_type for n in model.graph.node] == [exporter.FUSED[op]]


WRONG_QUICK = "(ewmul ?x (sigmoid (ewmul ?x (scalar ?a:float)))) => (quickgelu 1.702 ?x)"


def test_sides_differing_in_onnxruntime_name_the_shapes_and_values() -> None:
    """check_ort on instances the NumPy check did not compare: the sides differ there."""
    rule = _rule(WRONG_QUICK)
    inst = evaluate(rule, {"x": (2, 3)}, values={"a": 1.5}, numeric=False)
    ort = check_ort(rule, [inst])
    assert ort.status == "mismatch" and ort.kernels == ("QuickGelu",)
    assert ort.detail.startswith("the sides differ at ?x [2, 3], ?a = 1.5: DIFFERENT")


def test_a_kernel_whose_numpy_model_is_wrong_fails_in_onnxruntime(monkeypatch: Any) -> None:
    """Both sides use quickgelu: NumPy agrees with itself whatever its model of the kernel;
    onnxruntime's kernel against that model shows it wrong."""

    def off(node: Any, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
        x = args[0]
        return (x / (1.0 + np.exp(-1.1 * node.params["alpha"] * x)),)

    monkeypatch.setitem(kernels._KERNELS, "quickgelu", off)
    rule = _rule("(quickgelu 1.0 (relu ?x)) => (relu (quickgelu 1.0 (relu ?x)))")
    numpy_only = check_rule(rule)
    assert numpy_only.ok
    verdict = with_ort(numpy_only)
    assert verdict.status == "numeric-mismatch" and verdict.ort is not None
    assert verdict.detail.startswith(
        "in onnxruntime, QuickGelu and relsat's NumPy kernels differ on the left side at ?x ["
    )


_BUILD = exporter.build_model


def _unknown_kernel(model: Any) -> Any:
    """``model`` with its operators renamed to one no onnxruntime provider has."""
    for node in model.graph.node:
        node.op_type = "NoSuchKernel"
    return model


@pytest.mark.parametrize(
    ("build", "why"),
    [
        (lambda g: (_ for _ in ()).throw(OnnxError("refused")), "the exporter cannot write"),
        (lambda g: _unknown_kernel(_BUILD(g)), "onnxruntime cannot load"),
    ],
    ids=["export-refused", "no-cpu-kernel"],
)
def test_a_side_onnxruntime_cannot_run_is_skipped_with_the_reason(
    monkeypatch: Any, build: Any, why: str
) -> None:
    monkeypatch.setattr(exporter, "build_model", build)
    verdict = check_rule_ort(SHIPPED["silu-fuse"])
    assert verdict.ok and verdict.ort is not None and verdict.ort.status == "skipped"
    assert verdict.ort.detail.startswith(f"{why} the left side (")
    assert ", at ?x [" in verdict.ort.detail
    assert f"; onnxruntime skipped: {why} the left side" in verdict.line()


def test_a_kernel_the_exporter_spells_out_everywhere_is_a_skip_not_a_pass() -> None:
    """RotaryEmbedding takes 4-D input: a 3-D rotary is written as Slice/Neg/Concat/Mul/Add."""
    rule = _rule(
        "(ewmul (rotary 0 ?x ?c ?s) (scalar 1.0)) => (rotary 0 ?x ?c ?s)\nwhere rank(?x) == 3"
    )
    verdict = check_rule_ort(rule)
    assert verdict.ok and verdict.ort is not None and verdict.ort.status == "skipped"
    assert verdict.ort.detail.startswith("no fused kernel ran (the exporter spells rotary out")


RULES = f"""\
# name: silu
(ewmul ?x (sigmoid ?x)) => (quickgelu 1.0 ?x)

# name: gelu-wrong-constant
(ewmul (ewmul ?x (ewadd (erf (ewdiv ?x (scalar 1.5))) (scalar 1.0))) (scalar 0.5)) => (gelu ?x)

# name: quick-wrong-alpha
{WRONG_QUICK}
where ?a > 0
"""


def test_cli_checks_fused_rules_in_onnxruntime(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mine.rules"
    path.write_text(RULES)
    assert main(["rules", "check", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[:-1]] == [
        ["ok", "silu"],
        ["numeric-mismatch", "gelu-wrong-constant"],
        ["numeric-mismatch", "quick-wrong-alpha"],
    ]
    assert "onnxruntime: 4 instances equal (QuickGelu)" in lines[0]
    assert "sides differ at ?x [" in lines[1]
    assert "?a = " in lines[2]
    assert lines[-1] == "3 rules: 1 ok, 2 numeric-mismatch; in onnxruntime 1: 1 ok"
    assert main(["rules", "check", "--no-ort", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "onnxruntime" not in lines[0]
    assert lines[-1] == "3 rules: 1 ok, 2 numeric-mismatch"
