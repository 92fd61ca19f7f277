"""``relsat optimize-many MODELS... --out-dir DIR``: :func:`relsat.fleet.optimize_many` with the
options of ``relsat optimize`` (:func:`relsat.cli.optimize.add_options`), a line per model as
it finishes, then the summary table. Exit 0 when every model finished (whichever model was
kept), 1 when any row has an error (the others are still written)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from relsat.cli.common import EXIT_ERROR, Usage, console
from relsat.cli.optimize import add_options, flag_names, options
from relsat.errors import SettingsError

__all__ = ["add"]


def add(sub: Any) -> None:
    """Add ``optimize-many`` and its options to the sub-command parsers."""
    p = sub.add_parser(
        "optimize-many",
        help="optimize many ONNX models: a local process pool, or Ray tasks on a cluster",
        description="Optimize every model (ONNX files, folders of them, or list files with one "
        "path a line) as relsat optimize would, each kept model written to --out-dir, one "
        "summary table (summary.csv, summary.parquet). Timings never share a machine's cores: "
        "the stages that measure run one at a time per machine, the others overlap.",
    )
    p.add_argument("models", nargs="+", metavar="MODEL", help="ONNX files, folders, list files")
    p.add_argument(
        "--out-dir",
        required=True,
        metavar="DIR",
        help="where the kept models (DIR/<name>.onnx) and the summary go (made if missing); "
        "never a folder where that would overwrite an input",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="models at once on this machine (>= 1; default: one per core); with --ray auto "
        "starting a local Ray, its model slots",
    )
    p.add_argument(
        "--ray",
        metavar="auto|ADDRESS",
        help="run each model as a Ray task (pip install 'relsat[cluster]'): auto (the running "
        "cluster, else a local one) or HOST:PORT / ray://HOST:PORT; nodes offer the resource "
        "'relsat' (ray start --resources='{\"relsat\": 1}': one model at a time per node)",
    )
    add_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """``relsat optimize-many``: optimize, print a line per model, the table; the exit code."""
    from relsat.fleet import Fleet, Row, optimize_many
    from relsat.fleet.summary import speedup_text, table

    _check_out_dir(args.models, args.out_dir)
    settings = options(args)
    try:
        fleet = Fleet(workers=args.workers, ray=args.ray, cost_store=args.cost_store)
    except SettingsError as exc:
        raise Usage(f"--{exc.option} must be {exc.wanted}, got {exc.value}") from None
    if args.cost_store and settings.cost_model not in (None, "ort-cpu"):
        raise Usage("--cost-store prices with ort-cpu: give no other --cost-model")
    out = console()
    out.print(f"optimizing on {fleet.where()}", soft_wrap=True)
    finished = 0

    def on_row(row: Row) -> None:
        nonlocal finished
        finished += 1
        what = row.error if row.error else f"{row.kept} ({row.why}) {speedup_text(row)}".strip()
        seconds = "" if row.optimize_s is None else f", {row.optimize_s:.1f} s"
        out.print(f"[{finished}] {row.name}: {what}{seconds}", soft_wrap=True, markup=False)

    summary = optimize_many(
        args.models, settings, args.out_dir, fleet, on_row=on_row, named=flag_names()
    )
    out.print(table(summary.rows))
    out.print(f"summary written to {summary.csv} and {summary.parquet}", soft_wrap=True)
    if summary.failed:
        out.print(f"{len(summary.failed)} of {len(summary.rows)} models failed", style="red")
        return EXIT_ERROR
    return 0


def _check_out_dir(models: list[str], out_dir: str) -> None:
    """Refuse, before any work, an ``--out-dir`` that is a file, or where a kept model's
    ``<name>.onnx`` would be one of the inputs (also through a link): the input is never lost."""
    from relsat.fleet.inputs import find_models, names

    folder = Path(out_dir)
    if folder.exists() and not folder.is_dir():
        raise Usage(f"--out-dir {out_dir} is a file, not a folder")
    if not folder.is_dir():
        return  # made by optimize_many: nothing in it yet
    files = find_models(models)
    for model, name in zip(files, names(files), strict=True):
        written = folder / f"{name}.onnx"
        if written.exists() and Path(model).exists() and os.path.samefile(model, written):
            raise Usage(
                f"--out-dir {out_dir} would overwrite the input {model} (its output is "
                f"{written}): give another folder"
            )
