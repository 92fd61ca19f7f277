"""Fuzzing ``relsat.optimize``: random graphs (``tests/fuzzgen.py``), every result verified.

    python bench/fuzz.py [--graphs 1000] [--k-multi 1 2] [--seed 0] [--control 300] [--jobs 1]
                         [--rules FILE ...]

Optimizes graphs ``seed … seed + graphs - 1`` once per k_multi, with the guards on, and counts
per run: graphs, optimized (the result uses a rule-built e-node), reductions (cheaper by the
analytic model), unsound (verification failed, or the optimized graph's inputs or outputs
differ from the original's), crashes (any other exception), seconds. Then the positive control:
the first ``--control`` graphs again with the guards off (TENSAT's unguarded rules), where the
fuzzer must find unsound rewrites (grouped convolutions, broadcasting). ``--rules``: optimize with
these rule files alone instead of the shipped rules (a synthesized set, ``relsat rules
synthesize``). Prints a Markdown table,
the seeds of anything unsound or crashed, and appends the rows to ``bench/results/fuzz.csv``.
Exits 1 when a run with the guards on had an unsound result or a crash.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from calls import optimize
from common import append_csv, markdown
from fuzzgen import FuzzSize, describe, random_graph

from relsat import Limits, VerificationError
from relsat.graph.graph import Graph
from relsat.rewrite.rulefile import load_rules

ROOT = Path(__file__).resolve().parent.parent

#: The bench's graphs: a little bigger than the test suite's sample.
SIZE = FuzzSize(min_steps=3, max_steps=10, max_hw=8, max_dim=8)
LIMITS = Limits(iterations=4, nodes=3000, seconds=60)


@dataclass(frozen=True)
class Outcome:
    """One graph optimized: ``kind`` is ok, unsound or crash; ``note`` says what went wrong."""

    seed: int
    kind: str
    optimized: bool = False
    reduced: bool = False
    note: str = ""


def interface_mismatch(original: Graph, optimized: Graph) -> str:
    """What differs between the two graphs' inputs (names, shapes) and outputs (shapes)."""
    ins = [(n.name, n.shape) for n in original.inputs]
    outs = [(n.name, n.shape) for n in optimized.inputs]
    if sorted(ins, key=str) != sorted(outs, key=str):
        return f"inputs {ins} became {outs}"
    if original.output_shapes != optimized.output_shapes:
        return f"outputs {original.output_shapes} became {optimized.output_shapes}"
    return ""


_RULES: dict[tuple[str, ...], Any] = {}


def _rules(files: tuple[str, ...]) -> Any:
    """The rules of ``files`` (None: the shipped ones), read once per process."""
    if not files:
        return None
    if files not in _RULES:
        _RULES[files] = load_rules(list(files))
    return _RULES[files]


def run_one(seed: int, k_multi: int, guards: bool, files: tuple[str, ...] = ()) -> Outcome:
    """Optimize graph ``seed`` (with the rules of ``files``, none: the shipped ones); never
    raises."""
    graph = random_graph(seed, SIZE)
    try:
        result = optimize(
            graph,
            k_multi=k_multi,
            guards=guards,
            limits=LIMITS,
            ilp_time_limit=20,
            rules=_rules(files),
        )
    except VerificationError as exc:
        return Outcome(seed, "unsound", note=str(exc).splitlines()[0])
    except Exception as exc:  # a crash is any other exception: record it, go on
        where = traceback.extract_tb(exc.__traceback__)[-1]
        note = f"{type(exc).__name__}: {exc} ({Path(where.filename).name}:{where.lineno})"
        return Outcome(seed, "crash", note=note.splitlines()[0])
    try:
        mismatch = interface_mismatch(graph, result.graph)
        optimized = bool(result.rewrites())
        reduced = result.cost_after < result.cost_before
    finally:
        result.egraph.close()
    if mismatch:
        return Outcome(seed, "unsound", note=mismatch)
    return Outcome(seed, "ok", optimized, reduced)


def _star(args: tuple[int, int, bool, tuple[str, ...]]) -> Outcome:
    return run_one(*args)


def run_many(
    seeds: range, k_multi: int, guards: bool, jobs: int, files: tuple[str, ...] = ()
) -> tuple[list[Outcome], float]:
    """Every seed, in ``jobs`` processes; the outcomes in seed order and the wall seconds."""
    start = time.perf_counter()
    work = [(s, k_multi, guards, files) for s in seeds]
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            outcomes = list(pool.map(_star, work, chunksize=8))
    else:
        outcomes = [_star(w) for w in work]
    return outcomes, time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", type=int, default=1000)
    ap.add_argument("--k-multi", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seed", type=int, default=0, help="first graph seed")
    ap.add_argument("--control", type=int, default=300, help="graphs run with guards off (0: none)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--rules", nargs="+", default=[], help="rule files (default: the shipped)")
    args = ap.parse_args()
    files = tuple(args.rules)

    headers = ["k_multi", "guards", "graphs", "optimized", "reductions", "unsound", "crashes", "s"]
    runs = [(k, True, args.graphs) for k in args.k_multi]
    if args.control:
        runs.append((args.k_multi[0], False, args.control))
    rows, bad = [], False
    for k_multi, guards, n in runs:
        seeds = range(args.seed, args.seed + n)
        outcomes, seconds = run_many(seeds, k_multi, guards, args.jobs, files)
        count = Counter(o.kind for o in outcomes)
        row = [
            k_multi,
            "on" if guards else "off (TENSAT)",
            n,
            sum(o.optimized for o in outcomes),
            sum(o.reduced for o in outcomes),
            count["unsound"],
            count["crash"],
            round(seconds, 1),
        ]
        rows.append(row)
        print(markdown(headers, [row]).splitlines()[-1], flush=True)
        shown = 0
        for o in outcomes:  # every failure with the guards on; the control's first ten
            if o.kind != "ok" and (guards or o.kind == "crash" or shown < 10):
                shown += 1
                print(f"  seed {o.seed}: {o.kind}: {o.note}")
                if guards:
                    print(f"    graph: {describe(random_graph(o.seed, SIZE))}")
        bad |= guards and count["unsound"] + count["crash"] > 0
    print()
    print(markdown(headers, rows))
    path = append_csv("fuzz", ["first seed", *headers], [[args.seed, *r] for r in rows])
    print(f"\nappended to {path.relative_to(ROOT)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
