"""Extraction on the extraction-gym TENSAT e-graphs, against the best known DAG costs.

    python bench/extraction.py [--reference DIR] [--time-limit 60] [--files vgg bert ...]
                               [--methods greedy greedy-dag ilp] [--threads N]

For every JSON file in ``<reference>/extraction-gym/`` (default ``$RELSAT_REFERENCE`` or
``../shared/reference`` beside the repository) runs greedy (tree cost), greedy-DAG and the ILP,
checks each answer (acyclic, every child class covered), prints a Markdown table with the best
known cost from RESULTS.md and appends the rows to bench/results/extraction.csv.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import append_csv, markdown

from relsat import egraph_json
from relsat.extract import check, extract

ROOT = Path(__file__).resolve().parent.parent


def best_known(results_md: Path) -> dict[str, float]:
    """Best known DAG costs from RESULTS.md: the 'Best known values' table (full graphs) and the
    bold optima of section 2 (``*_acyclic``)."""
    best: dict[str, float] = {}
    if not results_md.exists():
        return best
    for line in results_md.read_text().splitlines():
        m = re.match(r"\|\s*`?(\w+?)(?:\.json)?`?\s*\|\s*\*\*([\d.]+)\*\*\s*\|", line)
        if m:
            best.setdefault(m.group(1), float(m.group(2)))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_ref = os.environ.get("RELSAT_REFERENCE", str(ROOT.parent / "shared" / "reference"))
    ap.add_argument("--reference", default=default_ref)
    ap.add_argument("--time-limit", type=float, default=60.0, help="ILP seconds per file")
    ap.add_argument("--files", nargs="*", help="file stems (default: every JSON file)")
    ap.add_argument("--methods", nargs="*", default=["greedy", "greedy-dag", "ilp"])
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    gym = Path(args.reference) / "extraction-gym"
    best = best_known(gym / "RESULTS.md")
    files = sorted(gym.glob("*.json"))
    if args.files:
        files = [f for f in files if f.stem in args.files]
    headers = [
        "file",
        "method",
        "DAG cost",
        "seconds",
        "total s",
        "best at s",
        "status",
        "gap %",
        "cuts",
        "best known",
        "vs best %",
    ]
    rows = []
    for path in files:
        problem = egraph_json.load(path)
        for method in args.methods:
            kw: dict[str, object] = {}
            if method == "ilp":
                kw = {"time_limit": args.time_limit, "threads": args.threads}
            t0 = time.perf_counter()
            e = extract(problem, method, **kw)
            total = time.perf_counter() - t0
            check(problem, e.choice)
            ref = best.get(path.stem)
            rows.append(
                [
                    path.stem,
                    method,
                    f"{e.cost:.6f}",
                    round(e.seconds, 3),
                    round(total, 3),
                    round(float(e.stats.get("best_found_at", e.seconds)), 3),
                    e.status,
                    "" if e.gap is None else f"{100 * e.gap:.3f}",
                    e.cuts,
                    "" if ref is None else f"{ref:.6f}",
                    "" if ref is None else f"{100 * (e.cost - ref) / ref:+.3f}",
                ]
            )
            print(" | ".join(str(v) for v in rows[-1]), file=sys.stderr, flush=True)
    print(markdown(headers, rows))
    print(f"\nappended to {append_csv('extraction', headers, rows)}")


if __name__ == "__main__":
    main()
