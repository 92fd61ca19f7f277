"""The ``relsat`` command line.

    relsat models                                   the bundled graphs
    relsat summary MODEL [--json OUT]               build one and summarize it
    relsat optimize (--model NAME | IN.onnx) [-o OUT] [options]
    relsat optimize-many MODELS... --out-dir DIR [--workers N | --ray auto|ADDRESS] [options]
    relsat costs show|export|import|merge ...      measured cost tables, shared between machines
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
import sys
from collections.abc import Sequence

from relsat.cli import costs, inspect, many, optimize
from relsat.cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    EXIT_VERIFY,
    Usage,
)
from relsat.errors import RelsatError, SettingsError

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_USAGE", "EXIT_VERIFY", "main", "parser"]


def parser() -> argparse.ArgumentParser:
    """The ``relsat`` argument parser: one sub-command per job, each with its ``run``."""
    top = argparse.ArgumentParser(
        prog="relsat",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    top.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = top.add_subparsers(dest="command", required=True)
    inspect.add_models(sub)
    inspect.add_summary(sub)
    optimize.add(sub)
    many.add(sub)
    costs.add(sub)
    inspect.add_show(sub)
    inspect.add_sql(sub)
    inspect.add_inspect(sub)
    inspect.add_rules(sub)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``relsat`` console script; returns the exit code."""
    args = parser().parse_args(argv)
    try:
        code: int = args.run(args)
        return code
    except (Usage, SettingsError) as exc:  # a setting no option check caught: still usage
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
