"""Shared helpers of the benchmark scripts: Markdown tables and CSV rows."""

from __future__ import annotations

import csv
import os
import platform
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def markdown(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table; floats with 3 decimals."""

    def cell(v: Any) -> str:
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def append_csv(name: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> Path:
    """Append rows to ``bench/results/<name>.csv`` with a timestamp and the machine."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.csv"
    new = not path.exists()
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    machine = f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus"
    with path.open("a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["when", "machine", *headers])
        for row in rows:
            w.writerow([stamp, machine, *row])
    return path
