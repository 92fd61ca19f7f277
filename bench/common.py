"""Shared helpers of the benchmark scripts: Markdown tables, CSV rows, progress lines, op counts."""

from __future__ import annotations

import argparse
import csv
import io
import os
import platform
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import onnx

RESULTS = Path(__file__).resolve().parent / "results"
#: Where the scripts keep exports and each tool's outputs (``--exports``).
EXPORTS = Path(tempfile.gettempdir()) / "relsat-exports"

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
    """Append rows to ``bench/results/<name>.csv`` with a timestamp and the machine.

    Columns added at the end of ``headers`` since the file was started are added to its header
    line; the rows written before keep their fields (the new ones empty)."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.csv"
    header = ["when", "machine", *headers]
    if path.exists():
        extend_header(path, header)
    new = not path.exists()
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    machine = f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus"
    with path.open("a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(header)
        for row in rows:
            w.writerow([stamp, machine, *row])
    return path


def extend_header(path: Path, header: list[str]) -> None:
    """Give the CSV file ``path`` the header ``header`` when its own is a prefix of it (columns
    added at the end since it was started); any other file is left as it is."""
    with path.open(newline="") as f:  # csv writes \r\n line endings: keep them
        lines = f.readlines()
    if not lines:
        return
    first = lines[0].rstrip("\r\n")
    old = next(csv.reader([first]))
    if old != header and header[: len(old)] == old:
        out = io.StringIO()
        csv.writer(out, lineterminator="").writerow(header)
        lines[0] = out.getvalue() + lines[0][len(first) :]  # its own line ending
        with path.open("w", newline="") as f:
            f.writelines(lines)


def add_exports(ap: argparse.ArgumentParser) -> None:
    """The scripts' ``--exports FOLDER`` option (default :data:`EXPORTS`), read as a Path."""
    ap.add_argument(
        "--exports",
        type=Path,
        default=EXPORTS,
        help="where exports and each tool's outputs are kept (default: %(default)s)",
    )


def log(message: str) -> None:
    """A progress line on stderr (stdout is the table)."""
    print(message, file=sys.stderr, flush=True)


def op_types(path: Path, *, qualified: bool = False) -> Counter[str]:
    """The ONNX file's operators by type, Constant left out (weights are not work);
    ``qualified``: com.microsoft's with ``ms.`` before them (its Attention is not ONNX's)."""
    graph = onnx.load(str(path), load_external_data=False).graph
    return Counter(
        ("ms." if qualified and n.domain == "com.microsoft" else "") + n.op_type
        for n in graph.node
        if n.op_type != "Constant"
    )


def op_count(path: Path) -> int:
    """How many operators the ONNX file has, Constant left out."""
    return sum(op_types(path).values())
