"""Does relsat make real models faster in onnxruntime? Real exports through the ``relsat`` CLI.

    pip install -e '.[bench]'
    python bench/real.py [--models resnet50 hf-bert tensat-nasrnn ...] [--rounds 50] [--threads 2]
                         [--exports DIR] [--skip-onnxsim] [--relsat-args "--cost-model ort-cpu"]

The corpus (``--list`` prints it; bench/corpus.py's ``real``): torchvision architectures
(bench/architectures.py) and Hugging Face models (bench/hfmodels.py), random init from a fixed
seed, exported by the legacy ``torch.onnx.export`` at opset 17, batch 1, batch norm folded by the
exporter (bench/exports.py), plus the seven bundled TENSAT graphs written with
``relsat.onnx.save(models.load(name), path)`` (``tensat-<name>``). Exports are cached in
``--exports`` (default ``$TMPDIR/relsat-exports``) and reused while torch, transformers and the
bench's model sources are unchanged.

Each model goes through ``relsat optimize IN.onnx --batch 1 -o OUT.onnx`` as a user runs it
(bench/calls.py: ``python -m relsat`` in a subprocess, so a crash is a row, not the end of the
table): once with
``--keep-slower`` (the raw optimized model) and once without (what relsat hands the user), and
once on the onnxsim-simplified model with ``--keep-slower``. Flags the installed CLI lacks are
left out (``relsat optimize --help`` decides; without ``--keep-slower`` one run serves both). The
priced cost, the rewrites and what was handed back are read from the CLI's output; a refusal is
recorded as ``refused: <message>``.

Latency: bench/timing.py's side-by-side timing, onnxruntime on the CPU with ``--threads``
intra-op threads (ORT_ENABLE_ALL, sequential) and, unless ``--spin``, worker threads that do not
spin between runs. One session per variant: original, a second session of the original (the A/A
row: what noise alone does), onnxsim, relsat, relsat as handed, onnxsim then relsat; all on the
export's example inputs; interleaved rounds, the median per variant and its ratio to the
original's (below 1 = faster). A variant that is byte-for-byte another file is timed once.
Every variant's outputs are compared with the original's (rtol 1e-4, atol 1e-5). Each
``relsat optimize`` call's output is kept beside its result (``<exports>/runs/<model>/*.log``).

Ops count ONNX nodes other than Constant. Markdown on stdout, progress on stderr, rows appended
to bench/results/real.csv with a timestamp and the machine.
"""

from __future__ import annotations

import argparse
import filecmp
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
import onnx
import timing
from exports import stdout_to_stderr
from simplifiers import simplifier

from relsat import onnx as ronnx

#: The variants timed, in the table's order.
VARIANTS = ("original", "A/A", "onnxsim", "relsat", "handed", "onnxsim+relsat")


def optimize_runs(
    source: Path, work: Path, stem: str, args: argparse.Namespace, flags: set[str], handed: bool
) -> tuple[calls.CliRun, calls.CliRun]:
    """(raw, handed): ``--keep-slower`` and the default (only when ``handed``); one run for both
    when the CLI has no ``--keep-slower``."""
    # The same threads for relsat's ort-cpu prices and timing as for the bench's timing.
    extra = ["--threads", str(args.threads)] if "--threads" in flags else []
    extra += ["--batch", "1"] if "--batch" in flags else []
    extra += shlex.split(args.relsat_args)
    raw_opts = ["--keep-slower"] if "--keep-slower" in flags else []
    if "--no-timing" in flags and raw_opts:  # keep it anyway: relsat's own timing is not needed
        raw_opts.append("--no-timing")
    raw = calls.cli(source, work / f"{stem}.onnx", raw_opts + extra, args.timeout)
    if raw.rc == 2 and "--no-timing" in raw_opts:  # the two flags refused together
        raw_opts.remove("--no-timing")
        raw = calls.cli(source, work / f"{stem}.onnx", raw_opts + extra, args.timeout)
    if "--keep-slower" not in flags or not handed:
        return raw, raw
    user = calls.cli(source, work / f"{stem}.handed.onnx", extra, args.timeout)
    return raw, user


