"""``relsat optimize``: the arguments as one :class:`~relsat.Options`, :func:`relsat.optimize`,
then progress lines, the rules' gains, the timing verdict and a before/after table, and the kept
model written (:meth:`relsat.Result.save`). What is optimized, checked, timed and kept is the
API's; this module parses and prints.

The optimization options (:func:`add_options`) and their mapping to :class:`Options`
(:func:`options`) are shared with ``relsat optimize-many`` (:mod:`relsat.cli.many`)."""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from relsat.cli.common import EXIT_VERIFY, Usage, console
from relsat.engine.explore import IterationStats, Limits
from relsat.errors import SettingsError
from relsat.extract import IlpOptions
from relsat.graph.graph import Graph
from relsat.onnx.latency import Timing
from relsat.onnx.runtime import OrtSettings
from relsat.pipeline.options import Options
from relsat.pipeline.result import Result
from relsat.pipeline.run import Stage
from relsat.pipeline.save import temp_beside
from relsat.pipeline.verify import VerificationError

__all__ = ["add", "add_options", "options"]

#: The numeric options: the setting a :class:`~relsat.errors.SettingsError` names → the flag
#: and its valid values, for a one-line usage error naming the flag.
FLAGS: dict[str, tuple[str, str]] = {
    "k_multi": ("--k-multi", ">= 0"),
    "k_neutral": ("--k-neutral", ">= 0"),
    "nodes": ("--nodes", ">= 1"),
    "iterations": ("--iterations", ">= 0"),
    "seconds": ("--time-limit", ">= 0"),
    "time_limit": ("--ilp-time-limit", "> 0"),
    "batch": ("--batch", ">= 1"),
    "threads": ("--threads", ">= 0"),
    "max_seconds": ("--timing-seconds", "> 0"),
}

#: How a verification failure is announced, by :attr:`VerificationError.check`.
FAILED = {
    "numpy": "verification failed",
    "onnxruntime": "onnxruntime outputs differ",
    "interface": "the optimized graph's interface differs",
}


def add(sub: Any) -> None:
    """Add ``optimize`` and its options to the sub-command parsers."""
    p = sub.add_parser("optimize", help="optimize an ONNX file or a bundled model")
    p.add_argument("input", nargs="?", help="an ONNX model")
    p.add_argument("--model", help="a bundled model instead (relsat models)")
    p.add_argument(
        "-o",
        "--output",
        help="where to write the optimized model (ONNX for an ONNX input, relsat JSON for --model)",
    )
    p.add_argument("--db", help="keep the e-graph in this DuckDB file for inspection")
    p.add_argument(
        "--resume",
        action="store_true",
        help="explore the e-graph stored in --db further (iterations and limits go on)",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace an e-graph already stored in --db"
    )
    add_options(p)
    p.set_defaults(run=run)


