"""The commands that look at things: ``models``, ``summary``, ``show``, ``sql``, ``inspect`` and
``rules check``. Each ``add_*`` adds its sub-command to the parser; its ``run`` returns the exit
code."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from relsat.cli import synth
from relsat.cli.common import EXIT_ERROR, Usage, console, print_arrow
from relsat.errors import RelsatError
from relsat.graph.describe import summary
from relsat.graph.serial import from_json, to_json
from relsat.pipeline.save import write_atomic

__all__ = ["add_inspect", "add_models", "add_rules", "add_show", "add_sql", "add_summary"]

Subparsers = Any  # argparse's sub-parser action (a private class)


def add_models(sub: Subparsers) -> None:
    sub.add_parser("models", help="list the bundled models").set_defaults(run=_models)


def _models(args: argparse.Namespace) -> int:
    from relsat import models

    for m in models.available():
        mark = "*" if m.benchmark else " "
        print(f"{mark} {m.name:<18} {m.description}")
    print("\n* = one of the seven TENSAT benchmarks")
    return 0


def add_summary(sub: Subparsers) -> None:
    p = sub.add_parser("summary", help="build a bundled model and summarize it")
    p.add_argument("model")
    p.add_argument("--json", help="also write the graph as JSON to this path")
    p.set_defaults(run=_summary)


def _summary(args: argparse.Namespace) -> int:
    from relsat import models

    graph = models.load(args.model)
    print(summary(graph, args.model))
    if args.json:
        _make_folder(args.json)
        write_atomic(Path(args.json), to_json(graph, indent=1).encode())
        print(f"  written to {args.json}")
    return 0


def add_show(sub: Subparsers) -> None:
    p = sub.add_parser("show", help="draw a graph (changes highlighted) or an e-class")
    p.add_argument("graph", nargs="?", help="a relsat graph JSON file (relsat optimize -o)")
    p.add_argument("--against", help="the original graph JSON: highlight what changed")
    p.add_argument("--model", help="the original as a bundled model: highlight what changed")
    p.add_argument("--db", help="a stored e-graph (relsat optimize --db)")
    p.add_argument("--eclass", type=int, help="the e-class to draw from --db (>= 0)")
    p.add_argument("--depth", type=int, default=1, help="child levels around the e-class (>= 0)")
    p.add_argument("-o", "--output", help=".dot, or .svg/.png/.pdf rendered with Graphviz")
    p.set_defaults(run=_show)


def _show(args: argparse.Namespace) -> int:
    from relsat import models
    from relsat.engine.dot import eclass_dot
    from relsat.graph.dot import graph_dot, render

    for flag in ("eclass", "depth"):
        value = getattr(args, flag)
        if value is not None and value < 0:
            raise Usage(f"--{flag} must be >= 0, got {value}")
    if args.db:
        from relsat.engine.db import Database
        from relsat.engine.egraph import EGraph

        if args.eclass is None:
            raise Usage("--db needs --eclass ID")
        eg = EGraph(Database(args.db, read_only=True))
        try:
            text = eclass_dot(eg, args.eclass, depth=args.depth)
        finally:
            eg.close()
    else:
        if not args.graph:
            raise Usage("give a relsat graph JSON file, or --db and --eclass")
        graph = from_json(Path(args.graph).read_bytes(), path=args.graph)
        against = None
        if args.against:
            against = from_json(Path(args.against).read_bytes(), path=args.against)
        elif args.model:
            against = models.load(args.model)
        text = graph_dot(graph, against, title=args.graph)
    if args.output:
        _make_folder(args.output)
        print(f"written to {render(text, args.output)}")
    else:
        print(text)
    return 0


def _make_folder(output: str) -> None:
    """An output's missing folders made (as ``relsat optimize -o`` makes them), or one line."""
    try:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RelsatError(f"{output}: cannot write the output ({exc.strerror})") from None


def add_sql(sub: Subparsers) -> None:
    p = sub.add_parser("sql", help="run a query against a stored e-graph")
    p.add_argument("db")
    p.add_argument("query")
    p.set_defaults(run=_sql)


