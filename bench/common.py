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

#: TENSAT's numbers (MLSys 2021; reference/MODELS.md §2-3): Table 3 exploration and extraction
#: seconds (16-core CPU + T4, k_multi = 1), historical cost reductions (%), final e-node counts.
TENSAT_EXPLORE = {
    "nasrnn": 0.10,
    "bert": 0.83,
    "resnext50": 0.68,
    "nasneta": 8.81,
    "squeezenet": 0.16,
    "vgg19": 0.42,
    "inceptionv3": 4.38,
}
TENSAT_EXTRACT = {
    "nasrnn": 0.37,
    "bert": 0.60,
    "resnext50": 0.05,
    "nasneta": 1.79,
    "squeezenet": 0.12,
    "vgg19": 0.02,
    "inceptionv3": 0.75,
}
TENSAT_REDUCTION = {"bert": 25.0, "nasrnn": 33.0, "nasneta": 20.0, "resnext50": 19.0}
TENSAT_ENODES = {"nasrnn": 1990, "bert": 1569, "resnext50": 371, "nasneta": 7215}


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