def add_options(p: argparse.ArgumentParser) -> None:
    """The optimization options ``optimize`` and ``optimize-many`` share (:func:`options` maps
    them to :class:`Options`). (Long: one declaration per option, in the order ``--help``
    lists them.)"""
    p.add_argument("--rules", nargs="*", help="rule files or folders (default: rules/)")
    _number(p, "--k-multi", int, 1, "iterations with multi-pattern rules")
    _number(
        p,
        "--k-neutral",
        int,
        1,
        "iterations with the neutral rules (element-wise associativity and commutativity, priced "
        "alike by every cost model)",
    )
    _number(p, "--nodes", int, 50_000, "e-node limit")
    _number(p, "--iterations", int, 15, "iteration limit")
    _number(p, "--time-limit", float, 3600.0, "exploration seconds")
    p.add_argument(
        "--cost-model",
        help="ort-cpu, analytic, analytic-<device>, or a device (h100, h200, a100, v100, t4): "
        "its shipped measured table (relsat/data/costs/<device>.parquet; h200 is shipped) "
        "with the device's roofline for what the table lacks, else the roofline "
        "(default: ort-cpu for an ONNX input, else analytic)",
    )
    p.add_argument("--extractor", default="ilp", choices=("ilp", "greedy", "greedy-dag"))
    _number(
        p,
        "--ilp-time-limit",
        float,
        None,
        "ILP extraction seconds; default: 5 s + 1 ms per node of the reduced model, at most 60",
    )
    p.add_argument(
        "--no-packing",
        action="store_true",
        help="never pack an attention with its projections into one com.microsoft Attention "
        "(by default done where it measures faster, with ort-cpu prices)",
    )
    p.add_argument(
        "--blocks",
        nargs="?",
        const="on",
        choices=("auto", "on", "off"),
        help="explore each distinct repeated block (identical layers) once, then put the "
        "optimized block back into every layer: on, off, or auto (only a chain of layers; "
        "the default for an ONNX input; off for --model)",
    )
    p.add_argument(
        "--scheduler",
        default="simple",
        choices=("simple", "backoff"),
        help="simple: apply every match; backoff: egg's backoff scheduler, as TENSAT ran (a "
        "rule with over 1,000 new matches in an iteration is banned for 5 iterations, both "
        "doubled per ban), so that a rule set that explodes leaves room for the other rules",
    )
    _number(
        p,
        "--batch",
        int,
        None,
        "the batch an ONNX input with a dynamic batch dim is priced and timed at (default 1)",
    )
    p.add_argument(
        "--input-shape",
        action="append",
        metavar="NAME=D,D,...",
        help="the shape an ONNX input is priced and timed at, e.g. input_ids=1,128 (repeatable); "
        "dynamic dims stay dynamic in the written model unless --static (defaults: batch 1, "
        "other dynamic dims 128)",
    )
    p.add_argument(
        "--inputs",
        metavar="FILE.npz",
        help="input values for onnxruntime's checks and timing (np.savez: one array per input "
        "name), fed wherever an input's shape is the array's: values relsat cannot draw, such "
        "as axes or a target shape given as an input; their shapes price dynamic dims unless "
        "--input-shape",
    )
    p.add_argument(
        "--static",
        action="store_true",
        help="fix dynamic dims to the --input-shape / --batch values: the written model's "
        "interface is fixed to them",
    )
    p.add_argument(
        "--timing-shape",
        action="append",
        metavar="DIM=V,...",
        help="also time at these values of the model's dynamic dims, e.g. batch=8,sequence=512 "
        "(repeatable; dims not named keep their pricing value); the verdict is the worst",
    )
    p.add_argument("--no-verify", action="store_true", help="skip numerical verification")
    _number(p, "--threads", int, 0, "onnxruntime intra-op threads for timing and ort-cpu costs")
    _number(
        p,
        "--timing-seconds",
        float,
        10.0,
        "time budget for timing original vs optimized (at least 15 rounds run)",
    )
    p.add_argument(
        "--keep-slower",
        action="store_true",
        help="write the optimized ONNX model even when it is not measurably faster",
    )
    p.add_argument(
        "--no-timing",
        action="store_true",
        help="do not time the models; write the optimized one untimed",
    )
    p.add_argument(
        "--no-guards",
        action="store_true",
        help="TENSAT's unguarded rules (can be unsound; verification catches it)",
    )
    p.add_argument(
        "--cost-store",
        metavar="DIR",
        help="also read and write ort-cpu prices in this shared cost store (a folder every "
        "machine can reach; rows of other machine identities are never used): relsat costs",
    )


def _number(p: argparse.ArgumentParser, flag: str, kind: type, default: Any, what: str) -> None:
    """A numeric option whose valid values (:data:`FLAGS`) its help names."""
    valid = next(v for f, v in FLAGS.values() if f == flag)
    p.add_argument(flag, type=kind, default=default, help=f"{what} ({valid})")


