"""Does relsat make real models faster in onnxruntime? Real exports through the ``relsat`` CLI.

    pip install -e '.[bench]'
    python bench/real.py [--models resnet50 hf-bert tensat-nasrnn ...] [--rounds 50] [--threads 2]
                         [--exports DIR] [--skip-onnxsim] [--relsat-args "--cost-model ort-cpu"]

The corpus (``--list`` prints it): torchvision architectures and Hugging Face models
(bench/real_models.py: random init from a fixed seed, exported by ``torch.onnx.export`` at opset
17, batch 1, batch norm folded by the exporter), plus the seven bundled TENSAT graphs written with
``relsat.onnx.save(models.load(name), path)`` (``tensat-<name>``). Exports are cached in
``--exports`` (default ``$TMPDIR/relsat-exports``) and reused while torch, transformers, the
opset and bench/real_models.py are unchanged.

Each model goes through ``relsat optimize IN.onnx --batch 1 -o OUT.onnx`` as a user runs it
(``python -m relsat`` in a subprocess, so a crash is a row, not the end of the table): once with
``--keep-slower`` (the raw optimized model) and once without (what relsat hands the user), and
once on the onnxsim-simplified model with ``--keep-slower``. Flags the installed CLI lacks are
left out (``relsat optimize --help`` decides; without ``--keep-slower`` one run serves both). The
priced cost, the rewrites and what was handed back are read from the CLI's output; a refusal is
recorded as ``refused: <message>``.

Latency: onnxruntime on the CPU with ``relsat.onnx.runtime.OrtSettings(threads=--threads)``
(ORT_ENABLE_ALL, sequential) and, unless ``--spin``, worker threads that do not spin between
runs (spinning threads of one session steal the cores of the next). One session per variant:
original, a second session of the original (the A/A row: what noise alone does), onnxsim,
relsat, relsat as handed, onnxsim then relsat; all on the export's example inputs. An
interleaved warm-up (>= 0.5 s), then ``--rounds`` rounds of one run each, the order rotated
every round; the median per variant and its ratio to the original's (below 1 = faster). A
variant that is byte-for-byte another file is timed once. Every variant's outputs are compared
with the original's (rtol 1e-4, atol 1e-5). Each ``relsat optimize`` call's output is kept beside
its result (``<exports>/runs/<model>/*.log``).

Ops count ONNX nodes other than Constant. Markdown on stdout, progress on stderr, rows appended
to bench/results/real.csv with a timestamp and the machine (``OrtSettings.machine()``).
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import importlib.util
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # sibling modules: common, real_models

import common  # noqa: E402
import numpy as np  # noqa: E402
import onnx  # noqa: E402

from relsat import models  # noqa: E402
from relsat import onnx as ronnx  # noqa: E402
from relsat.onnx.runtime import OrtSettings  # noqa: E402


def _real_models() -> ModuleType:
    """bench/real_models.py, imported when needed (it imports torch)."""
    import real_models

    return real_models


#: The variants timed, in the table's order.
VARIANTS = ("original", "A/A", "onnxsim", "relsat", "handed", "onnxsim+relsat")
TENSAT_PREFIX = "tensat-"
RTOL, ATOL = 1e-4, 1e-5


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def corpus() -> list[str]:
    """Every model name: torch exports (when torch imports), then the bundled TENSAT graphs."""
    names = []
    if importlib.util.find_spec("torch") is not None:
        names += list(_real_models().MODELS)
    return names + [TENSAT_PREFIX + m for m in models.BENCHMARKS]


# ---------------------------------------------------------------------------------------------
# the relsat command line


def cli_flags() -> set[str]:
    """The options ``relsat optimize`` accepts (read from its --help)."""
    out = subprocess.run(
        [sys.executable, "-m", "relsat", "optimize", "--help"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", out))


@dataclass
class Run:
    """One ``relsat optimize`` call and what its output says."""

    command: list[str]
    rc: int | None = None
    seconds: float = float("nan")
    output: Path | None = None  # the file written, if any
    error: str | None = None
    cost: tuple[float, float] | None = None
    rewrites: str | None = None
    kept: str | None = None  # what the CLI says it handed back, when it says
    timing: str | None = None  # the CLI's own latency comparison, when it timed
    verified: str | None = None  # the CLI's "verified" row, or "no: ..." when outputs differed
    stdout: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.error is None


_BOX = re.compile(r"[│┃║|]")
_COST = re.compile(r"^cost(?: \(ms\))?:?\s+(\d+\.\d+)\s*(?:->|→)?\s*(\d+\.\d+)")


def _parse(run: Run, stdout: str, stderr: str) -> None:
    """Cost, rewrites and the hand-back decision from the CLI's report or before/after table."""
    run.stdout = stdout
    for raw in stdout.splitlines():
        line = " ".join(_BOX.sub(" ", raw).split())
        if run.cost is None and (m := _COST.match(line)):
            run.cost = (float(m[1]), float(m[2]))
        elif line.startswith(("rewrites", "gains by rule")) and run.rewrites is None:
            # Result.report()'s "rewrites rule n, ..." or the CLI's "gains by rule (model): ..."
            run.rewrites = (line.split(": ", 1)[1] if ": " in line else line[8:]).strip()
            run.rewrites = run.rewrites or "none"
        elif line.startswith("verified ") and not line.startswith("verified in "):
            run.verified = line.removeprefix("verified ").strip()  # the final table's row
        elif line.startswith("onnxruntime CPU") and run.timing is None:
            run.timing = line
        elif line.startswith("kept ") or line == "kept":
            run.kept = line.removeprefix("kept").strip(" :")
        elif run.kept is None and re.search(r"\bkept\b|\bslower\b|\bkeeps?\b", line):
            run.kept = line
    if run.rc not in (0, None):
        lines = [s.strip() for s in stderr.splitlines() if s.strip()]
        lines += [s.strip() for s in stdout.splitlines() if "relsat:" in s]
        tagged = [s for s in lines if s.startswith("relsat:")]
        message = (tagged or lines or [f"exit code {run.rc}"])[-1]
        run.error = message.removeprefix("relsat: error: ").removeprefix("relsat: ")
        if "outputs differ" in run.error or "verification failed" in run.error:
            run.verified = "no: " + run.error


