"""The ``relsat`` command line.

    relsat models                                   the bundled graphs
    relsat summary MODEL [--json OUT]               build one and summarize it
    relsat optimize (--model NAME | IN.onnx) [-o OUT] [options]
    relsat show GRAPH.json [--model NAME] [-o OUT.svg]  draw it, changes highlighted
    relsat show --db DB --eclass ID [-o OUT.svg]    draw an e-class and its neighbourhood
    relsat sql DB "SELECT …"                        query a stored e-graph
    relsat inspect DB                               summary of a stored e-graph and its runs
    relsat rules check [FILE …]                     check rule files (default: the shipped ones)

For an ONNX input, ``optimize`` never writes a slower model: after verification it times the
optimized model against the input in onnxruntime (``relsat.onnx.latency``; ``--threads``,
``--timing-seconds``) and writes the input unchanged unless the optimized one is faster beyond
noise (``--keep-slower`` writes it anyway, ``--no-timing`` skips the timing). When no rewrite was
chosen the input is written unchanged without timing.

Exit codes: 0 success (also when the original is kept); 1 an error in the input or the run (one
line on stderr, a traceback with ``--debug``; for ``rules check`` also a rule that is not ok);
2 bad command-line usage, a numeric option out of its range included; 3 the optimized graph
failed verification (nothing is written); 130 interrupted (Ctrl-C; one line,
``relsat: interrupted``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relsat.errors import RelsatError, SettingsError
from relsat.graph.describe import summary
from relsat.graph.serial import from_json, to_json

if TYPE_CHECKING:
    from relsat.graph.graph import Graph
    from relsat.onnx.latency import LatencyComparison

__all__ = ["main"]

EXIT_ERROR, EXIT_USAGE, EXIT_VERIFY = 1, 2, 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl-C


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False)


def _models(args: argparse.Namespace) -> int:
    from relsat import models

    for m in models.available():
        mark = "*" if m.benchmark else " "
        print(f"{mark} {m.name:<18} {m.description}")
    print("\n* = one of the seven TENSAT benchmarks")
    return 0


def _summary(args: argparse.Namespace) -> int:
    from relsat import models

    graph = models.load(args.model)
    print(summary(graph, args.model))
    if args.json:
        _write_atomic(Path(args.json), to_json(graph, indent=1).encode())
        print(f"  written to {args.json}")
    return 0


def _optimize(args: argparse.Namespace) -> int:
    from relsat import models
    from relsat.engine.explore import IterationStats, Limits
    from relsat.pipeline.optimize import VerificationError, optimize
    from relsat.rewrite.rulefile import load_rules

    console = _console()
    onnx_in = args.input is not None
    if onnx_in == (args.model is not None):
        raise _Usage("give either an ONNX file or --model NAME")
    _check_numbers(args)
    if onnx_in:
        from relsat import onnx as ronnx

        graph = ronnx.load(args.input, input_shapes=_input_shapes(args), batch=args.batch)
        source = args.input
    else:
        graph = models.load(args.model)
        source = args.model
    if args.output:  # refuse an unwritable output before the work, not after
        _temp_beside(Path(args.output)).unlink()
    _prepare_db(args)
    rules = load_rules(args.rules) if args.rules else None
    limits = Limits(nodes=args.nodes, iterations=args.iterations, seconds=args.time_limit)
    console.print(f"optimizing {source}: {len(graph)} nodes")
    _print_opaque(graph, console)

    def on_phase(s: IterationStats) -> None:
        seconds = s.search_s + s.apply_s + s.rebuild_s + s.cycle_s
        console.print(
            f"  it {s.iteration:2d} {s.phase:6s} matches {s.matches:6d} applied "
            f"{s.applied:6d} added {s.new_enodes:5d} merged {s.merged:5d} net {s.net:+6d} "
            f"e-nodes {s.enodes:6d} {seconds:.2f}s"
            + (f" (e-node limit: {s.capped} matches not applied)" if s.capped else "")
            + (f" (backoff: {s.banned} matches of banned rules discarded)" if s.banned else ""),
            soft_wrap=True,
        )

    try:  # graphs with opaque ops are checked in onnxruntime below (optimize skips them)
        result = optimize(
            graph,
            rules=rules,
            k_multi=args.k_multi,
            limits=limits,
            cost_model=_cost_model(args, onnx_in),
            extractor=args.extractor,
            db=args.db,
            verify=not args.no_verify,
            guards=not args.no_guards,
            time_limit=args.ilp_time_limit,
            on_phase=on_phase,
            resume=args.resume,
            blocks=_blocks(args, onnx_in),
            scheduler=args.scheduler,
        )
    except VerificationError as exc:
        console.print(f"[red]relsat: verification failed, nothing written: {exc}[/red]")
        return EXIT_VERIFY
    mismatch = _interface_mismatch(graph, result.graph)
    if mismatch:  # checked whatever --no-verify says: such a graph is never written
        console.print(
            f"[red]relsat: the optimized graph's interface differs, nothing written: "
            f"{mismatch}[/red]"
        )
        return EXIT_VERIFY
    if result.settings["blocks"] != "off":
        console.print(f"blocks: {result.settings['blocks']}", soft_wrap=True)
    if result.rewrites():  # which rewrite bought what (marginal priced gain per rule)
        console.print(f"gains by rule ({result.settings['cost_model']}): {result.gains_text()}")
    if onnx_in:
        outcome = _finish_onnx(args, graph, result, console)
    else:
        outcome = _finish_bundled(args, graph, result, console)
    if outcome is None:
        return EXIT_VERIFY
    console.print(_final_table(result, outcome))
    if args.output:
        console.print(f"written to {args.output}")
    if args.db:
        console.print(f'e-graph kept in {args.db} (relsat sql {args.db} "SELECT …")')
    return 0


def _blocks(args: argparse.Namespace, onnx_in: bool) -> bool | str:
    """``--blocks``: on, off or auto; without it, auto for an ONNX input (real exports are
    chains of layers) and off for a bundled model (TENSAT's graphs explored whole, as TENSAT
    does)."""
    mode = args.blocks or ("auto" if onnx_in else "off")
    return "auto" if mode == "auto" else mode == "on"


def _prepare_db(args: argparse.Namespace) -> None:
    """``--db`` with ``--resume`` / ``--overwrite``: an e-graph already stored there is continued
    or replaced (only a relsat e-graph is ever deleted); without either it is refused before any
    work, naming the two options."""
    if (args.resume or args.overwrite) and not args.db:
        raise _Usage("--resume and --overwrite need --db FILE")
    if args.resume and args.overwrite:
        raise _Usage("give either --resume or --overwrite, not both")
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
            raise _Usage(f"--input-shape wants NAME=D,D,... with positive dims, got {spec!r}")
        if name in shapes:
            raise _Usage(f"--input-shape gives {name!r} twice")
        shapes[name] = values
    return shapes


def _print_opaque(graph: Graph, console: Any) -> None:
    """One line: the operators kept opaque (not rewritten), by type and count."""
    kept = Counter(n.params["type"] for n in graph.nodes if n.op == "opaque")
    if kept:
        total = sum(graph.op_counts().values())
        console.print(
            f"opaque: {sum(kept.values())} of {total} ops ("
            + ", ".join(f"{t} {k}" for t, k in kept.most_common())
            + ")",
            soft_wrap=True,
        )


#: The numeric options' ranges: option → (smallest valid value, whether it is excluded).
_RANGES: dict[str, tuple[float, bool]] = {
    "--k-multi": (0, False),
    "--nodes": (1, False),
    "--iterations": (0, False),
    "--time-limit": (0, False),
    "--ilp-time-limit": (0, True),
    "--batch": (1, False),
    "--threads": (0, False),  # 0: onnxruntime's default
    "--timing-seconds": (0, True),
    "--eclass": (0, False),
    "--depth": (0, False),
}


def _check_numbers(args: argparse.Namespace) -> None:
    """Refuse a numeric option out of its range (:data:`_RANGES`) as bad usage, one line."""
    for option, (low, strict) in _RANGES.items():
        value = getattr(args, option[2:].replace("-", "_"), None)
        if value is not None and not (value > low if strict else value >= low):
            raise _Usage(f"{option} must be {'>' if strict else '>='} {low}, got {value}")


def _cost_model(args: argparse.Namespace, onnx_in: bool) -> Any:
    """The cost model's name, or an ``OrtModel`` with ``--threads`` for ``ort-cpu``."""
    name = args.cost_model or ("ort-cpu" if onnx_in else "analytic")
    if name.lower() != "ort-cpu":
        return name
    from relsat.cost.ort import OrtModel
    from relsat.onnx.runtime import OrtSettings

    return OrtModel(OrtSettings(threads=args.threads))


