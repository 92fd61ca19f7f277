"""Today's exports through ``relsat optimize`` and onnxslim, side by side (issue 23).

    pip install -e '.[bench]'
    python bench/today.py --list
    python bench/today.py [--models bert-tiny hf onnx-zoo ...] [--rounds 30] [--threads 1]
                          [--timeout 1800] [--exports DIR] [--relsat-args "--keep-slower"]

The corpus (bench/corpus.py's ``today``; ``--list`` prints it): tiny Hugging Face BERT, GPT-2, ViT,
a Llama-style and a GPT-J-style decoder (2 layers, hidden 128, random init) through both torch
exporters (``<model>.dynamo``: ``torch.onnx.export(dynamo=True)``, today's default;
``<model>.legacy``: the TorchScript exporter at opset 17), the model-zoo graphs shipped inside the
onnx wheel (``zoo-<name>``: opset 9, weights computed by ConstantOfShape), and timm families when
timm imports (it does not beside torch 2.13's CPU wheel: a note says so). ``--models`` takes names,
models without their exporter (``bert-tiny``: both) or families (``hf``, ``onnx-zoo``).

Per model, as a user runs the tools: ``relsat optimize IN.onnx -o OUT.onnx --threads N`` in a
subprocess with ``--timeout`` (bench/calls.py; its seconds, exit code, the operators it kept
opaque, stop reason, extraction status, verification and what it kept, read from its output;
a refusal is its last ``relsat:`` line), and ``onnxslim IN.onnx OUT.onnx`` the same way
(bench/simplifiers.py). Then onnxruntime CPU latency of the original, an A/A session of the
original (what noise alone does), relsat's file and onnxslim's file, side by side
(bench/timing.py: ``--threads`` intra-op threads, spinning off, ``--rounds`` interleaved rounds,
medians) on the export's example inputs (random inputs for the zoo); the ratios to the original
(below 1 = faster) and whether each file's outputs match the original's (rtol 1e-4, atol 1e-5).

Markdown on stdout, progress on stderr, rows appended to bench/results/today.csv. Exports and
outputs are kept in ``--exports`` (``runs/<model>/``, each tool's output in a ``.log`` beside
its file).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench modules

import calls
import common
import corpus
import timing
from simplifiers import onnxslim

NAN = float("nan")


@dataclass
class Row:
    """One model's numbers (NaN / empty: not measured)."""

    model: str
    family: str = ""
    exporter: str = ""
    export_s: float = NAN
    ops: dict[str, int] = field(default_factory=dict)
    relsat: calls.CliRun | None = None
    slim_s: float = NAN
    slim_rc: int | None = None
    timed: timing.Timing | None = None
    notes: list[str] = field(default_factory=list)

    def ratio(self, variant: str) -> float:
        r = self.timed.ratio(variant) if self.timed else None
        return NAN if r is None else r


def bench_model(entry: corpus.Entry, args: argparse.Namespace) -> Row:
    row = Row(entry.name, entry.family, entry.exporter)
    exports = Path(args.exports)
    work = exports / "runs" / entry.name
    work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    made = entry.make(exports)
    row.export_s = time.perf_counter() - t
    row.exporter = made.exporter
    common.log(f"  {entry.name}: {made.exporter} ({row.export_s:.1f} s)")
    row.ops["original"] = common.op_count(made.path)
    variants: dict[str, Path] = {}

    options = ["--threads", str(args.threads), *shlex.split(args.relsat_args)]
    run = calls.cli(made.path, work / "relsat.onnx", options, args.timeout)
    row.relsat = run
    common.log(
        f"  {entry.name}: relsat optimize {run.seconds:.1f} s, rc {run.rc}"
        + (f": {run.error}" if run.error else f", kept {run.kept}")
    )
    if run.error:
        row.notes.append(f"relsat: {run.error}")
    if run.ok and run.output is not None:
        variants["relsat"] = run.output

    if not args.no_slim:
        slim = onnxslim(made.path, work / "onnxslim.onnx", args.timeout)
        row.slim_s, row.slim_rc = slim.seconds, slim.rc
        common.log(f"  {entry.name}: onnxslim {slim.seconds:.1f} s, rc {slim.rc}")
        if slim.error:
            row.notes.append(f"onnxslim: {slim.error}")
        elif slim.output is not None:
            variants["onnxslim"] = slim.output

    for variant, path in variants.items():
        row.ops[variant] = common.op_count(path)
    t = time.perf_counter()
    row.timed = timing.side_by_side(
        made.path, variants, made.inputs, threads=args.threads, rounds=args.rounds
    )
    common.log(f"  {entry.name}: timed in {time.perf_counter() - t:.1f} s")
    bad = [f"{v} {c}" for v, c in row.timed.checks.items() if not c.startswith("ok")]
    row.notes += bad
    return row


def _f(x: float, spec: str = ".2f") -> str:
    return "–" if x != x else format(x, spec)


def _ops(row: Row, variant: str) -> str:
    return str(row.ops.get(variant, "–"))


HEADERS = [
    "model",
    "exporter",
    "ops orig / relsat / slim",
    "relsat s",
    "rc",
    "opaque",
    "stop",
    "extraction",
    "rewrites chosen (priced gain)",
    "kept",
    "relsat ratio",
    "slim s",
    "slim ratio",
    "A/A ratio",
    "ms original",
    "notes",
]