def run(args: argparse.Namespace) -> int:
    """``relsat optimize``: parse, optimize, print, write; the exit code."""
    from relsat import models
    from relsat.pipeline.optimize import optimize

    if (args.input is None) == (args.model is None):
        raise Usage("give either an ONNX file or --model NAME")
    if (args.resume or args.overwrite) and not args.db:
        raise Usage("--resume and --overwrite need --db FILE")
    if args.resume and args.overwrite:
        raise Usage("give either --resume or --overwrite, not both")
    settings = options(args)
    if args.cost_store:
        from relsat.fleet.worker import with_store

        if settings.cost_model not in (None, "ort-cpu") or args.input is None:
            raise Usage("--cost-store prices with ort-cpu: an ONNX input and no other --cost-model")
        settings = with_store(settings, args.cost_store)
    model: str | Graph = args.input if args.input is not None else models.load(args.model)
    if args.model is not None and args.output and Path(args.output).suffix == ".onnx":
        settings = replace(settings, exportable=True)  # a bundled graph written as ONNX
    if args.output:  # refuse an unwritable output before the work, not after
        temp_beside(Path(args.output)).unlink()
    _prepare_db(args)
    out = console()
    try:
        result = optimize(model, settings, on_phase=_progress(out, args.input or args.model))
        _print_result(result, args, out)
        if args.output:
            result.save(args.output)
    except VerificationError as exc:
        text = f"relsat: {FAILED[exc.check]}, nothing written: {exc.detail}"
        out.print(text, style="red", markup=False)
        return EXIT_VERIFY
    out.print(_final_table(result))
    if args.output:
        out.print(f"written to {args.output}")
    if args.db:
        out.print(f'e-graph kept in {args.db} (relsat sql {args.db} "SELECT …")')
    return 0


def options(args: argparse.Namespace) -> Options:
    """The :class:`Options` the arguments give; a numeric option out of its range is bad usage
    naming the flag (:data:`FLAGS`), another bad setting a :class:`SettingsError`."""
    from relsat.rewrite.rulefile import load_rules

    try:
        timing = Timing(max_seconds=args.timing_seconds)  # checked with --no-timing too
        return Options(
            limits=Limits(nodes=args.nodes, iterations=args.iterations, seconds=args.time_limit),
            rules=load_rules(args.rules) if args.rules else None,
            k_multi=args.k_multi,
            k_neutral=args.k_neutral,
            scheduler=args.scheduler,
            guards=not args.no_guards,
            cost_model=args.cost_model,
            extractor=args.extractor,
            ilp=IlpOptions(time_limit=args.ilp_time_limit),
            blocks=args.blocks,
            packing=not args.no_packing,
            verify=not args.no_verify,
            db=getattr(args, "db", None),
            resume=getattr(args, "resume", False),
            input_shapes=_input_shapes(args) or None,
            inputs=_inputs(getattr(args, "inputs", None)),
            batch=args.batch,
            static=args.static,
            timing_shapes=_timing_shapes(args),
            ort=OrtSettings(threads=args.threads),
            timing=None if args.no_timing else timing,
            keep_slower=args.keep_slower,
        )
    except SettingsError as exc:
        if exc.option not in FLAGS:
            raise
        flag, valid = FLAGS[exc.option]
        raise Usage(f"{flag} must be {valid}, got {exc.value}") from None


def _inputs(path: str | None) -> dict[str, Any] | None:
    """``--inputs FILE.npz`` read: one array per input name; a file numpy cannot read as such
    is bad usage naming it."""
    if path is None:
        return None
    import numpy as np

    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValueError("one array, not a .npz of named arrays")
        with data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError, EOFError) as exc:
        raise Usage(f"--inputs {path}: cannot read it as a .npz of input arrays ({exc})") from None