@dataclass(frozen=True)
class _Outcome:
    """What ``optimize`` kept: ``"original"`` or ``"optimized"``, why, and the timing if any."""

    kept: str
    why: str
    verified: str | None = None
    latency: LatencyComparison | None = None


def _finish_onnx(
    args: argparse.Namespace, graph: Graph, result: Any, console: Any
) -> _Outcome | None:
    """Verify and time the optimized model against the ONNX input, keep the faster one and
    write it; None when onnxruntime's outputs differ (nothing written)."""
    import onnx

    from relsat import onnx as ronnx

    original = Path(args.input).read_bytes()
    if _unchanged(graph, result):
        console.print("no rewrite chosen: the input model is kept unchanged")
        _write_kept(args, original, graph)
        return _Outcome("original", "no rewrite", "not needed (unchanged)")
    # The input's interface is kept: inputs (unused ones too), outputs, order, element types.
    model = ronnx.to_model(result.graph, like=onnx.load_from_string(original))
    verified = "no (--no-verify)"
    if not args.no_verify:
        check = ronnx.verify(args.input, model)
        if not check.ok:
            console.print(
                f"[red]relsat: onnxruntime outputs differ, nothing written: {check.report()}[/red]"
            )
            return None
        console.print("verified in onnxruntime: outputs match the original")
        verified = "onnxruntime"
    outcome = _choose(args, model, console)
    if outcome.kept == "original":
        _write_kept(args, original, graph)
    else:
        _write_kept(args, model, result.graph)
    return replace(outcome, verified=verified)