def table(rows: list[Row]) -> str:
    out = []
    for r in rows:
        run = r.relsat
        out.append(
            [
                r.model,
                r.exporter.replace("torch.onnx.export", "export"),
                f"{_ops(r, 'original')} / {_ops(r, 'relsat')} / {_ops(r, 'onnxslim')}",
                _f(run.seconds, ".1f") if run else "–",
                "timeout" if run and run.rc is None and run.error else (run.rc if run else "–"),
                (run.opaque or "none") if run and run.rc is not None else "–",
                (run.stop or "–") if run else "–",
                (run.extraction or "–") if run else "–",
                (run.rewrites or "–").replace("|", "/") if run else "–",
                (run.kept or "–") if run else "–",
                _f(r.ratio("relsat")),
                _f(r.slim_s, ".1f"),
                _f(r.ratio("onnxslim")),
                _f(r.ratio(timing.AA)),
                _f(r.timed.ms.get(timing.ORIGINAL, NAN), ".3f") if r.timed else "–",
                "; ".join(n.replace("|", "/") for n in r.notes)[:300],
            ]
        )
    return common.markdown(HEADERS, out)


CSV_HEADERS = [
    "ort machine",
    "threads",
    "rounds",
    "relsat args",
    "model",
    "family",
    "exporter",
    "export s",
    "ops original",
    "ops relsat",
    "ops onnxslim",
    "relsat s",
    "relsat rc",
    "relsat opaque",
    "relsat stop",
    "relsat extraction",
    "relsat verified",
    "relsat kept",
    "relsat cost before",
    "relsat cost after",
    "onnxslim s",
    "onnxslim rc",
    "ms original",
    "ms A/A",
    "ms relsat",
    "ms onnxslim",
    "ratio A/A",
    "ratio relsat",
    "ratio onnxslim",
    "check relsat",
    "check onnxslim",
    "notes",
    "relsat rewrites",
]


def csv_row(r: Row, args: argparse.Namespace, machine: str) -> list[Any]:
    run = r.relsat
    ms = r.timed.ms if r.timed else {}
    checks = r.timed.checks if r.timed else {}

    def num(x: float, digits: int = 4) -> Any:
        return "" if x != x else round(x, digits)

    return [
        machine,
        args.threads,
        args.rounds,
        args.relsat_args,
        r.model,
        r.family,
        r.exporter,
        num(r.export_s, 2),
        *(r.ops.get(v, "") for v in ("original", "relsat", "onnxslim")),
        num(run.seconds, 2) if run else "",
        ("" if run.rc is None else run.rc) if run else "",
        (run.opaque or "") if run else "",
        (run.stop or "") if run else "",
        (run.extraction or "") if run else "",
        (run.verified or "") if run else "",
        (run.kept or "") if run else "",
        run.cost[0] if run and run.cost else "",
        run.cost[1] if run and run.cost else "",
        num(r.slim_s, 2),
        "" if r.slim_rc is None else r.slim_rc,
        *(num(ms.get(v, NAN)) for v in (timing.ORIGINAL, timing.AA, "relsat", "onnxslim")),
        *(num(r.ratio(v)) for v in (timing.AA, "relsat", "onnxslim")),
        checks.get("relsat", ""),
        checks.get("onnxslim", ""),
        "; ".join(r.notes),
        (run.rewrites or "") if run else "",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print the corpus and exit")
    ap.add_argument(
        "--models", nargs="*", help="names, models (both exporters) or families; default: all"
    )
    ap.add_argument("--rounds", type=int, default=30, help="interleaved timing rounds")
    ap.add_argument("--threads", type=int, default=1, help="relsat's and the timing's threads")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per tool call")
    common.add_exports(ap)
    ap.add_argument("--relsat-args", default="", help='more relsat options, e.g. "--keep-slower"')
    ap.add_argument("--no-slim", action="store_true", help="leave onnxslim out")
    ap.add_argument(
        "--onnx",
        nargs="*",
        default=[],
        metavar="FILE",
        help="ONNX files made elsewhere to bench too (e.g. timm exports from an environment "
        "where torchvision imports)",
    )
    args = ap.parse_args()
    available = corpus.today() | corpus.files(args.onnx)
    if args.list:
        for e in available.values():
            print(f"{e.name}\t{e.family}\t{e.exporter}")
        if not corpus.timm_available():
            print(f"# {corpus.TIMM_NOTE}")
        return
    try:
        entries = corpus.select(available, args.models)
    except KeyError as exc:
        ap.error(str(exc.args[0]))
    if not corpus.timm_available():
        common.log(corpus.TIMM_NOTE)
    machine = timing.machine(args.threads)
    rows = []
    start = time.perf_counter()
    for entry in entries:
        t = time.perf_counter()
        try:
            rows.append(bench_model(entry, args))
        # Broad on purpose: one model's failure is a row with the error, never the end.
        except Exception as exc:
            common.log(traceback.format_exc())
            rows.append(Row(entry.name, entry.family, entry.exporter))
            rows[-1].notes.append(f"bench failed: {timing.first_line(exc)}")
        common.log(f"  {entry.name}: {time.perf_counter() - t:.1f} s in all")
    print(f"### today's exports: relsat and onnxslim ({machine}, {args.rounds} rounds)\n")
    print(table(rows))
    print(
        "\nratio: median latency over the original's (below 1 = faster); A/A: a second session "
        "of the original (noise). kept: what `relsat optimize` handed back. ops: ONNX nodes "
        "other than Constant."
    )
    path = common.append_csv("today", CSV_HEADERS, [csv_row(r, args, machine) for r in rows])
    common.log(f"rows appended to {path} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
