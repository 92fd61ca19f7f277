"""The ONNX stages, for an ONNX input: ``export`` the optimized graph with the input's
interface, ``check`` it against the input in onnxruntime, ``time`` the two, and ``choose``
which to keep — never a slower model.

When no rewrite was chosen (:func:`unchanged`), or only rewrites onnxruntime makes itself when it
loads the input (rules marked ``runtime``), the input is kept as it is, neither checked nor
timed. Otherwise the optimized model is timed against the input with
:func:`relsat.onnx.latency.compare_latency` (``Options.ort``, ``Options.timing``) and kept only
when it is faster beyond noise, or when ``Options.keep_slower`` says so (or ``timing`` is None:
not timed).

With symbolic dims (:class:`~relsat.pipeline.run.Shapes`) the optimized model is written with
them symbolic (when a value cannot be, it is written at the pricing shape, :attr:`Shapes.note`
says why, and :func:`choose` keeps the input unless ``Options.static``), checked in onnxruntime
at three shapes (:meth:`~relsat.onnx.symbolic.Dims.check_shapes`: any difference, or a shape
it cannot run at, and the original is kept), and timed at the pricing shape and at
``Options.timing_shapes``; the verdict is the worst of them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from relsat.graph.graph import Graph
from relsat.graph.specialize import specialize
from relsat.onnx.errors import SymbolicDimError
from relsat.pipeline.run import Run
from relsat.pipeline.verify import VerificationError, unchanged

__all__ = [
    "at_shapes",
    "check",
    "choose",
    "export",
    "is_rejected",
    "symbolic",
    "time",
    "unchanged",
]

#: The words of :data:`relsat.onnx.latency.WORDS`, worst last: with several shapes timed, the
#: worst one's word is :attr:`relsat.Result.why`.
RANK = ("faster", "too noisy to tell", "not faster", "slower")


def export(run: Run) -> Run:
    """The optimized graph as an ONNX model keeping the input's interface (its inputs, unused
    ones too, and outputs, in its order, with its names and element types); when no rewrite was
    chosen, the input is kept instead."""
    if run.source is None:
        return run
    if unchanged(run):
        return replace(run, kept="original", why="no rewrite", ort_check="not needed (unchanged)")
    assert run.optimized is not None, "export runs after decode"
    model, exc = written(run, run.optimized)
    if exc is None:
        return replace(run, exported=model)
    assert run.shapes is not None and run.shapes.dims is not None
    why = str(exc).removeprefix(f"{exc.path}: ") if exc.path else str(exc)
    note = f"written at {run.shapes.dims.describe()} (fixed): {why}"  # said, never silent
    return replace(run, exported=model, shapes=replace(run.shapes, symbolic=False, note=note))


def written(run: Run, graph: Graph) -> tuple[Any, SymbolicDimError | None]:
    """``graph`` as the ONNX model the run writes: the input's interface, its dynamic dims
    symbolic where the run keeps them so; where a value cannot be written symbolically, at the
    pricing shape, with the error that says why."""
    from relsat import onnx as ronnx

    assert run.source is not None
    like = run.source.proto()
    dims = run.shapes.dims if run.shapes is not None else None
    if dims is None:
        return ronnx.to_model(graph, like=like), None
    try:
        return ronnx.to_model(graph, like=like, dims=dims), None
    except ronnx.SymbolicDimError as exc:
        return ronnx.to_model(specialize(graph, dims.value), like=like), exc


def check(run: Run) -> Run:
    """Run both models in onnxruntime on the same random inputs (:func:`relsat.onnx.verify`):
    at the pricing shape, and for a model written with symbolic dims at two more
    (:meth:`~relsat.onnx.symbolic.Dims.check_shapes`). A difference raises
    :class:`~relsat.pipeline.verify.VerificationError`, except for symbolic dims, where any
    difference, or a shape onnxruntime cannot run the optimized model at, keeps the original."""
    if run.source is None or run.exported is None:
        return run
    if not run.options.verify:
        return replace(run, ort_check="skipped")
    from relsat import onnx as ronnx

    checked = []
    for label, shapes in at_shapes(run, checking=True):
        try:
            comparison = ronnx.verify(
                run.source.given, run.exported, shapes=shapes, given=run.options.inputs
            )
        except ronnx.OnnxError as exc:
            if not symbolic(run):
                raise
            return rejected(run, f"onnxruntime fails at {label}: {exc.reason}")
        if not comparison.ok:
            if not symbolic(run):
                raise VerificationError(comparison, check="onnxruntime")
            first = comparison.report().splitlines()[0]
            return rejected(run, f"onnxruntime outputs differ at {label}: {first}")
        checked.append(label)
    return replace(run, ort_check="passed", checked_at=tuple(x for x in checked if x))


def time(run: Run) -> Run:
    """Time the optimized model against the input (unless ``Options.timing`` is None): at the
    pricing shape, and for symbolic dims at each of ``Options.timing_shapes``."""
    o = run.options
    if run.source is None or run.exported is None or o.timing is None or is_rejected(run):
        return run
    from relsat.onnx import latency

    timed = tuple(
        (
            label,
            latency.compare_latency(
                run.source.given,
                run.exported,
                settings=o.ort,
                timing=o.timing,
                shapes=shapes,
                given=o.inputs,
            ),
        )
        for label, shapes in at_shapes(run, checking=False)
    )
    return replace(run, latency=timed[0][1], latencies=timed)


def choose(run: Run) -> Run:
    """Keep the optimized model when it is faster beyond noise at every shape timed, or
    untimed, or ``Options.keep_slower``; else the input. An input with dynamic dims whose
    optimized model could only be written at the pricing shape keeps the input (its interface)
    unless ``Options.static`` asked for fixed shapes: the reason says what ``static`` would
    keep."""
    if run.source is None or run.exported is None or is_rejected(run):
        return run
    chosen = _verdict(run)
    shapes = run.shapes
    fixed = shapes is not None and not shapes.symbolic and not run.options.static
    if chosen.kept == "optimized" and fixed:  # never a fixed interface not asked for
        assert shapes is not None
        why = (
            f"{chosen.why}; its dims could not stay symbolic, so it is written fixed at "
            f"{shapes.describe_pricing()}: --static (Options.static) keeps it"
        )
        return replace(run, kept="original", why=why)
    return chosen


def _verdict(run: Run) -> Run:
    if run.latency is None:
        return replace(run, kept="optimized", why="not timed")
    timed = run.latencies or (("", run.latency),)
    worst = max((c.word for _, c in timed), key=RANK.index)  # what the reports say: same words
    why = worst
    if len(timed) > 1 and worst != "faster":
        why += " at " + "; ".join(at for at, c in timed if c.word == worst)
    if worst == "faster":
        return replace(run, kept="optimized", why=why)
    if run.options.keep_slower:
        return replace(run, kept="optimized", why=f"{why}, keep_slower")
    return replace(run, kept="original", why=why)


def symbolic(run: Run) -> bool:
    """Was the optimized model written with the input's dims symbolic?"""
    return run.shapes is not None and run.shapes.symbolic


def at_shapes(run: Run, *, checking: bool) -> list[tuple[str, dict[str, tuple[int, ...]] | None]]:
    """The shapes to check (``checking``) or time at, each with its label in words: None and
    ``""`` for a model without dynamic dims; the pricing shape only for one written at fixed
    shapes; else the check's three shapes, or the pricing shape and ``Options.timing_shapes``."""
    shapes = run.shapes
    if shapes is None:
        return [("", None)]
    if not symbolic(run) or shapes.dims is None:
        return [(", ".join(f"{k}={list(v)}" for k, v in shapes.pricing.items()), shapes.pricing)]
    dims = shapes.dims
    values = dims.check_shapes() if checking else (dims.pricing(), *run.options.timing_shapes)
    return [(dims.describe(v), dims.shapes(v)) for v in values]


def rejected(run: Run, why: str) -> Run:
    """``run`` keeping the original: the optimized model failed its onnxruntime check."""
    return replace(run, kept="original", why=why, ort_check=f"failed: {why}")


def is_rejected(run: Run) -> bool:
    return bool(run.ort_check and run.ort_check.startswith("failed"))