def _input_shapes(args: argparse.Namespace) -> dict[str, list[int]]:
    """``--input-shape NAME=D,D,...`` (repeatable) as ``{name: dims}``."""
    shapes: dict[str, list[int]] = {}
    for spec in args.input_shape or []:
        name, sep, dims = spec.rpartition("=")
        try:
            values = [int(d) for d in dims.split(",")]
        except ValueError:
            values = []
        if not sep or not name or not values or any(d < 1 for d in values):
            raise Usage(f"--input-shape wants NAME=D,D,... with positive dims, got {spec!r}")
        if name in shapes:
            raise Usage(f"--input-shape gives {name!r} twice")
        shapes[name] = values
    return shapes


def _timing_shapes(args: argparse.Namespace) -> tuple[dict[str, int], ...]:
    """``--timing-shape DIM=V,...`` (repeatable) as dim values."""
    out = []
    for spec in args.timing_shape or []:
        values: dict[str, int] = {}
        for part in spec.split(","):
            name, sep, value = part.strip().partition("=")
            if not sep or not name or not value.isdigit() or int(value) < 1 or name in values:
                raise Usage(f"--timing-shape wants DIM=V,... with positive values, got {spec!r}")
            values[name] = int(value)
        out.append(values)
    return tuple(out)


def _prepare_db(args: argparse.Namespace) -> None:
    """``--db`` with ``--resume`` / ``--overwrite``: an e-graph already stored there is continued
    or replaced (only a relsat e-graph is ever deleted); without either it is refused before any
    work, naming the two options."""
    if not args.db or not Path(args.db).exists() or args.resume:
        return
    from relsat.engine.db import Database
    from relsat.engine.egraph import EGraph
    from relsat.errors import DatabaseError

    egraph = EGraph(Database(args.db, read_only=True))  # refuses another program's file
    stored = egraph.counts()[0]
    egraph.close()
    if not stored:
        return
    if not args.overwrite:
        raise DatabaseError(
            f"it already holds an e-graph ({stored} e-nodes): --resume explores it further, "
            "--overwrite replaces it",
            path=args.db,
        )
    for path in (Path(args.db), Path(f"{args.db}.wal")):
        path.unlink(missing_ok=True)


def _progress(out: Any, source: str) -> Any:
    """``on_phase``: what was loaded, then one line per exploration phase."""

    def on_phase(event: IterationStats | Stage) -> None:
        if isinstance(event, Stage):
            if event.name == "load":
                out.print(f"optimizing {source}: {len(event.run.graph)} nodes")
                _print_opaque(event.run.graph, out)
            return
        s = event
        seconds = s.search_s + s.apply_s + s.rebuild_s + s.cycle_s
        out.print(
            f"  it {s.iteration:2d} {s.phase:6s} matches {s.matches:6d} applied "
            f"{s.applied:6d} added {s.new_enodes:5d} merged {s.merged:5d} net {s.net:+6d} "
            f"e-nodes {s.enodes:6d} {seconds:.2f}s"
            + (f" (e-node limit: {s.capped} matches not applied)" if s.capped else "")
            + (f" (backoff: {s.banned} matches of banned rules discarded)" if s.banned else ""),
            soft_wrap=True,
        )

    return on_phase


def _print_opaque(graph: Graph, out: Any) -> None:
    """One line: the operators kept opaque (not rewritten), by type and count."""
    kept = Counter(n.params["type"] for n in graph.nodes if n.op == "opaque")
    if kept:
        total = sum(graph.op_counts().values())
        out.print(
            f"opaque: {sum(kept.values())} of {total} ops ("
            + ", ".join(f"{t} {k}" for t, k in kept.most_common())
            + ")",
            soft_wrap=True,
        )