# ---------------------------------------------------------------------------------------------
# one model


@dataclass
class Row:
    model: str
    source: str = ""
    loads: str = ""
    ops: dict[str, int] = field(default_factory=dict)
    rewrites: str = ""
    optimize_s: float = float("nan")
    sim_optimize_s: float = float("nan")
    cost: tuple[float, float] | None = None
    handed: str = ""
    verified: str = ""  # relsat's own verification, as its CLI reported it
    relsat_timing: str = ""
    ms: dict[str, float] = field(default_factory=dict)
    checks: dict[str, str] = field(default_factory=dict)
    same_as: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _loads(path: Path) -> str:
    """Whether relsat's importer reads the file, how much of it stays opaque, and how long the
    import takes (``relsat.onnx.load``, weights included)."""
    start = time.perf_counter()
    try:
        graph = ronnx.load(path, batch=1)
    # Broad on purpose: an importer crash is a finding for the table, not the end of the bench.
    except Exception as exc:
        return "no: " + timing.first_line(exc)
    seconds = time.perf_counter() - start
    opaque, total = graph.op_counts().get("opaque", 0), len(graph)
    share = 100 * opaque / total if total else 0
    return f"yes ({opaque}/{total} opaque, {share:.0f} %; import {seconds:.2f} s)"


def bench_model(entry: corpus.Entry, args: argparse.Namespace, flags: set[str]) -> Row:
    name = entry.name
    row = Row(name)
    exports = Path(args.exports)
    work = exports / "runs" / name
    work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    made = entry.make(exports)
    original, inputs, row.source = made.path, made.inputs, made.exporter
    common.log(f"  {name}: {row.source} ({time.perf_counter() - t:.1f} s)")
    row.loads = _loads(original)
    files: dict[str, Path] = {"original": original, "A/A": original}
    row.ops["original"] = common.op_count(original)

    sim = None if args.skip_onnxsim else simplifier()
    sim_path = work / "onnxsim.onnx"
    if sim is not None:
        try:
            with stdout_to_stderr():
                simplified = sim[1](onnx.load(str(original)))
            onnx.save(simplified, str(sim_path))
            files["onnxsim"] = sim_path
            if sim[0] != "onnxsim":
                row.notes.append(f"onnxsim column is {sim[0]}")
        except Exception as exc:  # a simplifier crash is a row entry, like relsat's
            row.notes.append(f"{sim[0]} failed: {timing.first_line(exc)}")

    t = time.perf_counter()
    raw, handed = optimize_runs(original, work, "relsat", args, flags, handed=True)
    common.log(
        f"  {name}: relsat optimize {raw.seconds:.1f} s, rc {raw.rc}"
        + (f": {raw.error}" if raw.error else "")
    )
    row.optimize_s, row.cost = raw.seconds, raw.cost
    row.verified = raw.verified or ""
    row.rewrites = raw.rewrites or handed.rewrites or ""
    if raw.error:
        row.notes.append(f"relsat: refused: {raw.error}")
    elif raw.output:
        files["relsat"] = raw.output
    if handed is not raw:
        if handed.error and handed.error != raw.error:
            row.notes.append(f"relsat (handed): {handed.error}")
        if handed.output:
            files["handed"] = handed.output
        row.handed = handed.kept or ("written" if handed.output else "")
        row.relsat_timing = handed.timing or ""
    elif raw.ok:  # the CLI has no --keep-slower: what it wrote is what the user gets
        row.handed = "= relsat (the CLI has no --keep-slower)"
        if raw.output:
            files["handed"] = raw.output

    if "onnxsim" in files:
        sim_raw, _ = optimize_runs(sim_path, work, "onnxsim+relsat", args, flags, handed=False)
        row.sim_optimize_s = sim_raw.seconds
        if sim_raw.error:
            row.notes.append(f"onnxsim+relsat: {sim_raw.error}")
        elif sim_raw.output:
            files["onnxsim+relsat"] = sim_raw.output
    common.log(f"  {name}: relsat runs done in {time.perf_counter() - t:.1f} s; timing")

    for variant, path in files.items():
        row.ops.setdefault(variant, common.op_count(path))
    # A file identical to an earlier variant's is not timed again (the A/A row is the exception).
    distinct: dict[str, Path] = {}
    for variant, path in files.items():
        twin = next(
            (v for v, p in distinct.items() if variant != "A/A" and _same_file(p, path)), None
        )
        if twin is None:
            distinct[variant] = path
        else:
            row.same_as[variant] = twin
    variants = {v: p for v, p in distinct.items() if v not in (timing.ORIGINAL, timing.AA)}
    timed = timing.side_by_side(
        original, variants, inputs, threads=args.threads, rounds=args.rounds, spin=args.spin
    )
    for variant in files:
        source = row.same_as.get(variant, variant)
        if source in timed.ms:
            row.ms[variant] = timed.ms[source]
        if source in timed.checks:
            row.checks[variant] = timed.checks[source]
    return row


