"""Rule synthesis (issue 41): per operator set and depth, what ``relsat rules synthesize`` finds
and how much of TENSAT's rule set the rules found derive.

Each (operator set, depth) runs in a child process of its own (so its peak memory is its own):
terms enumerated, candidate equations, rules checked, rules passing the check, rules kept after
minimization, seconds, peak RSS; then ``relsat rules derive`` of TENSAT's 135 rules (the shipped
rules converted from TENSAT's files) from the kept set (8 rules per e-graph, as ``relsat rules
derive`` does), with the reasons the rest are not derived. Progress on stderr, a Markdown table
on stdout, rows appended to ``bench/results/synthesize.csv``.

``--use``: then, for the last run's rules, the cost reductions that optimizing TENSAT's seven
graphs reaches with the synthesized set alone beside the shipped set's (``relsat.optimize``, the
analytic cost model the TENSAT graphs default to, ``--use-iterations`` iterations, a 60 s
exploration and 30 s ILP limit), rows appended to ``bench/results/synthesize_use.csv``.

    python bench/synthesize.py --sets tensat --depths 1 2 --time-limit 600
    python bench/synthesize.py --sets tensat --depths 3 --use --rules-dir /tmp/syn
    python bench/synthesize.py --use-rules /tmp/syn/tensat-d3.rules
    python bench/synthesize.py --goals rmsnorm gelu --goals-out /tmp/syn/goals.rules

``--goals``: the goal mode (``relsat rules synthesize --goals``) in this process: per goal the
table (terms per size), targets, hits, the smallest spelling, rules kept, seconds; the peak RSS;
then which of the shipped hand-written fusion rules of those goals the rules found rediscover
(the same left-hand side up to commutative operand order), or derive (``relsat rules derive``),
or neither.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

SETS = {
    "tensat": "ewadd,ewmul,matmul,conv2d,relu,concat,split,enlarge,merge",
    "addmul": "ewadd,ewmul",
    "elementwise": "ewadd,ewmul,ewsub,ewdiv,reciprocal,neg,sqrt,ewpow,scalar",
}


def _ops(rule) -> set[str]:
    return set(re.findall(r"\((\w+)", " ".join(map(str, rule.lhs + rule.rhs))))


def _reason(rule, ops: set[str], depth: int) -> str:
    """Why TENSAT's ``rule`` may not be derived by a set synthesized over ``ops`` to ``depth``."""
    from relsat.synth.candidates import size_of

    missing = _ops(rule) - ops - {"split_0", "split_1"}
    if missing:
        return "operator not enumerated: " + ",".join(sorted(missing))
    if max(size_of(p) for p in (*rule.lhs, *rule.rhs)) > depth:
        return "deeper than the depth run"
    if rule.is_multi:
        return "multi-pattern, within depth"
    return "within depth, not derived"


def one(ops: str, depth: int, time_limit: float, out: str | None) -> dict:
    """One run in this process: the synthesis, then the derivation of TENSAT's rules."""
    from relsat.engine.explore import Limits
    from relsat.rewrite.rulefile import load_rules
    from relsat.synth import Settings, synthesize
    from relsat.synth.derive import derive_rules

    start = time.perf_counter()
    s = synthesize(Settings(ops=tuple(ops.split(",")), depth=depth, time_limit=time_limit))
    if out:
        s.write(out)
    tensat = [
        r for r in load_rules() if any(x.startswith(("converted", "predefined")) for x in r.sources)
    ]
    t0 = time.perf_counter()
    d = derive_rules(tensat, s.rules, Limits(nodes=50_000, iterations=8, seconds=300), chunk=8)
    reasons: dict[str, int] = {}
    for rule, x in zip(tensat, d.derivations, strict=True):
        if not x.derived:
            why = _reason(rule, set(ops.split(",")), depth)
            reasons[why] = reasons.get(why, 0) + 1
    return {
        "ops": ops,
        "depth": depth,
        "terms": sum(x.terms for x in s.depths),
        "equations": sum(x.equations for x in s.depths),
        "checked": sum(x.checked for x in s.depths),
        "passed": sum(x.ok + x.guarded for x in s.depths),
        "kept": len(s.rules),
        "seconds": round(t0 - start, 1),
        "peak_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "stop": s.stop,
        "tensat_derived": sum(x.derived for x in d.derivations),
        "tensat": len(tensat),
        "derive_s": round(time.perf_counter() - t0, 1),
        "derive_stop": d.exploration.why if d.exploration else "",
        "not_derived": reasons,
    }


#: TENSAT's seven benchmark graphs (relsat.models).
SEVEN = ("nasrnn", "bert", "resnext50", "nasneta", "squeezenet", "inceptionv3", "vgg19")


