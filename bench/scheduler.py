"""Every match applied (``simple``) against egg's backoff scheduler (``backoff``, as TENSAT ran).

    python bench/scheduler.py [--models nasrnn bert ...] [--repeat 3] [--exports DIR]

For each model, both schedulers alternately in this process (``--repeat`` rounds, medians of
the exploration seconds), k_multi = 1 and TENSAT's limits: stop reason, iterations, e-nodes,
matches discarded by bans, seconds, and TENSAT's e-node count where the paper gives one. Also the
GPT-2 export of bench/blocks.py explored whole (``--exports``, when it is there): its residual
stream is a chain of adds, on which add associativity explodes. Markdown on stdout, rows
appended to bench/results/scheduler.csv.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import TENSAT_ENODES, append_csv, markdown

from relsat import models
from relsat.engine.egraph import EGraph
from relsat.engine.explore import Exploration, Limits, Schedule, explore
from relsat.graph.graph import Graph

SCHEDULERS = ("simple", "backoff")


def _graphs(names: list[str], exports: Path) -> dict[str, Graph]:
    graphs = {name: models.load(name) for name in names}
    gpt2 = exports / "hf-gpt2-4.onnx"
    if gpt2.exists():
        from relsat import onnx as ronnx

        graphs["hf-gpt2-4 (whole)"] = ronnx.load(gpt2)
    return graphs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(models.BENCHMARKS))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--exports", type=Path, default=Path("/tmp/relsat-exports/blocks"))
    args = ap.parse_args()
    explore(EGraph.from_graph(models.load("vgg19")))  # warm-up: planning costs, rule program
    runs: dict[tuple[str, str], list[Exploration]] = {}
    graphs = _graphs(args.models, args.exports)
    for _ in range(args.repeat):
        for name, graph in graphs.items():
            for scheduler in SCHEDULERS:
                eg = EGraph.from_graph(graph)
                runs.setdefault((name, scheduler), []).append(
                    explore(eg, limits=Limits(), schedule=Schedule(scheduler=scheduler))
                )
                eg.close()
    headers = [
        "model",
        "scheduler",
        "stop",
        "iters",
        "e-nodes",
        "banned matches",
        "explore s",
        "TENSAT e-nodes",
    ]
    rows = []
    for (name, scheduler), rs in runs.items():
        r = rs[-1]
        rows.append(
            [
                name,
                scheduler,
                r.stop.value,
                len({s.iteration for s in r.iterations}),
                r.enodes,
                sum(s.banned for s in r.iterations),
                round(statistics.median(x.seconds for x in rs), 3),
                TENSAT_ENODES.get(name, "–"),
            ]
        )
    print(f"### Schedulers, k_multi = 1, {args.repeat} rounds\n\n{markdown(headers, rows)}\n")
    append_csv("scheduler", headers, rows)


if __name__ == "__main__":
    main()