def _sql(args: argparse.Namespace) -> int:
    from relsat.engine.db import Database

    db = Database(args.db, read_only=True)
    try:
        table = db.query(args.query)
    finally:
        db.close()
    print_arrow(table)
    return 0


def add_inspect(sub: Subparsers) -> None:
    p = sub.add_parser("inspect", help="summarize a stored e-graph and its runs")
    p.add_argument("db")
    p.set_defaults(run=_inspect)


def _inspect(args: argparse.Namespace) -> int:
    from relsat.engine.db import Database
    from relsat.engine.egraph import EGraph

    eg = EGraph(Database(args.db, read_only=True))
    enodes, eclasses = eg.counts()
    out = console()
    out.print(f"{args.db}: {enodes} e-nodes, {eclasses} e-classes")
    print_arrow(
        eg.sql(
            "SELECT op, count(*) AS enodes, count(*) FILTER (WHERE filtered) AS "
            "filtered FROM enode GROUP BY op ORDER BY 2 DESC"
        )
    )
    print_arrow(eg.sql("SELECT * FROM run ORDER BY started"))
    print_arrow(
        eg.sql(
            "SELECT rule, sum(matches) AS matches, sum(applied) AS applied, "
            "sum(new_enodes) AS new_enodes, sum(banned) AS banned FROM rule_stats GROUP BY rule "
            "ORDER BY applied DESC LIMIT 10"
        )
    )
    bans = eg.sql("SELECT * FROM rule_sched WHERE times_banned > 0 ORDER BY rule")
    if bans.num_rows:  # explored with the backoff scheduler
        out.print("backoff scheduler: rules banned (searched again from iteration banned_until)")
        print_arrow(bans)
    eg.close()
    return 0


def add_rules(sub: Subparsers) -> None:
    p = sub.add_parser("rules", help="work with rule files")
    rules_sub = p.add_subparsers(dest="rules_command", required=True)
    p = rules_sub.add_parser(
        "check",
        help="check rules on random shapes: parse, types (shape, split history), values",
        description="Check rule files: each rule is instantiated on random shapes its guards "
        "allow; its right-hand side must compute the left-hand side's type and values. A rule "
        "holding an operator exported as a fused onnxruntime kernel (gelu, layernorm, rmsnorm, "
        "rotary, attention, ...) is also run in onnxruntime at a few of those instances. One "
        "line per rule; exit 0 when every rule is ok, 1 otherwise.",
    )
    p.add_argument("files", nargs="*", help="rule files or folders (default: the shipped rules)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random shapes and values")
    p.add_argument(
        "--no-ort",
        dest="ort",
        action="store_false",
        help="do not run the rules with fused kernels in onnxruntime (NumPy only)",
    )
    p.set_defaults(run=_rules_check)
    synth.add(rules_sub)


def _rules_check(args: argparse.Namespace) -> int:
    """One line per rule (ok, type-mismatch, numeric-mismatch, untested: the reason; what
    onnxruntime gave), then a count; exit 1 unless every rule is ok (a file that does not
    parse: one error line, exit 1)."""
    from relsat.rewrite.check import STATUSES, check_rule
    from relsat.rewrite.ortcheck import STATUSES as ORT_STATUSES
    from relsat.rewrite.ortcheck import with_ort
    from relsat.rewrite.rulefile import RULES_DIR, load_rules

    rules = load_rules(args.files or [RULES_DIR], check=False)  # checked here, rule by rule
    counts = dict.fromkeys(STATUSES, 0)
    ort = dict.fromkeys(ORT_STATUSES, 0)
    for rule in rules:
        verdict = check_rule(rule, seed=args.seed)
        if args.ort:
            verdict = with_ort(verdict)
        counts[verdict.status] += 1
        if verdict.ort is not None:
            ort[verdict.ort.status] += 1
        print(verdict.line(), flush=True)
    line = f"{len(rules)} rules: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    if any(ort.values()):
        line += f"; in onnxruntime {sum(ort.values())}: " + ", ".join(
            f"{n} {s}" for s, n in ort.items() if n
        )
    print(line)
    return 0 if counts["ok"] == len(rules) else EXIT_ERROR
