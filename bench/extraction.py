"""Extraction side by side: greedy, greedy-DAG, relsat's ILP and plain HiGHS on the plain model.

    python bench/extraction.py [--reference DIR] [--time-limit 60] [--plain-factor 5]
                               [--corpus tensat more] [--files vgg bert ...] [--threads N]
                               [--extra FILE ...] [--best STEM=COST ...] [--label TEXT]

For every JSON file of the corpus (``tensat``: ``<reference>/extraction-gym/*.json``, ``more``:
``<reference>/extraction-gym/more/*/*.json``; default ``$RELSAT_REFERENCE`` or
``../shared/reference`` beside the repository) runs, one after the other in this process:

* greedy (tree cost) and greedy-DAG;
* relsat's ILP (:func:`relsat.extract.ilp`) with ``--time-limit`` seconds for everything;
* the yardstick: plain HiGHS on the plain model (TENSAT's ILP with big-M order constraints
  over all e-nodes, no reduction, no search, greedy tree warm start) with ``--plain-factor``
  times the time limit (0: not run).

``--extra`` adds e-graph files of either format extraction-gym has used: egraph-serialize JSON,
or the CSV of its early history (one ``class,cost,op,child classes...`` line per e-node, the root
in a ``## root: N`` comment), in which its NasNet-A and NasRNN e-graphs are kept
(``git show 714d3cb:data/tensat/nasneta.csv`` in egraphs-good/extraction-gym). ``--best`` gives
best known costs that RESULTS.md lacks (``EXTRA_BEST`` holds NasNet-A's and NasRNN's);
``--label`` names the code measured (a commit) in the CSV, which also records the 1-minute load
average before each file.

Every answer is checked (acyclic, every child class covered) and priced as a DAG. Prints one
Markdown row per file and appends it to bench/results/extraction_anytime.csv; the best known
costs come from RESULTS.md for the TENSAT files (the ``more`` files have none).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import highspy
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import append_csv, markdown

from relsat.errors import ExtractionError
from relsat.extract import IlpOptions, Problem, check, dag_cost, greedy_dag, greedy_tree, ilp
from relsat.extract import gym as egraph_json
from relsat.extract.model import _post_order
from relsat.extract.problem import _closure

ROOT = Path(__file__).resolve().parent.parent
#: Best known costs of the ``--extra`` e-graphs, which RESULTS.md lacks (``--best`` overrides):
#: NasNet-A's optimum, proven by relsat's ILP (bench/history/extraction.md, issue 39); NasRNN's
#: best known answer, found by relsat's order search (guarded and sweep orders in turn) and
#: not proven optimal (HiGHS's bounds, bench/history/extraction.md, 2026-11-27).
EXTRA_BEST = {"nasneta": 11.199453, "nasrnn": 0.944755}


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


def plain_highs(p: Problem, seconds: float, threads: int | None) -> tuple[float, str, float, float]:
    """The yardstick: TENSAT's ILP as a user would first write it (one binary per e-node, the
    root covered, a chosen node's child classes covered, big-M order constraints with one real
    ``t`` per class, ``eps = 1/(2 #classes)``; self-loop nodes fixed to 0), no reduction, the
    greedy tree choice as MIP start. Returns (DAG cost or nan, status, seconds, gap)."""
    n, m = p.n_nodes, p.n_classes
    owner = np.repeat(np.arange(n), np.diff(p.child_ptr))
    key = np.unique(owner * m + p.child_idx)
    en, ec = key // m, key % m
    cptr, cnodes = p.class_nodes
    rows, cols, vals, lo, up = [], [], [], [], []

    def add(members_of: np.ndarray, extra: tuple[np.ndarray, float] | None, lo_: float) -> None:
        sizes = cptr[members_of + 1] - cptr[members_of]
        r = np.repeat(np.arange(len(members_of)), sizes)
        starts = np.repeat(cptr[members_of] - (np.cumsum(sizes) - sizes), sizes)
        c = cnodes[starts + np.arange(int(sizes.sum()))]
        base = len(lo)
        rows.append(r + base)
        cols.append(c)
        vals.append(np.ones(len(c)))
        if extra is not None:
            rows.append(np.arange(len(members_of)) + base)
            cols.append(extra[0])
            vals.append(np.full(len(members_of), extra[1]))
        lo.extend([lo_] * len(members_of))
        up.extend([np.inf] * len(members_of))

    cross = ec != p.node_class[en]  # self-loop edges: the node is fixed to 0 instead
    add(p.roots, None, 1.0)  # a root class is chosen
    add(ec[cross], (en[cross], -1.0), 0.0)  # sum(child class) - x_node >= 0
    k = int(cross.sum())
    eps = 1.0 / (2 * max(m, 1))
    big = 1.0 + eps
    base = len(lo)  # t_class(node) - t_child - big * x_node >= eps - big
    rows.append(np.repeat(np.arange(k) + base, 3))
    cols.append(np.stack([n + p.node_class[en[cross]], n + ec[cross], en[cross]], 1).ravel())
    vals.append(np.tile([1.0, -1.0, -big], k))
    lo.extend([eps - big] * k)
    up.extend([np.inf] * k)
    r, c, v = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
    order = np.argsort(r, kind="stable")
    start = np.zeros(len(lo) + 1, dtype=np.int32)
    np.cumsum(np.bincount(r, minlength=len(lo)), out=start[1:])
    selfloop = np.zeros(n, dtype=bool)
    selfloop[en[~cross]] = True
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n + m, len(lo)
    lp.col_cost_ = np.concatenate([p.node_cost, np.zeros(m)])
    lp.col_lower_ = np.zeros(n + m)
    lp.col_upper_ = np.concatenate([np.where(selfloop | p.forbidden, 0.0, 1.0), np.ones(m)])
    kind = highspy.HighsVarType
    lp.integrality_ = [kind.kInteger] * n + [kind.kContinuous] * m
    lp.row_lower_, lp.row_upper_ = np.array(lo), np.array(up)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n + m, len(lo)
    lp.a_matrix_.start_ = start
    lp.a_matrix_.index_ = c[order].astype(np.int32)
    lp.a_matrix_.value_ = v[order]
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(seconds))
    if threads is not None:
        h.setOptionValue("threads", threads)
    if h.passModel(lp) != highspy.HighsStatus.kOk:
        return float("nan"), "model error", 0.0, float("nan")
    g = greedy_tree(p).choice
    x0 = np.zeros(n + m)
    x0[list(g.values())] = 1.0
    for pos, cls in enumerate(_post_order(p, g)):  # children first: increasing t
        x0[n + cls] = (pos + 1) / (len(g) + 1)
    h.setSolution(n + m, np.arange(n + m, dtype=np.int32), x0)
    t0 = time.perf_counter()
    h.run()
    took = time.perf_counter() - t0
    status = h.modelStatusToString(h.getModelStatus())
    info = h.getInfo()
    if info.primal_solution_status != 2:
        return float("nan"), status, took, float("nan")
    x = np.asarray(h.getSolution().col_value)[:n]
    pick: dict[int, int] = {}
    for i in np.flatnonzero(x > 0.5).tolist():  # per class the cheapest chosen node
        cl = int(p.node_class[i])
        if cl not in pick or p.node_cost[i] < p.node_cost[pick[cl]]:
            pick[cl] = i
    try:
        choice = _closure(p, pick)
        check(p, choice)
    except ExtractionError:
        return float("nan"), status + " (invalid)", took, float("nan")
    return dag_cost(p, choice), status, took, float(info.mip_gap)


def load_egraph(path: Path) -> Problem:
    """An e-graph file: egraph-serialize JSON, or extraction-gym's early CSV (see the module
    docstring), whose labels become the class and node labels."""
    if path.suffix != ".csv":
        return egraph_json.load(path)
    root, rows = None, []
    for line in path.read_text().splitlines():
        if line.startswith("## root:"):
            root = line.split(":", 1)[1].strip()
        elif line and not line.startswith("#"):
            cls, cost, _op, *kids = line.split(",")
            rows.append((cls, float(cost), kids))
    if root is None:
        raise ExtractionError(f"{path}: no '## root:' line")
    labels = sorted(
        {c for c, _, _ in rows} | {k for _, _, ks in rows for k in ks} | {root}, key=int
    )
    index = {c: i for i, c in enumerate(labels)}
    return Problem.from_lists(
        [(index[c], w, [index[k] for k in ks]) for c, w, ks in rows], [index[root]]
    )


def pct(a: float, b: float) -> str:
    return "" if not (np.isfinite(a) and np.isfinite(b)) or b == 0 else f"{100 * (a - b) / b:+.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_ref = os.environ.get("RELSAT_REFERENCE", str(ROOT.parent / "shared" / "reference"))
    ap.add_argument("--reference", default=default_ref)
    ap.add_argument("--time-limit", type=float, default=60.0, help="relsat seconds per file")
    ap.add_argument("--plain-factor", type=float, default=5.0, help="yardstick time factor")
    ap.add_argument("--corpus", nargs="*", default=["tensat", "more"], choices=["tensat", "more"])
    ap.add_argument("--files", nargs="*", help="file stems (default: every JSON file)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--extra", nargs="*", default=[], help="more e-graph files (JSON or CSV)")
    ap.add_argument("--best", nargs="*", default=[], help="best known costs, STEM=COST")
    ap.add_argument("--label", default="", help="the code measured, e.g. a commit")
    args = ap.parse_args()
    gym = Path(args.reference) / "extraction-gym"
    best = best_known(gym / "RESULTS.md") | EXTRA_BEST
    files = [
        (corpus, f)
        for corpus in args.corpus
        for f in sorted(gym.glob("*.json") if corpus == "tensat" else gym.glob("more/*/*.json"))
    ]
    if args.files:
        files = [(c, f) for c, f in files if f.stem in args.files]
    files += [("extra", Path(f)) for f in args.extra]
    best.update({k: float(v) for k, v in (b.split("=", 1) for b in args.best)})
    headers = [
        "corpus",
        "file",
        "e-nodes",
        "greedy",
        "greedy-DAG",
        "relsat",
        "found by",
        "best at s",
        "total s",
        "status",
        "gap %",
        "plain HiGHS",
        "plain s",
        "plain status",
        "best known",
        "relsat vs greedy-DAG %",
        "relsat vs plain %",
        "relsat vs best %",
        "plain factor",
        "code",
        "load avg 1 min",
    ]
    rows = []
    for corpus, path in files:
        load = os.getloadavg()[0]
        p = load_egraph(path)
        g, d = greedy_tree(p), greedy_dag(p)
        t0 = time.perf_counter()
        e = ilp(p, IlpOptions(time_limit=args.time_limit, threads=args.threads))
        total = time.perf_counter() - t0
        check(p, e.choice)
        plain, plain_status, plain_s = float("nan"), "not run", 0.0
        if args.plain_factor > 0:
            plain, plain_status, plain_s, _ = plain_highs(
                p, args.plain_factor * args.time_limit, args.threads
            )
        ref = best.get(path.stem, float("nan"))
        name = (
            path.stem if corpus in ("tensat", "extra") else f"{path.parent.name}/{path.stem[:28]}"
        )
        rows.append(
            [
                corpus,
                name,
                p.n_nodes,
                f"{g.cost:.6g}",
                f"{d.cost:.6g}",
                f"{e.cost:.6g}",
                e.found_by,
                round(e.found_at, 2),
                round(total, 2),
                e.status,
                "" if e.gap is None else f"{100 * e.gap:.2f}",
                f"{plain:.6g}",
                round(plain_s, 1),
                plain_status,
                "" if np.isnan(ref) else f"{ref:.6g}",
                pct(e.cost, d.cost),
                pct(e.cost, plain),
                pct(e.cost, ref),
                f"{args.plain_factor:g}",
                args.label,
                f"{load:.2f}",
            ]
        )
        print(" | ".join(str(v) for v in rows[-1]), file=sys.stderr, flush=True)
    print(markdown(headers, rows))
    print(f"\nappended to {append_csv('extraction_anytime', headers, rows)}")


if __name__ == "__main__":
    main()
