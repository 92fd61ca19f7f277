"""``relsat optimize``: the arguments as one :class:`~relsat.Options`, :func:`relsat.optimize`,
then progress lines, the rules' gains, the timing verdict and a before/after table, and the kept
model written (:meth:`relsat.Result.save`). What is optimized, checked, timed and kept is the
API's; this module parses and prints.

The input is never lost: ``-o`` naming the input file (or the same file through a link) is
refused before any work unless ``--in-place`` says so; then a copy of the original is kept
beside it (``IN.onnx.orig``) until the new file is written and read back (:func:`_write_in_place`).

The optimization options (:func:`add_options`) and their mapping to :class:`Options`
(:func:`options`) are shared with ``relsat optimize-many`` (:mod:`relsat.cli.many`)."""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from relsat.cli.common import EXIT_VERIFY, Usage, console
from relsat.cost import DEVICES
from relsat.engine.explore import IterationStats, Limits
from relsat.errors import RelsatError, SettingsError
from relsat.extract import IlpOptions
from relsat.graph.graph import Graph
from relsat.onnx.latency import Timing
from relsat.onnx.runtime import OrtSettings
from relsat.pipeline.options import Options
from relsat.pipeline.result import Result, op_counts
from relsat.pipeline.run import Stage
from relsat.pipeline.save import temp_beside
from relsat.pipeline.verify import VerificationError