def _same_file(a: Path, b: Path) -> bool:
    return a == b or filecmp.cmp(a, b, shallow=False)


# ---------------------------------------------------------------------------------------------
# the table


def _ms(row: Row, variant: str) -> str:
    if variant not in row.ms:
        return "–"
    value = f"{row.ms[variant]:.2f}"
    if variant == "original":
        return value
    ratio = row.ms[variant] / row.ms["original"] if row.ms.get("original") else float("nan")
    twin = f" =&nbsp;{row.same_as[variant]}" if variant in row.same_as else ""
    return f"{value} ({ratio:.2f}×){twin}"


def _price_error(row: Row) -> str:
    """How well summed unit prices predict measured latency: priced ms / measured ms of the
    original and of relsat's raw output (1.00 = exact), and whether the price ranks the two as
    the measurement does (a priced change within 1 % counts as "same")."""
    if not row.cost or "original" not in row.ms:
        return "–"
    before, after = row.cost
    orig = row.ms["original"]
    relsat = row.ms.get("relsat", orig)
    text = f"{before / orig:.2f} → {after / relsat:.2f}"
    priced = "less" if after < before else "more"
    if abs(after - before) <= 0.01 * before:
        priced = "same"
    measured = "less" if relsat < orig else "more"
    if priced == "same":
        return text
    return f"{text} ({'ranked right' if priced == measured else 'ranked wrong'})"


def _verified(row: Row) -> str:
    """relsat's verification as its CLI reported it, then the bench's own check of relsat's
    output against the original's outputs in onnxruntime (rtol 1e-4, atol 1e-5)."""
    parts = [f"relsat: {row.verified}"] if row.verified else []
    if "relsat" in row.checks:
        parts.append(f"bench: {row.checks['relsat']}")
    return _short("; ".join(parts), 120) or "–"


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _ops(row: Row, a: str, b: str) -> str:
    return f"{row.ops.get(a, '–')} → {row.ops.get(b, '–')}"


def markdown(rows: list[Row]) -> str:
    headers = [
        "model",
        "loads?",
        "ops orig → relsat",
        "ops sim → sim+relsat",
        "rewrites",
        "verified?",
        "optimize s",
        "priced cost",
        "priced / measured",
        "ms original",
        "A/A",
        "onnxsim",
        "relsat",
        "relsat handed",
        "onnxsim+relsat",
        "notes",
    ]
    out = []
    for r in rows:
        bad = [f"{v} {c}" for v, c in r.checks.items() if not c.startswith("ok")]
        notes = [*r.notes, *bad] + ([f"handed: {r.handed}"] if r.handed else [])
        out.append(
            [
                r.model,
                r.loads,
                _ops(r, "original", "relsat"),
                _ops(r, "onnxsim", "onnxsim+relsat"),
                _short(r.rewrites) or "–",
                _verified(r).replace("|", "/"),
                f"{r.optimize_s:.1f}" if r.optimize_s == r.optimize_s else "–",
                f"{r.cost[0]:.4f} → {r.cost[1]:.4f}" if r.cost else "–",
                _price_error(r),
                *(_ms(r, v) for v in VARIANTS),
                "; ".join(n.replace("|", "/") for n in notes)[:400],
            ]
        )
    return common.markdown(headers, out)