def use(rules_file: str, iterations: int) -> list[list]:
    """Optimize each of :data:`SEVEN` with the shipped rules and with ``rules_file`` alone: one
    row per graph (cost before, after with each set, reductions, seconds, verified)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from calls import optimize

    from relsat import models
    from relsat.engine.explore import Limits
    from relsat.rewrite.rulefile import load_rules

    synthesized = load_rules([rules_file])
    rows = []
    for name in SEVEN:
        row: list = [name]
        for rules in (None, synthesized):
            t = time.perf_counter()
            r = optimize(
                models.load(name),
                rules=rules,
                limits=Limits(iterations=iterations, seconds=60),
                ilp_time_limit=30,
            )
            if rules is None:
                row.append(round(r.cost_before, 4))
            row += [
                round(r.cost_after, 4),
                round(100 * r.reduction, 1),
                round(time.perf_counter() - t, 1),
                "yes" if r.verified else "no",
            ]
        print(" ".join(map(str, row)), file=sys.stderr, flush=True)
        rows.append(row)
    return rows


USE_COLS = [
    "model", "cost_before",
    "shipped_after", "shipped_pct", "shipped_s", "shipped_verified",
    "synth_after", "synth_pct", "synth_s", "synth_verified",
]  # fmt: skip


#: The goal a shipped rule fuses into: its right-hand side's operator (rsqrt: that rule).
_GOAL_OF = {"rmsnorm": "rmsnorm", "layernorm": "layernorm", "gelu": "gelu"}
_GOAL_OF |= {"gelu_tanh": "gelu_tanh", "quickgelu": "quickgelu"}


def goals(names: list[str], out: str | None, slack: int, time_limit: float) -> None:
    """The goal mode's run and the shipped fusion rules it rediscovers (Markdown on stdout)."""
    from relsat.rewrite.rulefile import load_rules
    from relsat.synth.derive import derive_rules
    from relsat.synth.goals import GoalSettings, spell
    from relsat.synth.search import canonical_text

    s = spell(
        GoalSettings(goals=tuple(names), slack=slack, time_limit=time_limit),
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    if out:
        s.write(out)
    print("| goal | table terms per size | targets | smallest | spellings | kept | s |")
    print("|---|---|---|---|---|---|---|")
    for g in s.goals:
        table = " / ".join(str(t) for t, _ in g.table)
        print(
            f"| {g.goal} | {table} | {g.targets} | {g.smallest} | {g.spellings} | {g.kept} "
            f"| {g.seconds:.1f} |"
        )
    print(f"\n{len(s.rules)} rules, {s.seconds:.1f} s, peak {peak} MiB\n")
    found = {canonical_text(r.lhs[0]).replace("?eps:float", "?eps") for r in s.rules}
    shipped = [
        r
        for r in load_rules()
        if len(r.lhs) == 1
        and not r.sources
        and (
            _GOAL_OF.get(r.rhs[0].op) in names
            or (r.name == "reciprocal-sqrt-from-pow" and "rsqrt" in names)
        )
    ]
    d = derive_rules(shipped, s.rules)
    print("| hand-written rule | rediscovered |")
    print("|---|---|")
    for rule, x in zip(shipped, d.derivations, strict=True):
        literal = canonical_text(rule.lhs[0]) in found
        how = "literally" if literal else "derived" if x.derived else "no"
        print(f"| {rule.name} | {how} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sets", nargs="+", default=["tensat"], help=f"of {sorted(SETS)}")
    p.add_argument("--depths", nargs="+", type=int, default=[1, 2])
    p.add_argument("--time-limit", type=float, default=600.0)
    p.add_argument("--rules-dir", help="write each run's rules here")
    p.add_argument("--use", action="store_true", help="then optimize the seven graphs with them")
    p.add_argument("--use-rules", help="only optimize the seven graphs with these rules")
    p.add_argument("--use-iterations", type=int, default=3, help="exploration iterations")
    p.add_argument("--one", nargs=3, help=argparse.SUPPRESS)  # ops depth time: the child
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--goals", nargs="+", help="goal mode: these goals (relsat.synth.goals)")
    p.add_argument("--goals-out", help="goal mode: write the rules found here")
    p.add_argument("--goal-slack", type=int, default=1)
    args = p.parse_args()
    if args.one:
        ops, depth, limit = args.one
        print(json.dumps(one(ops, int(depth), float(limit), args.out)))
        return
    if args.goals:
        goals(args.goals, args.goals_out, args.goal_slack, args.time_limit)
        return
    if args.use_rules:
        _use(args.use_rules, args.use_iterations)
        return
    if args.use and not args.rules_dir:
        import tempfile

        args.rules_dir = tempfile.mkdtemp(prefix="synth-")
    rows = []
    for name in args.sets:
        for depth in args.depths:
            print(f"{name} depth {depth} …", file=sys.stderr, flush=True)
            out = str(Path(args.rules_dir) / f"{name}-d{depth}.rules") if args.rules_dir else None
            cmd = [sys.executable, __file__, "--one", SETS[name], str(depth), str(args.time_limit)]
            done = subprocess.run(
                cmd + (["--out", out] if out else []), capture_output=True, text=True, check=True
            )
            r = json.loads(done.stdout.strip().splitlines()[-1])
            r["set"] = name
            rows.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    cols = [
        "set",
        "depth",
        "terms",
        "equations",
        "checked",
        "passed",
        "kept",
        "seconds",
        "peak_mib",
        "tensat_derived",
        "stop",
    ]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        r["tensat_derived"] = f"{r['tensat_derived']}/{r['tensat']}"
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    for r in rows:
        print(f"{r['set']} depth {r['depth']} not derived: {r['not_derived']}")
    try:
        sys.path.insert(0, str(Path(__file__).parent))
        from common import append_csv

        append_csv("synthesize", cols, [[r[c] for c in cols] for r in rows])
    except Exception as exc:  # the table is the result; the CSV is a convenience
        print(f"(no CSV: {exc})", file=sys.stderr)
    if args.use and out:
        _use(out, args.use_iterations)


def _use(rules_file: str, iterations: int) -> None:
    print(f"optimizing the seven graphs with {rules_file} …", file=sys.stderr, flush=True)
    rows = use(rules_file, iterations)
    print()
    print("| " + " | ".join(USE_COLS) + " |")
    print("|" + "---|" * len(USE_COLS))
    for r in rows:
        print("| " + " | ".join(map(str, r)) + " |")
    try:
        sys.path.insert(0, str(Path(__file__).parent))
        from common import append_csv

        append_csv("synthesize_use", USE_COLS, rows)
    except Exception as exc:
        print(f"(no CSV: {exc})", file=sys.stderr)


if __name__ == "__main__":
    main()