def relsat_optimize(
    source: Path, target: Path, options: list[str], timeout: float, flags: set[str]
) -> Run:
    """``relsat optimize SOURCE --batch 1 -o TARGET OPTIONS`` in a subprocess."""
    if target.exists():
        target.unlink()
    target.with_suffix(".log").unlink(missing_ok=True)
    command = [sys.executable, "-m", "relsat", "optimize", str(source), "-o", str(target)]
    command += ["--batch", "1"] if "--batch" in flags else []
    command += options
    run = Run(command)
    env = os.environ | {"COLUMNS": "240", "NO_COLOR": "1", "TERM": "dumb"}
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        run.seconds, run.error = time.perf_counter() - start, f"timed out after {timeout:.0f} s"
        return run
    run.seconds, run.rc = time.perf_counter() - start, proc.returncode
    target.with_suffix(".log").write_text(
        f"$ {shlex.join(command)}\n# exit {proc.returncode}, {run.seconds:.1f} s\n"
        f"{proc.stdout}\n{proc.stderr}"
    )
    _parse(run, proc.stdout, proc.stderr)
    if target.exists():
        run.output = target
    elif run.rc == 0 and run.kept is None:
        run.kept = "no file written"
    return run


def optimize_runs(
    source: Path, work: Path, stem: str, args: argparse.Namespace, flags: set[str], handed: bool
) -> tuple[Run, Run]:
    """(raw, handed): ``--keep-slower`` and the default (only when ``handed``); one run for both
    when the CLI has no ``--keep-slower``."""
    # The same threads for relsat's ort-cpu prices and timing as for the bench's timing.
    extra = ["--threads", str(args.threads)] if "--threads" in flags else []
    extra += shlex.split(args.relsat_args)
    raw_opts = ["--keep-slower"] if "--keep-slower" in flags else []
    if "--no-timing" in flags and raw_opts:  # keep it anyway: relsat's own timing is not needed
        raw_opts.append("--no-timing")
    raw = relsat_optimize(source, work / f"{stem}.onnx", raw_opts + extra, args.timeout, flags)
    if raw.rc == 2 and "--no-timing" in raw_opts:  # the two flags refused together
        raw_opts.remove("--no-timing")
        raw = relsat_optimize(source, work / f"{stem}.onnx", raw_opts + extra, args.timeout, flags)
    if "--keep-slower" not in flags or not handed:
        return raw, raw
    user = relsat_optimize(source, work / f"{stem}.handed.onnx", extra, args.timeout, flags)
    return raw, user


# ---------------------------------------------------------------------------------------------
# sources and onnxsim