CSV_HEADERS = [
    "ort machine",
    "threads",
    "rounds",
    "spinning",
    "relsat args",
    "model",
    "source",
    "loads",
    *(f"ops {v}" for v in VARIANTS if v != "A/A"),
    "rewrites",
    "optimize s",
    "onnxsim+relsat optimize s",
    "cost before",
    "cost after",
    "handed",
    "relsat's own timing",
    *(f"ms {v}" for v in VARIANTS),
    *(f"ratio {v}" for v in VARIANTS[1:]),
    *(f"check {v}" for v in VARIANTS[2:]),
    "notes",
    "verified",  # added later: last, so the rows written before it keep their columns
]


def csv_row(r: Row, args: argparse.Namespace, machine: str) -> list[Any]:
    base = r.ms.get("original")
    return [
        machine,
        args.threads,
        args.rounds,
        "on" if args.spin else "off",
        args.relsat_args,
        r.model,
        r.source,
        r.loads,
        *(r.ops.get(v, "") for v in VARIANTS if v != "A/A"),
        r.rewrites,
        round(r.optimize_s, 2),
        round(r.sim_optimize_s, 2),
        r.cost[0] if r.cost else "",
        r.cost[1] if r.cost else "",
        r.handed,
        r.relsat_timing,
        *(round(r.ms[v], 4) if v in r.ms else "" for v in VARIANTS),
        *(round(r.ms[v] / base, 4) if v in r.ms and base else "" for v in VARIANTS[1:]),
        *(r.checks.get(v, "") for v in VARIANTS[2:]),
        "; ".join(r.notes),
        r.verified,
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", help="model names (default: all; --list shows them)")
    ap.add_argument("--list", action="store_true", help="print the corpus and exit")
    ap.add_argument("--rounds", type=int, default=50, help="interleaved timing rounds")
    ap.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    common.add_exports(ap)
    ap.add_argument("--skip-onnxsim", action="store_true", help="no onnxsim columns")
    ap.add_argument(
        "--spin",
        action="store_true",
        help="keep onnxruntime's spinning worker threads (unfair when sessions interleave)",
    )
    ap.add_argument(
        "--relsat-args",
        default="",
        help='extra relsat optimize options, e.g. "--cost-model ort-cpu"',
    )
    ap.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds per relsat optimize call"
    )
    args = ap.parse_args()
    available = corpus.real()
    if args.list:
        print("\n".join(f"{e.name}\t{e.family}\t{e.exporter}" for e in available.values()))
        return
    try:
        entries = corpus.select(available, args.models)
    except KeyError as exc:
        ap.error(str(exc.args[0]))
    if not any(e.family != "tensat" for e in available.values()):
        common.log("torch is not installed: only the bundled graphs (pip install -e '.[bench]')")
    flags = calls.cli_flags()
    missing = [f for f in ("--keep-slower", "--no-timing", "--threads") if f not in flags]
    if missing:
        common.log(f"relsat optimize has no {', '.join(missing)}: left out")
    machine = timing.machine(args.threads, spin=args.spin)

    rows = []
    for entry in entries:
        try:
            rows.append(bench_model(entry, args, flags))
        # Broad on purpose: one model's failure is a row with the error, never the end.
        except Exception as exc:
            common.log(traceback.format_exc())
            rows.append(Row(entry.name, notes=[f"bench failed: {timing.first_line(exc)}"]))
    print(
        f"### relsat on real exports: onnxruntime CPU latency ({machine}, "
        f"median of {args.rounds} interleaved rounds)\n"
    )
    print(markdown(rows))
    print(
        "\nms: median latency; (×) the ratio to the original (below 1 = faster). A/A: a second "
        "session of the original (noise). relsat: `relsat optimize --keep-slower` (the raw "
        "optimized model); relsat handed: without it (what the user gets); onnxsim+relsat: "
        "relsat --keep-slower on the onnxsim output. Ops: ONNX nodes other than Constant. "
        "Priced cost: relsat's cost model (ms), before → after."
    )
    path = common.append_csv("real", CSV_HEADERS, [csv_row(r, args, machine) for r in rows])
    common.log(f"rows appended to {path}")


if __name__ == "__main__":
    main()
