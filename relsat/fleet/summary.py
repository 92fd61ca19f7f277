"""The summary of many models: one :class:`Row` per model, written as CSV and Parquet
(:func:`write`) and printed as a table (:func:`table`).

A row says what was kept and why (the never-slower verdict), the speedup with its confidence
interval, the priced costs, the rewrites, the seconds (the whole optimization, waiting for the
machine's measuring lock, measuring under it, per stage), where it ran and under which machine
identity it was timed and priced, the file written, or the error that stopped it.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["SCHEMA", "Row", "error_row", "table", "to_arrow", "write"]


@dataclass
class Row:
    """One model's line of the summary (None: not known, e.g. not timed or failed)."""

    index: int  # its place in the list of models
    model: str  # the file as given
    name: str  # the output's stem
    kept: str | None = None  # "original" or "optimized"
    why: str | None = None  # Result.why: "faster", "no rewrite", "not faster beyond noise", ...
    verdict: str | None = None  # the latency verdict: "faster", "same", "slower"
    speedup: float | None = None  # original / optimized latency (1 / ratio)
    speedup_low: float | None = None  # its confidence interval
    speedup_high: float | None = None
    original_ms: float | None = None
    optimized_ms: float | None = None
    cost_before: float | None = None  # priced, ms
    cost_after: float | None = None
    rewrites: int | None = None  # e-nodes built by rules in the result
    rules: str | None = None  # "rule n, ..."
    stop: str | None = None  # the exploration's stop reason
    optimize_s: float | None = None  # wall seconds in the worker, waits included
    wait_s: float | None = None  # waiting for the machine's measuring lock
    measure_s: float | None = None  # holding it exclusively (pricing, timing)
    seconds: str | None = None  # per stage, JSON
    machine: str | None = None  # the identity its timing ran under (OrtSettings.machine())
    prices: str | None = None  # the identity (or cost model) its prices came from
    node: str | None = None  # host name
    pid: int | None = None  # worker process
    output: str | None = None  # the file written
    error: str | None = None  # what stopped it, one line

    @property
    def ok(self) -> bool:
        return self.error is None


def error_row(index: int, model: str, name: str, error: str) -> Row:
    """The row of a model that never got to run (missing file, dead worker)."""
    return Row(index=index, model=model, name=name, error=error)


_TYPES = {"int": pa.int64(), "str": pa.string(), "float": pa.float64()}
#: The summary's columns, in :class:`Row`'s order (each field's annotation: ``int``, ``float``
#: or ``str``, optionally ``| None``).
SCHEMA = pa.schema([(f.name, _TYPES[str(f.type).split(" |")[0]]) for f in fields(Row)])


def to_arrow(rows: Sequence[Row]) -> pa.Table:
    """The rows, in list order (``index``), as an Arrow table of :data:`SCHEMA`."""
    ordered = sorted(rows, key=lambda r: r.index)
    return pa.Table.from_pylist([asdict(r) for r in ordered], schema=SCHEMA)


def write(rows: Sequence[Row], directory: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``summary.csv`` and ``summary.parquet`` in ``directory`` (each replaced
    atomically: a reader sees the previous summary or this one); returns both paths."""
    from relsat.pipeline.save import write_atomic

    folder = Path(directory)
    data = to_arrow(rows)
    text = io.StringIO()
    w = csv.writer(text)
    w.writerow(data.column_names)
    for row in data.to_pylist():
        w.writerow(["" if v is None else _cell(v) for v in row.values()])
    csv_path, parquet_path = folder / "summary.csv", folder / "summary.parquet"
    write_atomic(csv_path, text.getvalue().encode())
    sink = pa.BufferOutputStream()
    pq.write_table(data, sink)
    write_atomic(parquet_path, sink.getvalue().to_pybytes())
    return csv_path, parquet_path


def table(rows: Sequence[Row], title: str = "optimize-many") -> Any:
    """A rich table: model, what was kept and why, speedup with its interval, seconds, rewrites,
    the machine identity (a column only when the rows differ; else the caption), the error's
    start (the whole error is in the CSV)."""
    from rich.table import Table

    ordered = sorted(rows, key=lambda r: r.index)
    machines = sorted({r.machine for r in ordered if r.machine})
    t = Table(
        title=title,
        show_edge=False,
        caption=f"machine: {machines[0]}" if len(machines) == 1 else None,
    )
    columns = ["model", "kept", "why", "speedup [CI]", "optimize s", "measure s", "rewrites"]
    columns += ["machine"] if len(machines) > 1 else []
    columns += ["error"] if any(r.error for r in ordered) else []
    for name in columns:
        right = name in ("speedup [CI]", "optimize s", "measure s", "rewrites")
        t.add_column(name, justify="right" if right else "left")
    for r in ordered:
        cells = [
            r.name,
            r.kept or "",
            r.why or "",
            speedup_text(r),
            "" if r.optimize_s is None else f"{r.optimize_s:.1f}",
            "" if r.measure_s is None else f"{r.measure_s:.1f}",
            "" if r.rewrites is None else str(r.rewrites),
        ]
        cells += [r.machine or ""] if len(machines) > 1 else []
        if "error" in columns:
            error = r.error or ""
            cells.append(error if len(error) <= 60 else error[:59] + "…")
        t.add_row(*cells)
    return t


def speedup_text(row: Row) -> str:
    """``x1.12 [1.08-1.15]``, or empty when not timed."""
    if row.speedup is None:
        return ""
    low = "?" if row.speedup_low is None else f"{row.speedup_low:.2f}"
    high = "?" if row.speedup_high is None else f"{row.speedup_high:.2f}"
    return f"x{row.speedup:.2f} [{low}-{high}]"


def _cell(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)