def _choose(args: argparse.Namespace, model: Any, console: Any) -> _Outcome:
    """Time ``model`` against the input (unless ``--no-timing``) and decide which to keep."""
    from relsat.onnx.latency import compare_latency
    from relsat.onnx.runtime import OrtSettings

    if args.no_timing:
        console.print("not timed (--no-timing): the optimized model is kept")
        return _Outcome("optimized", "not timed")
    latency = compare_latency(
        args.input,
        model,
        settings=OrtSettings(threads=args.threads),
        max_seconds=args.timing_seconds,
    )
    console.print(latency.report(), soft_wrap=True)
    if latency.verdict == "faster":
        return _Outcome("optimized", "faster", latency=latency)
    why = "slower" if latency.verdict == "slower" else "not faster beyond noise"
    if args.keep_slower:
        console.print(f"the optimized model is {why}; kept anyway (--keep-slower)")
        return _Outcome("optimized", f"{why}, --keep-slower", latency=latency)
    console.print(
        f"the optimized model is {why}: the original is kept unchanged "
        "(--keep-slower keeps the optimized one)",
        soft_wrap=True,
    )
    return _Outcome("original", why, latency=latency)


def _write_kept(args: argparse.Namespace, model: Any, graph: Graph) -> None:
    """Write the kept model to an ``.onnx`` output — the input's bytes as they are, or an
    optimized ModelProto — else its relsat JSON. An input whose tensors are in external files is
    written with its data (beside the output when too big for one file), so that the output does
    not depend on the input's data files."""
    if not args.output:
        return
    path = Path(args.output)
    if path.suffix != ".onnx":
        _write_atomic(path, to_json(graph, indent=1).encode())
        return
    from relsat.onnx.exporter import write_model

    if isinstance(model, bytes) and _has_external_data(model):
        import onnx

        model = onnx.load(args.input)  # with its data, resolved beside the input
    if isinstance(model, bytes):
        _write_atomic(path, model)
    else:
        write_model(model, path)


