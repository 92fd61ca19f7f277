"""relsat rewrites a neural network's inference graph into a faster one that computes the same.

It explores rewrites by equality saturation, prices operators by timing them on this machine,
picks the cheapest equivalent graph, checks it computes what the input computes, and, for an
ONNX model, times it against the input and writes it only if it runs faster.

commands:
  relsat models                                   the bundled graphs
  relsat summary MODEL [--json OUT]               build one and summarize it
  relsat optimize (--model NAME | IN.onnx) [-o OUT] [options]
  relsat optimize-many MODELS... --out-dir DIR [--workers N | --ray auto|ADDRESS] [options]
  relsat costs show|export|import|merge ...      measured cost tables, shared between machines
  relsat show GRAPH.json [--model NAME] [-o OUT.svg]  draw it, changes highlighted
  relsat show --db DB --eclass ID [-o OUT.svg]    draw an e-class and its neighbourhood
  relsat sql DB "SELECT ..."                      query a stored e-graph
  relsat inspect DB                               summary of a stored e-graph and its runs
  relsat rules check [FILE ...]                   check rule files (default: the shipped ones)
  relsat rules synthesize --ops OPS --depth K --out FILE   find rules by enumeration
  relsat rules derive FILE --from RULES...        whether RULES derive each rule of FILE

Never slower: for an ONNX input, optimize times the optimized model against the input in
onnxruntime (--threads, --timing-seconds) and writes the input unchanged unless the optimized
one is faster beyond noise (--keep-slower writes it anyway, --no-timing skips the timing). When
no rewrite was chosen the input is written unchanged without timing. The input file itself is
never overwritten unless --in-place says so.

Exit codes: 0 success (also when the original is kept); 1 an error in the input or the run (one
line on stderr, a traceback with --debug); for rules check also a rule that is not ok; 2 bad
command-line usage, a numeric option out of its range included (one line naming the option);
3 the optimized graph failed verification (nothing is written); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

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


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Help that shows each option's default, unless there is none to show (None, off)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        default = action.default
        if text is None or default in (None, False, argparse.SUPPRESS) or "%(default)" in text:
            return text
        if not action.option_strings:  # a positional's default is not an option's
            return text
        return f"{text} (default: %(default)s)"


class _TopHelp(argparse.RawDescriptionHelpFormatter, _Help):
    """The top-level help: the command list laid out as written."""


class _Parser(argparse.ArgumentParser):
    """Every ``relsat`` parser: defaults shown in ``--help``, ``--debug`` accepted after the
    sub-command too, and a refused argument one line naming the option and what it takes (exit
    2, as argparse exits), not the usage block."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(**kwargs)
        self.add_argument(
            "--debug",
            action="store_true",
            default=argparse.SUPPRESS,  # a sub-command's leaves the top-level value alone
            help="show a traceback instead of one error line",
        )

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
    """The ``relsat`` argument parser: one sub-command per job, each with its ``run``."""
    doc = __doc__ or ""
    top = _Parser(
        prog="relsat",
        description=doc.split("\n\n", 1)[0].replace("\n", " "),
        formatter_class=_TopHelp,
        epilog=doc.split("\n\n", 1)[1],
    )
    top.set_defaults(debug=False)
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
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
    args = parser().parse_args(argv)  # refused arguments: one line, SystemExit(2)
    try:
        code: int = args.run(args)
        return code
    except Usage as exc:
        print(f"relsat: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SettingsError as exc:  # a setting no option check caught: still usage, by its flag
        print(f"relsat: error: {optimize.usage(exc) or exc}", file=sys.stderr)
        return EXIT_USAGE
    except RelsatError as exc:
        if args.debug:
            raise
        print(f"relsat: error: {optimize.error_text(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:  # Ctrl-C: a stored e-graph is left at its last committed phase
        if args.debug:
            raise
        print("relsat: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