def _print_result(result: Result, args: argparse.Namespace, out: Any) -> None:
    """Folding, a limit that stopped a stage, the rules' gains and, for an ONNX input, the
    check, timing and choice."""
    if result.blocks != "off":
        out.print(f"blocks: {result.blocks}", soft_wrap=True)
    if result.packing != "off":
        out.print(f"packing: {result.packing}", soft_wrap=True)
    if result.stopped != result.stop.value:  # a limit: the rules that filled the e-graph
        out.print(f"exploration stopped at the {result.stopped}", soft_wrap=True)
    e = result.extraction
    if e.bound is not None and e.status not in ("optimal", "input_optimal"):
        out.print(
            f"extraction stopped ({e.status}): at most {e.cost - e.bound:.4g} ms left on the "
            f"table (bound {e.bound:.4f} ms)",
            soft_wrap=True,
        )
    if result.rewrites():  # which rewrite bought what (marginal priced gain per rule)
        out.print(f"gains by rule ({result.cost_model}): {result.gains_text()}")
    if result.source is None:
        return
    if result.shapes is not None:
        out.print(f"shapes: {result.shapes.note}", soft_wrap=True)
    if result.why == "no rewrite":
        out.print("no rewrite chosen: the input model is kept unchanged")
        return
    if result.ort_check == "passed":
        at = f" at {' | '.join(result.checked_at)}" if result.checked_at else ""
        out.print(f"verified in onnxruntime: outputs match the original{at}", soft_wrap=True)
    elif result.ort_check and result.ort_check.startswith("failed"):
        out.print(f"{result.why}: the original is kept unchanged", soft_wrap=True)
        return
    latency = result.latency
    if latency is None:
        out.print("not timed (--no-timing): the optimized model is kept")
        return
    for label, timed in result.latencies or (("", latency),):
        out.print((f"at {label}: " if label else "") + timed.report(), soft_wrap=True)
    if result.kept == "optimized" and result.why == "faster":
        return
    why = result.why.removesuffix(", keep_slower")
    if result.kept == "optimized":
        out.print(f"the optimized model is {why}; kept anyway (--keep-slower)")
    else:
        out.print(
            f"the optimized model is {why}: the original is kept unchanged "
            "(--keep-slower keeps the optimized one)",
            soft_wrap=True,
        )


def _final_table(result: Result) -> Any:
    from rich.table import Table

    t = Table(title="before / after", show_edge=False)
    t.add_column("")
    t.add_column("before", justify="right")
    t.add_column("after", justify="right")
    t.add_row(
        "cost (ms)",
        f"{result.cost_before:.4f}",
        f"{result.cost_after:.4f} ({100 * result.reduction:.1f} % less)",
    )
    t.add_row("cost model", "", result.cost_model)
    if result.cost_fallbacks is not None:  # a measured table: signatures it lacked
        t.add_row("  by fallback", "", f"{result.cost_fallbacks} signatures")
    for label, latency in result.latencies or ((("", result.latency),) if result.latency else ()):
        t.add_row(
            "latency (ms)" + (f" at {label}" if label and len(result.latencies) > 1 else ""),
            f"{latency.original_ms:.4g}",
            f"{latency.optimized_ms:.4g} (x{latency.speedup:.2f}, {latency.verdict})",
        )
    before, after = result.original.op_counts(), result.graph.op_counts()
    for op in sorted(set(before) | set(after)):
        t.add_row(f"  {op}", str(before.get(op, 0)), str(after.get(op, 0)))
    for stage, secs in result.seconds.items():
        t.add_row(f"{stage} (s)", "", f"{secs:.3f}")
    t.add_row("stop", "", result.stop.value)
    t.add_row("extraction", "", f"{result.extraction.method} {result.extraction.status}")
    t.add_row("verified", "", _verified(result))
    t.add_row("kept", "", f"{result.kept} ({result.why})")
    return t


def _verified(result: Result) -> str:
    """The table's ``verified`` row: by onnxruntime for an ONNX input, else by NumPy."""
    if result.ort_check == "passed":
        return "onnxruntime"
    if result.ort_check == "not needed (unchanged)":
        return result.ort_check
    return "yes" if result.verified else "no (--no-verify)"
