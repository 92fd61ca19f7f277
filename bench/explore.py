"""Exploration on the seven TENSAT benchmarks, against the paper's Table 3 exploration times.

    python bench/explore.py [--models nasrnn bert ...] [--k-multi 1] [--no-guards] [--repeat 1]

Prints Markdown tables (per model: iterations, final e-graph, seconds per stage, statements per
phase, planning share, ratio to TENSAT) and appends them to bench/results/explore.csv. Also shows
that statements per phase do not grow with the number of rules (all rules vs the 10 busiest).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import TENSAT_ENODES, TENSAT_EXPLORE, append_csv, markdown

from relsat import models
from relsat.engine.egraph import EGraph
from relsat.engine.explore import Exploration, Limits, Schedule, explore
from relsat.rewrite.rulefile import load_rules


def run(name: str, k_multi: int, guards: bool) -> Exploration:
    eg = EGraph.from_graph(models.load(name))
    return explore(eg, limits=Limits(), schedule=Schedule(k_multi=k_multi, guards=guards))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(models.BENCHMARKS))
    ap.add_argument("--k-multi", type=int, default=1)
    ap.add_argument("--no-guards", action="store_true", help="TENSAT's unguarded rules")
    ap.add_argument("--repeat", type=int, default=3, help="runs per model (median time)")
    args = ap.parse_args()
    guards = not args.no_guards
    # Warm-up: the first run in a process also measures each statement's planning cost once.
    run("vgg19", args.k_multi, guards)

    headers = [
        "model",
        "stop",
        "iters",
        "e-nodes",
        "e-classes",
        "search s",
        "apply s",
        "rebuild s",
        "explore s",
        "stmts/phase",
        "plan %",
        "TENSAT s",
        "ratio",
        "TENSAT e-nodes",
    ]
    rows = []
    for name in args.models:
        runs = [run(name, args.k_multi, guards) for _ in range(args.repeat)]
        r = sorted(runs, key=lambda x: x.seconds)[len(runs) // 2]
        it = r.iterations
        plan = sum(s.plan_s for s in it)
        sql = plan + sum(s.exec_s for s in it)
        seconds = statistics.median(x.seconds for x in runs)
        rows.append(
            [
                name,
                r.stop.value,
                len({s.iteration for s in it}),
                r.enodes,
                r.eclasses,
                sum(s.search_s for s in it),
                sum(s.apply_s for s in it),
                sum(s.rebuild_s for s in it),
                seconds,
                round(statistics.mean(s.statements for s in it), 1),
                round(100 * plan / sql, 1) if sql else 0.0,
                TENSAT_EXPLORE[name],
                round(seconds / TENSAT_EXPLORE[name], 2),
                TENSAT_ENODES.get(name, "–"),
            ]
        )
        print(f"  {name}: {seconds:.2f} s", file=sys.stderr)
    title = f"Exploration, k_multi = {args.k_multi}, guards {'on' if guards else 'off'}"
    print(f"### {title}\n\n{markdown(headers, rows)}\n")
    append_csv(
        "explore", ["k_multi", "guards", *headers], [[args.k_multi, guards, *row] for row in rows]
    )

    # Batching: statements per phase with all rules vs the ten busiest, on BERT.
    rules = load_rules()
    probe = EGraph.from_graph(models.load("bert"))
    explore(probe, rules, limits=Limits(iterations=3))
    busy = [
        r[0]
        for r in probe.db.execute(
            "SELECT rule FROM rule_stats GROUP BY rule ORDER BY sum(matches) DESC, rule LIMIT 10"
        )
    ]
    scale = []
    for label, subset in (
        ("10 rules", [rules[n] for n in busy]),
        (f"{len(rules)} rules", list(rules)),
    ):
        eg = EGraph.from_graph(models.load("bert"))
        r = explore(eg, subset, limits=Limits(iterations=3))
        for s in r.iterations:
            scale.append(
                [
                    label,
                    s.iteration,
                    s.phase,
                    s.matches,
                    s.statements,
                    round(s.plan_s + s.exec_s, 3),
                    round(100 * s.plan_s / (s.plan_s + s.exec_s), 1),
                ]
            )
    print("### Statements per phase do not grow with the rule count (BERT, 3 iterations)\n")
    print(
        markdown(["rules", "iteration", "phase", "matches", "statements", "SQL s", "plan %"], scale)
    )


if __name__ == "__main__":
    main()
