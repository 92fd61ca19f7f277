"""The per-statement floor of exploration: how much of it is DuckDB planning every statement.

    python bench/floor.py [--models nasrnn squeezenet ...] [--repeat 5]

One warm process (a first exploration of each model measures each statement's planning once,
see ``relsat.engine.db.Database.run``), k_multi = 1, TENSAT's limits; per model the median of
``--repeat`` explorations: phases, statements, seconds, and the SQL time split into planning
(parse, bind and plan, estimated per statement from an ``EXPLAIN`` of it) and execution, beside
TENSAT's Table 3 exploration time. Markdown on stdout, rows appended to
bench/results/floor.csv.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import TENSAT_EXPLORE, append_csv, markdown

from relsat import models
from relsat.engine.egraph import EGraph
from relsat.engine.explore import Exploration, explore


def run(name: str) -> Exploration:
    return explore(EGraph.from_graph(models.load(name)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(models.BENCHMARKS))
    ap.add_argument("--repeat", type=int, default=5, help="explorations per model (median)")
    args = ap.parse_args()
    headers = ["model", "phases", "statements", "explore s", "planning s", "execution s"]
    headers += ["TENSAT s"]
    rows = []
    for name in args.models:
        run(name)  # warm: planning measured once per statement and process
        runs = sorted((run(name) for _ in range(args.repeat)), key=lambda r: r.seconds)
        it = runs[len(runs) // 2].iterations
        rows.append(
            [
                name,
                len(it),
                sum(s.statements for s in it),
                round(runs[len(runs) // 2].seconds, 3),
                round(sum(s.plan_s for s in it), 3),
                round(sum(s.exec_s for s in it), 3),
                TENSAT_EXPLORE[name],
            ]
        )
        print(f"  {name}: {rows[-1][3]} s", file=sys.stderr)
    print(markdown(headers, rows))
    append_csv("floor", headers, rows)


if __name__ == "__main__":
    main()
