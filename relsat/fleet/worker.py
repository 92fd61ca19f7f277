"""One model, in whatever process runs it (a pool worker, a Ray task): :func:`run_one` optimizes
it with the pipeline's own stages, each under the machine's :class:`~relsat.fleet.lock.MeasureLock`
(measuring stages exclusive, the others shared), writes the kept model and returns its
:class:`~relsat.fleet.summary.Row`. It never raises for a model: an error is the row's
``error``.

The stages are :data:`relsat.pipeline.optimize.STAGES`, run in order on one run record exactly as
:func:`relsat.optimize` runs them; only the lock around each is added, so a model gets the same
verdict here as from ``relsat.optimize`` with the same options and prices.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from relsat.fleet.lock import MeasureLock
from relsat.fleet.summary import Row
from relsat.pipeline.options import Options
from relsat.pipeline.result import Result
from relsat.threads import VARIABLE

__all__ = ["MEASURING", "Task", "optimize_locked", "run_one", "with_store"]

#: The stages that time something on the machine's cores: ``price`` (``ort-cpu`` measures the
#: units its cache lacks), ``pack`` (each kind of attention site against its packed form) and
#: ``time`` (the optimized model against the input). They run alone.
MEASURING = frozenset({"price", "pack", "time"})


@dataclass(frozen=True)
class Task:
    """One model to optimize: its place in the list (``index``), its file (``model``), the
    output's name (``name``: ``<out_dir>/<name>.onnx``), the :class:`Options`, where the kept
    model goes (``out_dir``; None: its bytes come back with the row, for the caller to write),
    the shared cost store (``store``), whether the measuring stages take the machine's lock
    exclusively (``exclusive``), the threads the other stages may use (``threads``:
    ``RELSAT_THREADS`` in the worker, :mod:`relsat.threads`; None: no cap) and what an error
    calls the settings it names (``named``: a command line's flags; empty: their API names)."""

    index: int
    model: str
    name: str
    options: Options
    out_dir: str | None = None
    store: str | None = None
    exclusive: bool = True
    threads: int | None = None
    named: tuple[tuple[str, str], ...] = ()


def run_one(task: Task) -> tuple[Row, bytes | None]:
    """Optimize ``task.model``: its :class:`Row` and, when ``task.out_dir`` is None, the bytes
    of the kept model (None when nothing was kept)."""
    started = time.perf_counter()
    row = Row(index=task.index, model=task.model, name=task.name)
    row.node, row.pid = socket.gethostname(), os.getpid()
    if task.threads is not None:  # a worker process of a pool: its share of the cores
        os.environ[VARIABLE] = str(task.threads)
    lock = MeasureLock()
    data = None
    try:
        options = with_store(task.options, task.store)
        row.machine = options.ort.machine()
        result = optimize_locked(task.model, options, lock if task.exclusive else None)
        try:
            _fill(row, result)
            data = _write(result, task, row)
        finally:
            result.egraph.close()
    except Exception as exc:  # one model's failure is its row, never the end of the others
        row.error = _error(exc, dict(task.named))
    row.optimize_s = time.perf_counter() - started
    row.wait_s, row.measure_s = lock.waited_s, lock.held_s
    return row, data


def optimize_locked(model: Any, options: Options, lock: MeasureLock | None) -> Result:
    """:func:`relsat.optimize` with each stage under ``lock`` (exclusive for :data:`MEASURING`,
    shared otherwise; None: no lock)."""
    from relsat.pipeline.optimize import optimize

    if lock is None:
        return optimize(model, options)
    return optimize(model, options, guard=lambda name: lock.hold(exclusive=name in MEASURING))


def with_store(options: Options, store: str | None) -> Options:
    """``options`` pricing with an ``ort-cpu`` model that reads and writes the shared ``store``
    too (when the cost model is ``ort-cpu``, the default for an ONNX input)."""
    if store is None or options.cost_model not in (None, "ort-cpu"):
        return options
    from relsat.cost.ort import OrtModel

    return replace(options, cost_model=OrtModel(options.ort, store=store))


def _fill(row: Row, result: Result) -> None:
    """The row's verdict, timing, costs and rewrites from ``result``."""
    row.kept, row.why = result.kept, result.why
    row.cost_before, row.cost_after = result.cost_before, result.cost_after
    rules = result.rewrites()
    row.rewrites = sum(rules.values())
    row.rules = ", ".join(f"{r} {n}" for r, n in rules.items())
    row.stop = result.stop.value
    row.seconds = json.dumps({k: round(v, 4) for k, v in result.seconds.items()})
    latency = result.latency
    if latency is not None:
        row.verdict = latency.verdict
        row.original_ms, row.optimized_ms = latency.original_ms, latency.optimized_ms
        row.speedup = latency.speedup
        row.speedup_low = 1.0 / latency.ratio_high if latency.ratio_high > 0 else None
        row.speedup_high = 1.0 / latency.ratio_low if latency.ratio_low > 0 else None
    if result.cost_model == "ort-cpu":  # the identity its measured prices are keyed by
        from relsat.cost.ort import PROTOCOL

        row.prices = f"{result.options.ort.machine()}|protocol{PROTOCOL}"
    else:
        row.prices = result.cost_model


def _write(result: Result, task: Task, row: Row) -> bytes | None:
    """Write the kept model to ``<out_dir>/<name>.onnx``, or return its bytes (no ``out_dir``)."""
    if task.out_dir is not None:
        target = Path(task.out_dir) / f"{task.name}.onnx"
        result.save(target)
        row.output = str(target)
        return None
    with tempfile.TemporaryDirectory(prefix="relsat-") as tmp:
        target = Path(tmp) / f"{task.name}.onnx"
        result.save(target)
        return target.read_bytes()


def _error(exc: BaseException, named: dict[str, str]) -> str:
    """An exception as one line: its type and first line (a verification failure in words; the
    settings an ONNX error names called as ``named`` says)."""
    from relsat.onnx.errors import OnnxError
    from relsat.pipeline.verify import VerificationError

    if isinstance(exc, VerificationError):
        return f"verification failed ({exc.check}), nothing written: {exc.detail}"[:300]
    text = (exc.named(named) if isinstance(exc, OnnxError) else str(exc)).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:300]
