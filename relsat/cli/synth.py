"""``relsat rules synthesize`` and ``relsat rules derive``: the arguments and the printing around
:func:`relsat.synth.synthesize` and :func:`relsat.synth.derive.derive_rules`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from relsat.cli.common import Usage

__all__ = ["add"]

Subparsers = Any  # argparse's sub-parser action (a private class)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


def _positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return value


def add(rules_sub: Subparsers) -> None:
    """Add ``synthesize`` and ``derive`` to the ``rules`` sub-commands."""
    from relsat.synth.goals import GOALS
    from relsat.synth.vocab import ENUMERABLE, KINDS, TENSAT_OPS

    p = rules_sub.add_parser(
        "synthesize",
        help="find rules by enumerating terms, fingerprinting and verifying them",
        description="Enumerate every term of up to --depth operators over typed variables, group "
        "the terms by fingerprint, prune as TASO does, drop what the rules kept so far derive "
        "(Ruler), check the rest with 'relsat rules check' and write the rules kept. Progress "
        "lines per depth; at the time limit the rules verified so far are written. "
        f"Enumerable operators: {', '.join(ENUMERABLE)}.",
    )
    p.add_argument(
        "--ops", default=",".join(TENSAT_OPS), help="operators, comma-separated (TENSAT's)"
    )
    p.add_argument("--depth", type=_positive_int, default=2, help="operators per side")
    p.add_argument(
        "--vars",
        help="variables per kind, e.g. matrix=4,image=2,weight=2,kernel=1 (kinds: "
        f"{', '.join(f'{k} {list(v[0])}' for k, v in KINDS.items())}; default: chosen from "
        "the operators; a kind left out has none)",
    )
    p.add_argument(
        "--strides", default="1,2", help="convolution strides enumerated, comma-separated"
    )
    p.add_argument("--out", required=True, help="the .rules file to write")
    p.add_argument("--time-limit", type=_positive_number, default=600.0, help="seconds")
    p.add_argument(
        "--batch", type=_positive_int, default=2, help="equations checked between two derivations"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the inputs and the checks")
    p.add_argument(
        "--goals",
        help="goal mode: instead of all equations, the spelled-out forms of these goals, "
        f"comma-separated ({', '.join(GOALS)}): terms enumerated modulo values, put together "
        "top-down until one equals the goal; rules 'spelling => goal' (--ops, --depth, --vars, "
        "--strides and --batch do not apply: each goal has its own vocabulary)",
    )
    p.add_argument(
        "--goal-size", type=_positive_int, default=11, help="goal mode: operators per spelling"
    )
    p.add_argument(
        "--goal-slack",
        type=int,
        default=1,
        help="goal mode: also the spellings up to this many operators larger than the smallest",
    )
    p.set_defaults(run=_synthesize)

    p = rules_sub.add_parser(
        "derive",
        help="whether given rules derive each rule of a file",
        description="For each rule of FILE: whether the rules --from put both its sides in one "
        "e-class (saturating e-graphs that hold --chunk rules of FILE each, at drawn shapes), "
        "with the iteration, or 'not derived'. Exit 0 either way.",
    )
    p.add_argument("file", help="the rules to derive (a .rules file)")
    p.add_argument("--from", dest="using", nargs="+", required=True, help="rule files or folders")
    p.add_argument("--iterations", type=_positive_int, default=8, help="iteration limit")
    p.add_argument("--nodes", type=_positive_int, default=50_000, help="e-node limit")
    p.add_argument("--seconds", type=_positive_number, default=300.0, help="time limit")
    p.add_argument(
        "--chunk",
        type=_positive_int,
        default=8,
        help="rules of FILE per e-graph (each within "
        "the limits: one fast-growing e-graph does not stop the others)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the drawn shapes")
    p.set_defaults(run=_derive)


def _synthesize(args: argparse.Namespace) -> int:
    from relsat.synth import Settings, synthesize
    from relsat.synth.vocab import ENUMERABLE, environment, parse_counts, unknown_ops

    if args.goals is not None:
        return _spell(args)

    ops = tuple(o.strip() for o in args.ops.split(",") if o.strip())
    bad = unknown_ops(ops)
    if bad or not ops:
        raise Usage(
            f"--ops: unknown or not enumerable operator {bad[0]!r} (enumerable: "
            f"{', '.join(ENUMERABLE)})"
            if bad
            else "--ops: no operator given"
        )
    try:
        strides = tuple(int(t) for t in args.strides.split(","))
    except ValueError:
        raise Usage(f"--strides: integers >= 1, comma-separated, got {args.strides!r}") from None
    if not strides or min(strides) < 1:
        raise Usage(f"--strides: integers >= 1, comma-separated, got {args.strides!r}")
    vars, weights = None, None
    if args.vars is not None:
        try:
            named, weights = environment(parse_counts(args.vars))
        except ValueError as err:
            raise Usage(f"--vars: {err}") from None
        if not named:
            raise Usage("--vars: no variable given")
        vars = tuple(named)
    settings = Settings(
        ops=ops,
        depth=args.depth,
        time_limit=args.time_limit,
        vars=vars,
        weights=weights,
        strides=strides,
        batch=args.batch,
        seed=args.seed,
    )

    def say(line: str) -> None:
        print(line, flush=True)

    result = synthesize(settings, progress=say, on_depth=lambda s: s.write(args.out))
    result.write(args.out)
    print(f"stop: {result.stop}")
    print(f"{len(result.rules)} rules written to {args.out} in {result.seconds:.1f} s")
    return 0


def _spell(args: argparse.Namespace) -> int:
    from relsat.synth.goals import GOALS, GoalSettings, spell, unknown_goals

    goals = tuple(g.strip() for g in args.goals.split(",") if g.strip())
    bad = unknown_goals(goals)
    if bad or not goals:
        known = ", ".join(GOALS)
        raise Usage(
            f"--goals: unknown goal {bad[0]!r} (goals: {known})"
            if bad
            else f"--goals: no goal given (goals: {known})"
        )
    if args.goal_slack < 0:
        raise Usage(f"--goal-slack: an integer >= 0, got {args.goal_slack}")
    settings = GoalSettings(
        goals=goals,
        size=args.goal_size,
        slack=args.goal_slack,
        time_limit=args.time_limit,
        seed=args.seed,
    )
    result = spell(settings, progress=lambda line: print(line, flush=True))
    result.write(args.out)
    print(f"{len(result.rules)} rules written to {args.out} in {result.seconds:.1f} s")
    return 0


def _derive(args: argparse.Namespace) -> int:
    from relsat.engine.explore import Limits
    from relsat.rewrite.rulefile import load_rules
    from relsat.synth.derive import derive_rules

    rules = load_rules([args.file])
    using = load_rules(args.using)
    limits = Limits(nodes=args.nodes, iterations=args.iterations, seconds=args.seconds)
    result = derive_rules(rules, using, limits, seed=args.seed, chunk=args.chunk)
    for rule, d in zip(rules, result.derivations, strict=True):
        where = f" ({rule.location})" if rule.location else ""
        if d.derived:
            print(f"derived      {rule.name}{where}: iteration {d.iteration}")
        else:
            print(f"not derived  {rule.name}{where}" + (f": {d.note}" if d.note else ""))
    n = sum(d.derived for d in result.derivations)
    stop = f"; exploration: {result.exploration.why}" if result.exploration else ""
    print(f"{n} of {len(rules)} rules derived{stop}")
    sys.stdout.flush()
    return 0
