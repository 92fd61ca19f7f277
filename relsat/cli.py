"""The ``relsat`` command line (for now: list the bundled models, summarize one)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from relsat.errors import RelsatError

__all__ = ["main"]


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
    print(graph.summary(args.model))
    if args.json:
        with open(args.json, "w") as f:
            f.write(graph.to_json(indent=1))
        print(f"  written to {args.json}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``relsat`` console script; returns the exit code."""
    parser = argparse.ArgumentParser(prog="relsat", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("models", help="list the bundled models").set_defaults(run=_models)
    p = sub.add_parser("summary", help="build a bundled model and summarize it")
    p.add_argument("model")
    p.add_argument("--json", help="also write the graph as JSON to this path")
    p.set_defaults(run=_summary)
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
        return code
    except RelsatError as exc:
        if args.debug:
            raise
        print(f"relsat: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
