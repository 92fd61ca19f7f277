"""The whole pipeline, ``relsat.optimize``: named stages over one run record.

>>> from relsat import Limits, Options, models, optimize
>>> result = optimize(models.load("nasrnn"), Options(limits=Limits(iterations=2)))
>>> result.cost_after < result.cost_before and result.verified
True
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any

from relsat.pipeline import decode, explore, extract, folding, ort, price, tidy, verify
from relsat.pipeline.load import load
from relsat.pipeline.options import Options
from relsat.pipeline.result import Result, result
from relsat.pipeline.run import OnPhase, Run, Stage

__all__ = ["STAGES", "optimize"]

#: The stages after ``load``, in order; each takes the run so far and returns it with its own
#: fields set (the same object when it has nothing to do). The last four work on an ONNX input
#: only.
STAGES: tuple[tuple[str, Callable[[Run], Run]], ...] = (
    ("fold", folding.fold_blocks),
    ("explore", explore.explore),
    ("price", price.price),
    ("extract", extract.extract),
    ("decode", decode.decode),
    ("unfold", folding.unfold_blocks),
    ("tidy", tidy.tidy),
    ("verify", verify.verify),
    ("export", ort.export),
    ("check", ort.check),
    ("time", ort.time),
    ("choose", ort.choose),
)


#: Called with a stage's name, it gives the context that stage runs in (a lock, a span).
Guard = Callable[[str], AbstractContextManager[Any]]


def optimize(
    model: Any,
    options: Options | None = None,
    *,
    on_phase: OnPhase | None = None,
    guard: Guard | None = None,
) -> Result:
    """Optimize ``model`` — a :class:`~relsat.graph.graph.Graph`, or an ONNX model (a path to an
    ``.onnx`` file or an ``onnx.ModelProto``) — with ``options`` (:class:`Options`; None: the
    defaults): equality saturation with the rules on a DuckDB e-graph, prices from the cost
    model (for an ONNX input measured in onnxruntime on this CPU, for a Graph the analytic
    roofline), extraction, and verification that the optimized graph computes what ``model``
    computes (:class:`~relsat.pipeline.verify.VerificationError` otherwise).

    For an ONNX input the optimized model is also checked and timed against the input in
    onnxruntime, and the faster one kept (:attr:`Result.kept`, :attr:`Result.why`): never a
    slower model unless ``Options.keep_slower``. :meth:`Result.save` writes the kept model.

    ``on_phase`` is called with each exploration phase's
    :class:`~relsat.engine.explore.IterationStats` and, after each stage that worked
    (``load``, then :data:`STAGES`), with a :class:`~relsat.pipeline.run.Stage` (progress
    display). Hitting an exploration limit is not an error: it is :attr:`Result.stop`.

    ``guard`` (called with a stage's name: ``"load"``, then those of :data:`STAGES`) gives the
    context each stage runs in: :mod:`relsat.fleet` holds a per-machine lock there, so that the
    stages that measure never share the cores with another model's work.
    """
    options = options if options is not None else Options()
    if not isinstance(options, Options):
        from relsat.errors import SettingsError

        raise SettingsError("options", options, "a relsat.Options or None")
    held = guard if guard is not None else (lambda name: nullcontext())
    with held("load"):
        started = time.perf_counter()
        run = load(model, options, on_phase)
        run = _done(run, "load", time.perf_counter() - started)
    for name, stage in STAGES:
        with held(name):
            started = time.perf_counter()
            after = stage(run)
            seconds = time.perf_counter() - started
        if after is not run:
            run = _done(after, name, seconds)
    return result(run)


def _done(run: Run, stage: str, seconds: float) -> Run:
    """``run`` with ``stage``'s seconds recorded, reported to ``on_phase``."""
    run = replace(run, seconds=(*run.seconds, (stage, seconds)))
    if run.on_phase is not None:
        run.on_phase(Stage(stage, seconds, run))
    return run