__all__ = ["add", "add_options", "error_text", "flag_names", "options", "usage"]

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
#: The other settings an option gives: the setting → its flag and, where the API's wording names
#: Python values, what the option takes in the words of ``--help`` (None: the API's words).
OTHER_FLAGS: dict[str, tuple[str, str | None]] = {
    "cost_model": (
        "--cost-model",
        f"ort-cpu, analytic, analytic-<device> or a device ({', '.join(sorted(DEVICES))})",
    ),
    "input_shapes": ("--input-shape", "NAME=D,D,... with positive dims"),
    "timing_shapes": ("--timing-shape", "DIM=V,... with positive values"),
    "inputs": ("--inputs", None),
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
        help="where to write the model kept (ONNX for an ONNX input, relsat JSON for --model; "
        "missing folders are made); never the input file itself, unless --in-place",
    )
    p.add_argument(
        "--in-place",
        action="store_true",
        help="replace the input file with the model kept (no -o, or -o naming the input): the "
        "original is first copied to IN.onnx.orig, that copy is removed once the new file is "
        "written and reads back as a valid model with the input's interface, and on any "
        "failure the original is put back; when the original is kept, nothing is written",
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
    p.add_argument(
        "--runtime-first",
        choices=("auto", "on", "off"),
        default="auto",
        help="run the rules marked runtime (the fusions onnxruntime makes itself: a Conv's bias, "
        "batch norm and activation) to a fixpoint before the multi-pattern rules, so that these "
        "see the fused units (auto: for an ONNX input, not for a TENSAT graph)",
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
    p.add_argument(
        "--extractor",
        default="ilp",
        choices=("ilp", "greedy", "greedy-dag"),
        help="how the cheapest graph is picked from the e-graph: ilp (HiGHS, optimal within "
        "--ilp-time-limit), greedy (each e-class its cheapest e-node), greedy-dag (greedy, "
        "shared nodes priced once)",
    )
    _number(
        p,
        "--ilp-time-limit",
        float,
        None,
        "ILP extraction seconds; default: 5 s + 1 ms per node of the reduced model, at most 60",
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
    _number(
        p,
        "--threads",
        int,
        0,
        "onnxruntime intra-op threads for timing and ort-cpu costs; 0: onnxruntime's default, "
        "one per physical core",
    )
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
    p.add_argument(
        "--remeasure",
        action="store_true",
        help="re-time every ort-cpu price this run uses, replacing those a re-check disagrees "
        "with (relsat costs show lists the spreads)",
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
    if args.remeasure:
        from relsat.cost.ort import remeasured

        settings = remeasured(settings, onnx=args.input is not None)
    target = _output(args)  # the input never lost, an unwritable output refused: before work
    model: str | Graph = args.input if args.input is not None else models.load(args.model)
    if args.model is not None and target is not None and target.suffix == ".onnx":
        settings = replace(settings, exportable=True)  # a bundled graph written as ONNX
    _prepare_db(args)
    out = console()
    progress = Progress(out, args.input or args.model)
    try:
        result = optimize(model, settings, on_phase=progress.on_phase, guard=progress.stage)
        _print_result(result, args, out)
        if target is not None:
            written = _write_in_place(result, target) if args.in_place else _write(result, target)
    except VerificationError as exc:
        text = f"relsat: {FAILED[exc.check]}, nothing written: {exc.detail}"
        out.print(text, style="red", markup=False)
        return EXIT_VERIFY
    out.print(_final_table(result))
    if target is not None:
        out.print(written, soft_wrap=True)
    if args.db:
        out.print(f'e-graph kept in {args.db} (relsat sql {args.db} "SELECT …")', soft_wrap=True)
    return 0


def _output(args: argparse.Namespace) -> Path | None:
    """Where the kept model goes, checked before any work: never the input file (also through a
    symbolic or hard link) unless ``--in-place``; not a folder; a missing folder made, an
    unwritable one refused (a :class:`RelsatError` naming it)."""
    if args.in_place:
        return _in_place_target(args)
    if args.output is None:
        return None
    target = Path(args.output)
    if args.input is not None and _same_file(args.input, target):
        raise Usage(
            f"-o {args.output} is the input model: writing it would destroy the original; give "
            "another path, or --in-place to replace it"
        )
    if target.is_dir():
        raise Usage(f"-o {args.output} is a folder: give a file path, e.g. {target / 'opt.onnx'}")
    _writable(target)
    return target


def _in_place_target(args: argparse.Namespace) -> Path:
    """``--in-place``: the input file itself (the file a link points to), checked."""
    if args.input is None:
        raise Usage("--in-place replaces an ONNX input file: give one, not --model")
    if args.output is not None and not _same_file(args.input, Path(args.output)):
        raise Usage("--in-place writes over the input: give no -o, or -o naming the input")
    target = Path(os.path.realpath(args.input))
    if not target.is_file():
        raise Usage(f"--in-place: {args.input} is not a file")
    backup = _backup(target)
    if backup.exists():
        raise Usage(
            f"--in-place: {backup} already exists (a copy an earlier run kept?): move it away first"
        )
    from relsat.pipeline.save import has_external_data

    if has_external_data(target.read_bytes()):
        raise Usage(
            f"--in-place: {args.input} keeps tensors in external files, which the new model "
            "would not share: write it elsewhere with -o"
        )
    _writable(target)
    return target


def _same_file(a: str | Path, b: str | Path) -> bool:
    """Are ``a`` and ``b`` one file (through symbolic or hard links too)?"""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): the same path, at most
        return os.path.realpath(a) == os.path.realpath(b)


def _writable(target: Path) -> None:
    """Make the output's missing folders and check a file can be written there (else a
    :class:`RelsatError` naming it, before any work)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RelsatError(f"{target}: cannot write the output ({exc.strerror})") from None
    temp_beside(target).unlink()


def _backup(target: Path) -> Path:
    return target.with_name(target.name + ".orig")


def _write(result: Result, target: Path) -> str:
    """Write the kept model to ``target``; the line that says so."""
    result.save(target)
    return f"written to {target}"


def _write_in_place(result: Result, target: Path) -> str:
    """``--in-place``: the kept model written over the input, a copy of the original kept as
    ``IN.onnx.orig`` until the new file reads back as a valid ONNX model with the input's
    interface; on any failure the original is put back (and the copy stays). An input kept as
    it was is not written at all. The line that says what was done."""
    if result.kept == "original":
        return f"{target} left as it was (the original is kept)"
    backup = _backup(target)
    shutil.copy2(target, backup)
    try:
        result.save(target)
        _check_written(target, result)
    except BaseException:
        os.replace(backup, target)  # the original back, whatever failed
        raise
    backup.unlink()
    return f"written to {target} (in place; the copy of the original is removed)"


def _check_written(target: Path, result: Result) -> None:
    """The written file is a valid ONNX model with the input's interface (input and output
    names), else a :class:`RelsatError` naming it."""
    import onnx

    try:
        onnx.checker.check_model(str(target))
        written = onnx.load(str(target), load_external_data=False).graph
    except Exception as exc:  # onnx raises its own unrelated exception classes
        raise RelsatError(f"{target}: the written model does not read back ({exc})") from None
    assert result.source is not None, "--in-place needs an ONNX input"

    def interface(g: Any) -> tuple[list[str], list[str]]:
        inits = {i.name for i in g.initializer}
        return [i.name for i in g.input if i.name not in inits], [o.name for o in g.output]

    if interface(written) != interface(result.source.proto().graph):
        raise RelsatError(f"{target}: the written model's inputs or outputs are not the input's")


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
            runtime_first={"auto": None, "on": True, "off": False}[args.runtime_first],
            scheduler=args.scheduler,
            guards=not args.no_guards,
            cost_model=args.cost_model,
            extractor=args.extractor,
            ilp=IlpOptions(time_limit=args.ilp_time_limit),
            blocks=args.blocks,
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
        text = usage(exc)
        if text is None:
            raise
        raise Usage(text) from None


def usage(exc: SettingsError) -> str | None:
    """A bad setting in the words of the command line: the flag the user typed and what it
    takes (``--cost-model must be ort-cpu, analytic, …, got 'tpu'``); None for a setting no
    option gives."""
    if exc.option in FLAGS:
        flag, valid = FLAGS[exc.option]
        return f"{flag} must be {valid}, got {exc.value}"
    if exc.option in OTHER_FLAGS:
        flag, wanted = OTHER_FLAGS[exc.option]
        return f"{flag} must be {wanted or exc.wanted}, got {exc.value!r}"
    return None


def error_text(exc: RelsatError) -> str:
    """An error in the words of the command line: a setting it names (an ONNX input's shape
    given with ``input_shapes``) called by the flag the user typed (``--input-shape``)."""
    from relsat.onnx.errors import OnnxError

    if not isinstance(exc, OnnxError) or not exc.settings:
        return str(exc)
    return exc.named(flag_names())


def flag_names() -> dict[str, str]:
    """Each setting an option gives → the flag (``input_shapes`` → ``--input-shape``)."""
    return {k: v[0] for k, v in FLAGS.items()} | {k: v[0] for k, v in OTHER_FLAGS.items()}


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
    work, naming the two options. A new file's missing folders are made."""
    if not args.db:
        return
    if not Path(args.db).exists():
        _writable(Path(args.db))
        return
    if args.resume:
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


#: What each stage that can take more than a second is doing, for the live line.
DOING = {
    "load": "reading the model",
    "explore": "exploring rewrites",
    "price": "pricing the operators",
    "extract": "choosing the cheapest graph",
    "verify": "checking the outputs in NumPy",
    "check": "checking the outputs in onnxruntime",
    "time": "timing the optimized model against the original",
}
#: Stages that show their own live bar (the ort-cpu cost model's, on stderr, while it measures
#: operators): two live displays on one terminal would overwrite each other.
OWN_BAR = ("price",)
#: The exploration lines' legend, printed above the first.
EXPLORE_LEGEND = (
    "explore: one line per phase of rules — iteration, phase, rule matches found and applied, "
    "e-nodes added, merged away (congruence), net change, e-nodes in all, seconds"
)


class Progress:
    """What ``relsat optimize`` says while it works: what was loaded, a line per exploration
    phase (under a legend), and for each stage that can take more than a second
    (:data:`DOING`) a live line in a terminal while it runs, or else (a pipe, a log) a line
    with the time of day once it is done. ``on_phase`` and ``stage`` are
    :func:`relsat.optimize`'s ``on_phase`` and ``guard``."""

    def __init__(self, out: Any, source: str) -> None:
        self.out = out
        self.source = source
        self.live = bool(out.is_terminal)
        self.legend = False

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """The context ``name`` runs in: in a terminal, a live line while it runs."""
        if not self.live or name not in DOING or name in OWN_BAR:
            yield
            return
        with self.out.status(f"{name}: {DOING[name]} …"):
            yield

    def on_phase(self, event: IterationStats | Stage) -> None:
        """One exploration phase's line, or a stage done."""
        if isinstance(event, Stage):
            self._stage_done(event)
            return
        if not self.legend:
            self.out.print(EXPLORE_LEGEND, soft_wrap=True)
            self.legend = True
        s = event
        seconds = s.search_s + s.apply_s + s.rebuild_s + s.cycle_s
        self.out.print(
            f"  it {s.iteration:2d} {s.phase:7s} matches {s.matches:6d} applied "
            f"{s.applied:6d} added {s.new_enodes:5d} merged {s.merged:5d} net {s.net:+6d} "
            f"e-nodes {s.enodes:6d} {seconds:.2f}s"
            + (f" (e-node limit: {s.capped} matches not applied)" if s.capped else "")
            + (f" (backoff: {s.banned} matches of banned rules discarded)" if s.banned else ""),
            soft_wrap=True,
        )

    def _stage_done(self, event: Stage) -> None:
        if event.name == "load":
            nodes = len(event.run.graph)
            self.out.print(f"optimizing {self.source}: {nodes} nodes", soft_wrap=True)
            _print_opaque(event.run.graph, self.out)
        if not self.live and event.name in DOING:
            clock = time.strftime("%H:%M:%S")
            self.out.print(f"[{clock}] {event.name} done, {event.seconds:.1f} s", soft_wrap=True)


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
    if result.tidying != "off":
        out.print(f"tidy: {result.tidying}", soft_wrap=True)
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
        out.print(f"gains by rule ({result.cost_model}): {result.gains_text()}", soft_wrap=True)
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
        out.print(f"the optimized model is kept anyway (--keep-slower): {why}", soft_wrap=True)
    else:
        out.print(
            f"the original is kept unchanged ({why}; --keep-slower keeps the optimized one)",
            soft_wrap=True,
        )


def _final_table(result: Result) -> Any:
    """Before and after: priced cost, measured latency (a caption says which is which), the
    operators by the names users know (:func:`~relsat.pipeline.result.op_counts`; when the
    original was written, the column says the optimized graph's counts were not), seconds per
    stage, and how the run ended."""
    from rich.table import Table

    timed = result.latencies or ((("", result.latency),) if result.latency else ())
    measured = not result.cost_model.startswith("analytic")
    caption = (
        "cost: the sum of the operators' "
        + ("measured prices" if measured else "estimated costs")
        + f" ({result.cost_model})"
        + ("; latency: the whole model timed end to end in onnxruntime" if timed else "")
    )
    unkept = result.source is not None and result.kept == "original" and result.why != "no rewrite"
    t = Table(title="before / after", show_edge=False, caption=caption)
    t.add_column("")
    t.add_column("before", justify="right")
    t.add_column("after (not written)" if unkept else "after", justify="right")
    t.add_row(
        "cost (ms)",
        f"{result.cost_before:.4f}",
        f"{result.cost_after:.4f} ({100 * result.reduction:.1f} % less)",
    )
    t.add_row("cost model", "", result.cost_model)
    if result.cost_fallbacks is not None:  # a measured table: signatures it lacked
        t.add_row("  by fallback", "", f"{result.cost_fallbacks} signatures")
    for label, latency in timed:
        t.add_row(
            "latency (ms)" + (f" at {label}" if label and len(timed) > 1 else ""),
            f"{latency.original_ms:.4g}",
            f"{latency.optimized_ms:.4g} (x{latency.speedup:.2f}, {latency.word})",
        )
    before, after = op_counts(result.original), op_counts(result.graph)
    for op in sorted(set(before) | set(after), key=str.lower):
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