def _has_external_data(onnx_bytes: bytes) -> bool:
    import onnx

    tensors = onnx.load_from_string(onnx_bytes).graph.initializer
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in tensors)


def _interface_mismatch(original: Graph, optimized: Graph) -> str | None:
    """How the optimized graph's inputs (names, shapes, order) or outputs (count, shapes) differ
    from the original's, or None."""
    want = [(n.name, n.shape) for n in original.inputs]
    got = [(n.name, n.shape) for n in optimized.inputs]
    if want != got:
        return f"inputs {want} became {got}"
    want_out = [original.shape(r) for r in original.outputs]
    got_out = [optimized.shape(r) for r in optimized.outputs]
    if want_out != got_out:
        return f"output shapes {want_out} became {got_out}"
    return None


def _unchanged(graph: Graph, result: Any) -> bool:
    """No rewrite was chosen: every chosen e-node is the input's (duplicates that hash-consing
    merged aside), or the graphs are the same computation."""
    return not result.rewrites() or _same_graph(graph, result.graph)


def _same_graph(a: Graph, b: Graph) -> bool:
    """Do ``a`` and ``b`` apply the same operators to the same tensors? Node order and the
    labels of inner nodes (which decoding drops) do not count; a merged duplicate does."""
    import numpy as np

    a, b = a.reachable(), b.reachable()
    if len(a) != len(b) or a.values.keys() != b.values.keys():
        return False
    if not all(np.array_equal(v, b.values[k]) for k, v in a.values.items()):
        return False
    ids: dict[tuple[Any, ...], int] = {}  # one structural key per distinct computation

    def outputs(g: Graph) -> list[tuple[int, int]]:
        node_ids: list[int] = []
        for n in g.nodes:
            label = n.name if n.op in ("input", "weight") else None
            inputs = tuple((node_ids[r.node], r.index) for r in n.inputs)
            key = (n.op, n.params, n.outputs, label, inputs)
            node_ids.append(ids.setdefault(key, len(ids)))
        return [(node_ids[r.node], r.index) for r in g.outputs]

    return outputs(a) == outputs(b)


def _finish_bundled(
    args: argparse.Namespace, graph: Graph, result: Any, console: Any
) -> _Outcome | None:
    """Write a bundled model's optimized graph (ONNX verified in onnxruntime, or JSON)."""
    verified = None
    if args.output and Path(args.output).suffix == ".onnx":
        from relsat import onnx as ronnx

        tmp = _temp_beside(Path(args.output))
        try:
            ronnx.save(result.graph, tmp)
            if not args.no_verify:
                check = ronnx.verify(ronnx.to_model(graph), str(tmp))
                if not check.ok:
                    console.print(
                        "[red]relsat: onnxruntime outputs differ, nothing written: "
                        f"{check.report()}[/red]"
                    )
                    return None
                console.print("verified in onnxruntime: outputs match the original")
            os.replace(tmp, args.output)
        finally:
            if tmp.exists():
                tmp.unlink()
    elif args.output:
        _write_atomic(Path(args.output), to_json(result.graph, indent=1).encode())
    return _Outcome("optimized", "bundled model", verified)


