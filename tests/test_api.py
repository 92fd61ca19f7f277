"""The one public entry point, ``relsat.optimize(model, options)``: ONNX paths and ModelProtos,
Graphs, one frozen ``Options``, and the ``Result`` that keeps the faster model. Timings are
never asserted on: only what was decided and written."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

import relsat
from relsat import Limits, Options, OrtSettings, SettingsError, Timing, models
from relsat.engine.explore import StopReason
from relsat.graph.serial import from_json
from relsat.models.example import PATH
from relsat.onnx import random_inputs, run_onnx
from relsat.pipeline.run import Stage

#: A short, single-threaded timing: enough for a verdict's structure, not for a speed claim.
QUICK = Options(ort=OrtSettings(threads=1), timing=Timing(max_seconds=0.3, min_rounds=7))


def _interface(model: onnx.ModelProto) -> list[tuple[str, int, list[int]]]:
    return [
        (i.name, i.type.tensor_type.elem_type, [d.dim_value for d in i.type.tensor_type.shape.dim])
        for i in (*model.graph.input, *model.graph.output)
    ]


def test_an_onnx_path_is_optimized_verified_timed_and_saved(tmp_path: Path) -> None:
    stages: list[str] = []
    result = relsat.optimize(
        PATH, QUICK, on_phase=lambda e: stages.append(e.name) if isinstance(e, Stage) else None
    )
    assert result.verified and result.verification in ("passed", "not needed (unchanged)")
    assert result.cost_model == "ort-cpu"  # measured prices: the default for an ONNX input
    assert result.kept in ("original", "optimized") and result.why
    if result.why == "no rewrite":
        assert result.kept == "original" and result.latency is None
    else:  # checked in onnxruntime, timed, and the verdict decided what is kept
        assert result.ort_check == "passed" and result.latency is not None
        assert (result.kept == "optimized") == (result.latency.verdict == "faster")
    assert stages[:3] == ["load", "fold", "explore"] and "verify" in stages
    assert "kept     " in result.report() and "options  " in result.report()
    out = result.save(tmp_path / "out.onnx")
    written = onnx.load(str(out))
    onnx.checker.check_model(written)
    original = onnx.load(str(PATH))
    assert _interface(written) == _interface(original)
    inputs = random_inputs(PATH)
    got, want = run_onnx(out, inputs), run_onnx(PATH, inputs)
    assert [g.shape for g in got] == [w.shape for w in want]
    assert all(np.allclose(g, w, rtol=1e-3, atol=1e-4) for g, w in zip(got, want, strict=True))
    if result.kept == "original":
        assert out.read_bytes() == PATH.read_bytes()  # the input, byte for byte


def test_a_model_proto_is_optimized_and_saved_as_onnx_or_json(tmp_path: Path) -> None:
    proto = onnx.load(str(PATH))
    options = Options(cost_model="analytic", timing=None, limits=Limits(iterations=3))
    result = relsat.optimize(proto, options)
    assert result.verified and result.cost_after <= result.cost_before
    assert result.why in ("no rewrite", "not timed") and result.latency is None
    assert result.kept == ("original" if result.why == "no rewrite" else "optimized")
    assert result.model is not None and _interface(result.model) == _interface(proto)
    onnx_out = result.save(tmp_path / "out.onnx")
    assert relsat.onnx.verify(proto, onnx_out).ok
    json_out = result.save(tmp_path / "out.json")
    assert from_json(json_out.read_text()).output_shapes == result.graph.output_shapes


def test_a_graph_keeps_the_optimized_graph_and_exports_it_checked(tmp_path: Path) -> None:
    graph = models.load("squeezenet")
    result = relsat.optimize(graph, Options(limits=Limits(iterations=2)))
    assert (result.kept, result.why, result.model, result.latency) == (
        "optimized",
        "a Graph input",
        None,
        None,
    )
    assert result.cost_model == "analytic" and result.options.limits.iterations == 2
    out = result.save(tmp_path / "squeezenet-opt.onnx")
    assert relsat.onnx.verify(relsat.onnx.to_model(graph), out).ok
    assert "options  limits=Limits(nodes=50000, iterations=2" in result.report()


BAD_OPTIONS: list[tuple[Callable[[], object], str]] = [
    (lambda: Options(k_multi=-1), "k_multi"),
    (lambda: Options(limits=Limits(nodes=0)), "nodes"),
    (lambda: Options(scheduler="eager"), "scheduler"),
    (lambda: Options(blocks="yes"), "blocks"),
    (lambda: Options(cost_model="tpu"), "cost_model"),
    (lambda: Options(timing=5), "timing"),  # type: ignore[arg-type]
    (lambda: Options(timing=Timing(max_seconds=0)), "max_seconds"),
    (lambda: Options(ort=OrtSettings(threads=-1)), "threads"),
    (lambda: Options(resume=True), "resume"),
    (lambda: Options(batch=0), "batch"),
    (lambda: Options(input_shapes={"x": [1, 0]}), "input_shapes"),
    (lambda: Options(rules=["not a rule"]), "rules"),  # type: ignore[list-item]
    (lambda: dataclasses.replace(Options(), extractor="annealing"), "extractor"),
    (lambda: relsat.optimize(PATH, "fast"), "options"),  # type: ignore[arg-type]
    (lambda: relsat.optimize(42), "model"),
]


@pytest.mark.parametrize(("call", "field"), BAD_OPTIONS)
def test_bad_options_name_the_field(call: Callable[[], object], field: str) -> None:
    with pytest.raises(SettingsError) as err:
        call()
    assert err.value.option == field


def test_options_are_one_frozen_value() -> None:
    options = Options(limits=Limits(iterations=2), rules=relsat.load_rules())
    assert isinstance(options.rules, relsat.RuleSet)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.k_multi = 2  # type: ignore[misc]
    assert Options().describe() == "defaults"
    assert (
        dataclasses.replace(options, extractor="greedy").describe().endswith("extractor='greedy'")
    )


#: ``Result``'s public attributes, with their types: the surface README, the command line and
#: optimize-many read. A Result reads them from its run; none may go missing.
RESULT_ATTRIBUTES = {
    "original": relsat.Graph,
    "graph": relsat.Graph,
    "cost_before": float,
    "cost_after": float,
    "stop": StopReason,
    "iterations": tuple,
    "stopped": str,
    "extraction": object,
    "verified": bool,
    "verification": str,
    "seconds": dict,
    "options": Options,
    "cost_model": str,
    "cost_fallbacks": (int, type(None)),
    "blocks": str,
    "tidying": str,
    "kept": str,
    "why": str,
    "latency": object,
    "latencies": tuple,
    "ort_check": (str, type(None)),
    "checked_at": tuple,
    "shapes": object,
    "exported": object,
    "egraph": object,
    "choice": dict,
    "source": object,
    "priced": object,
    "reduction": float,
    "db": object,
    "kept_graph": relsat.Graph,
    "model": object,
}


@pytest.mark.parametrize("onnx_input", [False, True])
def test_every_result_attribute_reads_from_the_run(onnx_input: bool) -> None:
    options = Options(cost_model="analytic", timing=None, limits=Limits(iterations=2))
    model = onnx.load(str(PATH)) if onnx_input else models.load("squeezenet")
    result = relsat.optimize(model, options)
    for name, kind in RESULT_ATTRIBUTES.items():
        assert isinstance(getattr(result, name), kind), name
        assert name in dir(result), name
    run = result.run
    assert result.original is run.graph and result.graph is run.optimized
    assert result.cost_after == run.extraction.cost and result.stop == run.exploration.stop
    assert result.iterations == run.exploration.iterations
    assert result.seconds == dict(run.seconds) and set(result.seconds) >= {"load", "explore"}
    assert (result.verified, result.kept, result.why) == (run.verified, run.kept, run.why)
    assert (result.source is not None) == onnx_input and result.choice is run.choice
    with pytest.raises(AttributeError):
        result.no_such_attribute  # noqa: B018
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.kept = "original"  # type: ignore[misc]
    for method in (result.report, result.rewrites, result.to_dot):
        assert method()