def prepare(name: str, exports: Path) -> tuple[Path, dict[str, np.ndarray], str]:
    """(the original ONNX file, its example inputs by name, where it came from)."""
    if name.startswith(TENSAT_PREFIX):
        path = exports / f"{name}.onnx"
        ronnx.save(models.load(name.removeprefix(TENSAT_PREFIX)), path)
        return path, ronnx.random_inputs(path), "relsat.onnx.save"
    export = _real_models().export(name, exports)
    return export.path, export.inputs, export.exporter


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send file descriptor 1 to stderr: onnxsim's C++ core prints warnings to stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def simplifier() -> tuple[str, Callable[[onnx.ModelProto], onnx.ModelProto]] | None:
    """("onnxsim" or "onnxslim", the simplify function), or None when neither is installed."""
    if importlib.util.find_spec("onnxsim") is not None:
        import onnxsim

        def simplify(model: onnx.ModelProto) -> onnx.ModelProto:
            simplified, ok = onnxsim.simplify(model)
            if not ok:
                raise RuntimeError("onnxsim's own check failed")
            return simplified

        return "onnxsim", simplify
    if importlib.util.find_spec("onnxslim") is not None:
        import onnxslim

        return "onnxslim", onnxslim.slim
    return None


def op_count(path: Path) -> int:
    graph = onnx.load(str(path), load_external_data=False).graph
    return sum(n.op_type != "Constant" for n in graph.node)


# ---------------------------------------------------------------------------------------------
# timing


def _feed(session: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The example inputs under the session's input names (by position when the names differ)."""
    names = [i.name for i in session.get_inputs()]
    if set(names) == set(inputs):
        return {n: inputs[n] for n in names}
    if len(names) != len(inputs):
        raise ValueError(f"inputs {names} do not match the export's {sorted(inputs)}")
    return dict(zip(names, inputs.values(), strict=True))


def _session(path: Path, settings: OrtSettings, spin: bool) -> Any:
    """``settings``' session for ``path``, spinning worker threads only with ``spin`` (see
    :class:`relsat.onnx.runtime.OrtSettings`: interleaved sessions on a few cores steal each other's
    cores when idle threads spin)."""
    return replace(settings, spin=spin).session(path)


def latencies(
    files: dict[str, Path],
    inputs: dict[str, np.ndarray],
    settings: OrtSettings,
    rounds: int,
    spin: bool = False,
) -> tuple[dict[str, float], dict[str, str]]:
    """(median ms by variant, check by variant): interleaved rounds, rotated order."""
    sessions, feeds, checks = {}, {}, {}
    reference: list[np.ndarray] | None = None
    for variant, path in files.items():
        try:
            sessions[variant] = _session(path, settings, spin)
            feeds[variant] = _feed(sessions[variant], inputs)
            outputs = [np.asarray(o) for o in sessions[variant].run(None, feeds[variant])]
        # Broad on purpose: onnxruntime raises its own unrelated exception classes.
        except Exception as exc:
            checks[variant] = "fails in onnxruntime: " + _first_line(exc)
            sessions.pop(variant, None)
            continue
        if reference is None:
            reference = outputs
        cmp = ronnx.compare_outputs(reference, outputs, rtol=RTOL, atol=ATOL)
        err = max(cmp.max_abs, default=0.0)
        checks[variant] = f"ok ({err:.1g})" if cmp.ok else f"DIFFERS: {cmp.report()}"
    names = list(sessions)
    start, done = time.perf_counter(), 0
    while done < 3 or time.perf_counter() - start < 0.5:  # the first runs are slower
        for n in names:
            sessions[n].run(None, feeds[n])
        done += 1
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names) if names else 0
        for n in names[k:] + names[:k]:
            t = time.perf_counter()
            sessions[n].run(None, feeds[n])
            times[n].append(1000 * (time.perf_counter() - t))
    return {n: statistics.median(v) for n, v in times.items() if v}, checks


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


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
        return "no: " + _first_line(exc)
    seconds = time.perf_counter() - start
    opaque, total = graph.op_counts().get("opaque", 0), len(graph)
    share = 100 * opaque / total if total else 0
    return f"yes ({opaque}/{total} opaque, {share:.0f} %; import {seconds:.2f} s)"


