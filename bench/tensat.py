"""The TENSAT paper's tables on the seven benchmarks, with relsat's analytic cost model.

    python bench/tensat.py [--models nasrnn bert ...] [--device h100] [--ilp-limit 60]
                           [--tables 1 4 5 6 k] [--explore-limit 600]

Table 1/3: exploration and extraction seconds, e-graph size, cost before/after, reduction
(k_multi = 1, ILP without order constraints, efficient cycle filtering). Table 4: greedy vs ILP.
Table 5: ILP time with real / integer order constraints vs none, k_multi 1 and 2. Table 6:
exploration time with vanilla vs efficient cycle filtering, k_multi 1 and 2. The k_multi sweep
(0, 1, 2): e-graph size, times, reduction. Markdown on stdout; every table's rows are appended
to bench/results/tensat_<table>.csv. Costs are the analytic model's milliseconds, not GPU
measurements.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from calls import optimize
from common import TENSAT_EXPLORE, TENSAT_EXTRACT, TENSAT_REDUCTION, append_csv, markdown

from relsat import models
from relsat.cost import AnalyticModel, price_egraph
from relsat.engine.egraph import EGraph
from relsat.engine.explore import Exploration, Limits, Schedule, explore
from relsat.engine.problem import egraph_problem
from relsat.errors import RelsatError
from relsat.extract import IlpOptions, dag_cost, extract
from relsat.pipeline.extract import original_choice
from relsat.pipeline.price import enode_columns
from relsat.rewrite.rulefile import load_rules

RULES = load_rules()


def explored(name: str, k_multi: int, mode: str, limit: float) -> tuple[EGraph, Exploration]:
    eg = EGraph.from_graph(models.load(name))
    result = explore(
        eg,
        RULES,
        limits=Limits(seconds=limit),
        schedule=Schedule(k_multi=k_multi, cycle_filter=mode),
    )
    return eg, result


def solve(problem, method: str, **kw):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    try:
        x = extract(problem, method, IlpOptions(**kw) if method == "ilp" else None)
        return x, time.perf_counter() - t
    except RelsatError as exc:
        return exc, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(models.BENCHMARKS))
    ap.add_argument("--device", default="h100")
    ap.add_argument("--ilp-limit", type=float, default=60.0, help="seconds per ILP solve")
    ap.add_argument("--explore-limit", type=float, default=600.0, help="seconds per exploration")
    ap.add_argument("--tables", nargs="*", default=["1", "4", "5", "6", "k"])
    args = ap.parse_args()
    model = AnalyticModel(args.device)
    explored("vgg19", 1, "efficient", args.explore_limit)  # warm-up (statement plan costs)

    main_rows, greedy_rows, order_rows, cycle_rows, sweep_rows = [], [], [], [], []
    for name in args.models:
        print(f"  {name} ...", file=sys.stderr)
        for k in (0, 1, 2):
            if k != 1 and not {"5", "k"} & set(args.tables):
                continue
            if k == 1:  # the main result goes through relsat.optimize, verification included
                result = optimize(
                    models.load(name),
                    k_multi=1,
                    cost_model=model,
                    ilp_time_limit=args.ilp_limit,
                    limits=Limits(seconds=args.explore_limit),
                )
                eg, before, after = result.egraph, result.cost_before, result.cost_after
                ilp, ilp_s = result.extraction, result.extraction.seconds
                enodes, eclasses = eg.counts()
                stop, explore_s = result.stop.value, result.seconds["explore"]
                rewrites = ", ".join(f"{r} {n}" for r, n in list(result.rewrites().items())[:3])
                problem, _, _ = egraph_problem(eg)
                main_rows.append(
                    [
                        name,
                        stop,
                        enodes,
                        eclasses,
                        round(explore_s, 3),
                        round(ilp_s, 3),
                        round(before, 4),
                        round(after, 4),
                        round(100 * result.reduction, 1),
                        TENSAT_REDUCTION.get(name, "–"),
                        TENSAT_EXPLORE[name],
                        TENSAT_EXTRACT[name],
                        ilp.status,
                        "yes" if result.verified else "no",
                        rewrites,
                    ]
                )
            else:
                eg, ex = explored(name, k, "efficient", args.explore_limit)
                price_egraph(eg, model)
                problem, enode_ids, _ = egraph_problem(eg)
                (born,) = enode_columns(eg, enode_ids, "born")
                born0 = born == 0
                before = dag_cost(problem, original_choice(problem, born0))
                ilp, ilp_s = solve(problem, "ilp", time_limit=args.ilp_limit)
                after = ilp.cost if not isinstance(ilp, Exception) else float("nan")
                enodes, stop, explore_s = ex.enodes, ex.stop.value, ex.seconds
            reduction = 100 * (1 - after / before) if before else 0.0
            if k == 1 and "4" in args.tables:
                for method in ("greedy", "greedy-dag"):
                    g, g_s = solve(problem, method)
                    gc = g.cost if not isinstance(g, Exception) else float("nan")
                    greedy_rows.append([name, method, round(gc, 4), round(g_s, 3)])
                greedy_rows.append([name, "ilp", round(after, 4), round(ilp_s, 3)])
            if k in (1, 2) and "5" in args.tables:
                row = [name, k, round(ilp_s, 3)]
                for order in ("real", "int"):
                    o, o_s = solve(problem, "ilp", time_limit=args.ilp_limit, order=order)
                    tag = "" if isinstance(o, Exception) or o.status == "optimal" else " (limit)"
                    row.append(f"{o_s:.3f}{tag}")
                order_rows.append(row)
            if "k" in args.tables:
                sweep_rows.append(
                    [
                        name,
                        k,
                        stop,
                        enodes,
                        round(explore_s, 3),
                        round(ilp_s, 3),
                        round(reduction, 1),
                    ]
                )
            eg.close()
        if "6" in args.tables:
            for k in (1, 2):
                times = []
                for mode in ("vanilla", "efficient"):
                    eg, ex = explored(name, k, mode, args.explore_limit)
                    times.append(
                        f"{ex.seconds:.3f}" + (" (limit)" if ex.stop.value == "time limit" else "")
                    )
                    eg.close()
                cycle_rows.append([name, k, *times])

    out = []
    if main_rows:
        h = [
            "model",
            "stop",
            "e-nodes",
            "e-classes",
            "explore s",
            "extract s",
            "cost before",
            "cost after",
            "reduction %",
            "TENSAT reduction %",
            "TENSAT explore s",
            "TENSAT extract s",
            "ILP status",
            "verified",
            "top rewrites (chosen e-nodes)",
        ]
        out.append(
            f"### Table 1/3 (k_multi = 1, analytic {args.device} ms)\n\n" + markdown(h, main_rows)
        )
        append_csv("tensat_1", h, main_rows)
    if greedy_rows:
        h = ["model", "extractor", "cost", "seconds"]
        out.append("### Table 4: greedy vs ILP\n\n" + markdown(h, greedy_rows))
        append_csv("tensat_4", h, greedy_rows)
    if order_rows:
        h = ["model", "k_multi", "ILP s, none", "ILP s, real", "ILP s, int"]
        out.append(
            "### Table 5: ILP with and without order constraints\n\n" + markdown(h, order_rows)
        )
        append_csv("tensat_5", h, order_rows)
    if cycle_rows:
        h = ["model", "k_multi", "explore s, vanilla", "explore s, efficient"]
        out.append("### Table 6: cycle filtering\n\n" + markdown(h, cycle_rows))
        append_csv("tensat_6", h, cycle_rows)
    if sweep_rows:
        h = ["model", "k_multi", "stop", "e-nodes", "explore s", "extract s", "reduction %"]
        out.append("### k_multi sweep\n\n" + markdown(h, sweep_rows))
        append_csv("tensat_k", h, sweep_rows)
    print("\n\n".join(out))


if __name__ == "__main__":
    main()