def _final_table(result: Any, outcome: _Outcome) -> Any:
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
    latency = outcome.latency
    if latency is not None:
        t.add_row(
            "latency (ms)",
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
    verified = outcome.verified
    if verified is None:
        verified = "yes" if result.verified else "no (--no-verify)"
    t.add_row("verified", "", verified)
    t.add_row("kept", "", f"{outcome.kept} ({outcome.why})")
    return t


def _show(args: argparse.Namespace) -> int:
    from relsat import models
    from relsat.engine.dot import eclass_dot
    from relsat.graph.dot import graph_dot, render

    _check_numbers(args)
    if args.db:
        from relsat.engine.db import Database
        from relsat.engine.egraph import EGraph

        if args.eclass is None:
            raise _Usage("--db needs --eclass ID")
        eg = EGraph(Database(args.db, read_only=True))
        try:
            text = eclass_dot(eg, args.eclass, depth=args.depth)
        finally:
            eg.close()
    else:
        if not args.graph:
            raise _Usage("give a relsat graph JSON file, or --db and --eclass")
        graph = from_json(Path(args.graph).read_bytes(), path=args.graph)
        against = None
        if args.against:
            against = from_json(Path(args.against).read_bytes(), path=args.against)
        elif args.model:
            against = models.load(args.model)
        text = graph_dot(graph, against, title=args.graph)
    if args.output:
        print(f"written to {render(text, args.output)}")
    else:
        print(text)
    return 0


def _sql(args: argparse.Namespace) -> int:
    from relsat.engine.db import Database

    db = Database(args.db, read_only=True)
    try:
        table = db.query(args.query)
    finally:
        db.close()
    _print_arrow(table)
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from relsat.engine.db import Database
    from relsat.engine.egraph import EGraph

    eg = EGraph(Database(args.db, read_only=True))
    enodes, eclasses = eg.counts()
    console = _console()
    console.print(f"{args.db}: {enodes} e-nodes, {eclasses} e-classes")
    _print_arrow(
        eg.sql(
            "SELECT op, count(*) AS enodes, count(*) FILTER (WHERE filtered) AS "
            "filtered FROM enode GROUP BY op ORDER BY 2 DESC"
        )
    )
    _print_arrow(eg.sql("SELECT * FROM run ORDER BY started"))
    _print_arrow(
        eg.sql(
            "SELECT rule, sum(matches) AS matches, sum(applied) AS applied, "
            "sum(new_enodes) AS new_enodes, sum(banned) AS banned FROM rule_stats GROUP BY rule "
            "ORDER BY applied DESC LIMIT 10"
        )
    )
    bans = eg.sql("SELECT * FROM rule_sched WHERE times_banned > 0 ORDER BY rule")
    if bans.num_rows:  # explored with the backoff scheduler
        console.print(
            "backoff scheduler: rules banned (searched again from iteration banned_until)"
        )
        _print_arrow(bans)
    eg.close()
    return 0


def _rules_check(args: argparse.Namespace) -> int:
    """One line per rule (ok, type-mismatch, numeric-mismatch, untested: the reason), then a
    count; exit 1 unless every rule is ok (a file that does not parse: one error line, exit 1)."""
    from relsat.rewrite.check import STATUSES, check_rule
    from relsat.rewrite.rulefile import RULES_DIR, load_rules

    rules = load_rules(args.files or [RULES_DIR], check=False)  # checked here, rule by rule
    counts = dict.fromkeys(STATUSES, 0)
    for rule in rules:
        verdict = check_rule(rule, seed=args.seed)
        counts[verdict.status] += 1
        print(verdict.line(), flush=True)
    print(f"{len(rules)} rules: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return 0 if counts["ok"] == len(rules) else EXIT_ERROR


def _print_arrow(table: Any, limit: int = 200) -> None:
    from rich.table import Table

    t = Table(show_edge=False)
    for name in table.column_names:
        t.add_column(name)
    for row in table.slice(0, limit).to_pylist():
        t.add_row(*("" if v is None else str(v) for v in row.values()))
    console = _console()
    console.print(t)
    if table.num_rows > limit:
        console.print(f"… {table.num_rows - limit} more rows")


def _temp_beside(path: Path) -> Path:
    """A temporary file in the output's folder (so the final rename is atomic), with the
    permissions a plain ``open`` would give (``0o666`` less the umask; ``mkstemp`` makes it
    owner-only); fails early, as a RelsatError, when the folder cannot be written."""
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    except OSError as exc:
        raise RelsatError(f"{path}: cannot write the output ({exc.strerror})") from None
    os.close(fd)
    os.chmod(name, 0o666 & ~_umask())
    return Path(name)


def _umask() -> int:
    """The process's umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = _temp_beside(path)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        raise RelsatError(f"{path}: cannot write the output ({exc.strerror})") from None
    finally:
        if tmp.exists():
            tmp.unlink()


class _Usage(Exception):
    """Bad command-line usage beyond what argparse checks."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relsat",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("models", help="list the bundled models").set_defaults(run=_models)
    p = sub.add_parser("summary", help="build a bundled model and summarize it")
    p.add_argument("model")
    p.add_argument("--json", help="also write the graph as JSON to this path")
    p.set_defaults(run=_summary)
    p = sub.add_parser("optimize", help="optimize an ONNX file or a bundled model")
    p.add_argument("input", nargs="?", help="an ONNX model")
    p.add_argument("--model", help="a bundled model instead (relsat models)")
    p.add_argument(
        "-o",
        "--output",
        help="where to write the optimized model (ONNX for an ONNX input, relsat JSON for --model)",
    )
    p.add_argument("--rules", nargs="*", help="rule files or folders (default: rules/)")
    p.add_argument(
        "--k-multi", type=int, default=1, help="iterations with multi-pattern rules (>= 0)"
    )
    p.add_argument("--nodes", type=int, default=50_000, help="e-node limit (>= 1)")
    p.add_argument("--iterations", type=int, default=15, help="iteration limit (>= 0)")
    p.add_argument("--time-limit", type=float, default=3600.0, help="exploration seconds (>= 0)")
    p.add_argument(
        "--cost-model",
        help="ort-cpu, analytic, h100 or t4 (default: ort-cpu for an ONNX input, else analytic)",
    )
    p.add_argument("--extractor", default="ilp", choices=("ilp", "greedy", "greedy-dag"))
    p.add_argument(
        "--ilp-time-limit", type=float, default=60.0, help="ILP extraction seconds (> 0)"
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
    p.add_argument(
        "--batch", type=int, help="fix a dynamic batch dimension of an ONNX input (>= 1)"
    )
    p.add_argument(
        "--input-shape",
        action="append",
        metavar="NAME=D,D,...",
        help="fix the shape of an ONNX input, e.g. input_ids=1,128 (repeatable)",
    )
    p.add_argument("--no-verify", action="store_true", help="skip numerical verification")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="onnxruntime intra-op threads for timing and ort-cpu costs (0: its default)",
    )
    p.add_argument(
        "--timing-seconds",
        type=float,
        default=10.0,
        help="time budget for timing original vs optimized (at least 15 rounds run)",
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
    p.set_defaults(run=_optimize)
    p = sub.add_parser("show", help="draw a graph (changes highlighted) or an e-class")
    p.add_argument("graph", nargs="?", help="a relsat graph JSON file (relsat optimize -o)")
    p.add_argument("--against", help="the original graph JSON: highlight what changed")
    p.add_argument("--model", help="the original as a bundled model: highlight what changed")
    p.add_argument("--db", help="a stored e-graph (relsat optimize --db)")
    p.add_argument("--eclass", type=int, help="the e-class to draw from --db")
    p.add_argument("--depth", type=int, default=1, help="child levels around the e-class (>= 0)")
    p.add_argument("-o", "--output", help=".dot, or .svg/.png/.pdf rendered with Graphviz")
    p.set_defaults(run=_show)
    p = sub.add_parser("sql", help="run a query against a stored e-graph")
    p.add_argument("db")
    p.add_argument("query")
    p.set_defaults(run=_sql)
    p = sub.add_parser("inspect", help="summarize a stored e-graph and its runs")
    p.add_argument("db")
    p.set_defaults(run=_inspect)
    p = sub.add_parser("rules", help="work with rule files")
    rules_sub = p.add_subparsers(dest="rules_command", required=True)
    p = rules_sub.add_parser(
        "check",
        help="check rules on random shapes: parse, types (shape, split history), values",
        description="Check rule files: each rule is instantiated on random shapes its guards "
        "allow; its right-hand side must compute the left-hand side's type and values. One "
        "line per rule; exit 0 when every rule is ok, 1 otherwise.",
    )
    p.add_argument("files", nargs="*", help="rule files or folders (default: the shipped rules)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random shapes and values")
    p.set_defaults(run=_rules_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``relsat`` console script; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
        return code
    except (_Usage, SettingsError) as exc:  # a setting no option check caught: still usage
        print(f"relsat: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except RelsatError as exc:
        if args.debug:
            raise
        print(f"relsat: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:  # Ctrl-C: a stored e-graph is left at its last committed phase
        if args.debug:
            raise
        print("relsat: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