def bench_model(name: str, args: argparse.Namespace, flags: set[str]) -> Row:
    row = Row(name)
    exports = Path(args.exports)
    work = exports / "runs" / name
    work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    original, inputs, row.source = prepare(name, exports)
    log(f"  {name}: {row.source} ({time.perf_counter() - t:.1f} s)")
    row.loads = _loads(original)
    files: dict[str, Path] = {"original": original, "A/A": original}
    row.ops["original"] = op_count(original)

    sim = None if args.skip_onnxsim else simplifier()
    sim_path = work / "onnxsim.onnx"
    if sim is not None:
        try:
            with _stdout_to_stderr():
                simplified = sim[1](onnx.load(str(original)))
            onnx.save(simplified, str(sim_path))
            files["onnxsim"] = sim_path
            if sim[0] != "onnxsim":
                row.notes.append(f"onnxsim column is {sim[0]}")
        except Exception as exc:  # a simplifier crash is a row entry, like relsat's
            row.notes.append(f"{sim[0]} failed: {_first_line(exc)}")

    t = time.perf_counter()
    raw, handed = optimize_runs(original, work, "relsat", args, flags, handed=True)
    log(
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
    log(f"  {name}: relsat runs done in {time.perf_counter() - t:.1f} s; timing")

    for variant, path in files.items():
        row.ops.setdefault(variant, op_count(path))
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
    settings = OrtSettings(threads=args.threads)
    ms, checks = latencies(distinct, inputs, settings, args.rounds, spin=args.spin)
    for variant in files:
        source = row.same_as.get(variant, variant)
        if source in ms:
            row.ms[variant] = ms[source]
        if source in checks:
            row.checks[variant] = checks[source]
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


def _extend_csv_header() -> None:
    """Add the columns appended to ``CSV_HEADERS`` since real.csv was started to its header
    line; earlier rows are kept as written (their trailing fields empty)."""
    path = common.RESULTS / "real.csv"
    if not path.exists():
        return
    with path.open(newline="") as f:  # csv writes \r\n line endings: keep them
        lines = f.readlines()
    header = ["when", "machine", *CSV_HEADERS]
    first = lines[0].rstrip("\r\n")
    old = first.split(",")
    if old != header and header[: len(old)] == old:
        lines[0] = ",".join(header) + lines[0][len(first) :]  # its own line ending
        with path.open("w", newline="") as f:
            f.writelines(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", help="model names (default: all; --list shows them)")
    ap.add_argument("--list", action="store_true", help="print the corpus and exit")
    ap.add_argument("--rounds", type=int, default=50, help="interleaved timing rounds")
    ap.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    ap.add_argument(
        "--exports",
        default=str(Path(tempfile.gettempdir()) / "relsat-exports"),
        help="where exports and relsat's outputs are kept (default: %(default)s)",
    )
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
    available = corpus()
    if args.list:
        print("\n".join(available))
        return
    names = args.models or available
    unknown = [n for n in names if n not in available]
    if unknown:
        ap.error(f"unknown models {unknown}; available: {', '.join(available)}")
    if importlib.util.find_spec("torch") is None:
        log("torch is not installed: only the bundled graphs (pip install -e '.[bench]')")
    flags = cli_flags()
    missing = [f for f in ("--keep-slower", "--no-timing", "--threads") if f not in flags]
    if missing:
        log(f"relsat optimize has no {', '.join(missing)}: left out")
    settings = OrtSettings(threads=args.threads)
    machine = settings.machine()

    rows = []
    for name in names:
        try:
            rows.append(bench_model(name, args, flags))
        # Broad on purpose: one model's failure is a row with the error, never the end.
        except Exception as exc:
            log(traceback.format_exc())
            rows.append(Row(name, notes=[f"bench failed: {_first_line(exc)}"]))
    print(
        f"### relsat on real exports: onnxruntime CPU latency ({machine}, spinning "
        f"{'on' if args.spin else 'off'}, median of {args.rounds} interleaved rounds)\n"
    )
    print(markdown(rows))
    print(
        "\nms: median latency; (×) the ratio to the original (below 1 = faster). A/A: a second "
        "session of the original (noise). relsat: `relsat optimize --keep-slower` (the raw "
        "optimized model); relsat handed: without it (what the user gets); onnxsim+relsat: "
        "relsat --keep-slower on the onnxsim output. Ops: ONNX nodes other than Constant. "
        "Priced cost: relsat's cost model (ms), before → after."
    )
    _extend_csv_header()
    path = common.append_csv("real", CSV_HEADERS, [csv_row(r, args, machine) for r in rows])
    log(f"rows appended to {path}")


if __name__ == "__main__":
    main()
