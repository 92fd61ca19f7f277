"""Real end-to-end GPU runtimes of the seven benchmarks, original vs optimized (TENSAT Table 1).

    python bench/gpu.py [--models nasrnn bert ...] [--k-multi 1] [--cost-model auto ...]
                        [--warmup 100] [--runs 100] [--eager-warmup 10] [--eager-runs 20]
                        [--repeat 3] [--time-limit 60] [--no-tf32] [--no-cuda-graph]
                        [--graphs DIR] [--optimize-only] [--ops]

For each model: ``relsat.optimize`` with the shipped measured table of this GPU
(``relsat/data/costs/<device>.parquet``) when there is one, else the analytic model
(``--cost-model analytic`` forces it; a path picks another Parquet table), and with a measured
table also with the device's roofline. The original and the optimized graphs are then timed in
the same process with ``relsat.gpu.executor.time_graph_detail``, alternating ``--repeat`` times,
median, weight-only subgraphs precomputed in all (TASO's ``preprocess_weights``). The main time
is TASO's protocol on one run captured as a CUDA graph: 100 untimed replays, then 100 replays
between two CUDA events (the GPU's own time). The eager Python run is timed too (fewer runs: it
is host-bound, a few microseconds of launch per operator, so it measures the host).

Prints speedup % = (original / optimized - 1) x 100 beside TENSAT's Table 1 (measured on a T4:
compare direction and size, not exact values), and how well each cost model predicts the real
runtime (sum of per-operator costs of the graph, weight-only operators free, over the measured
ms). Markdown on stdout, rows appended to bench/results/gpu.csv.

Several ``--cost-model`` values compare tables (the first one's graphs count for the targets).
``--graphs DIR`` keeps each optimized graph as ``DIR/<model>.<cost model>.json`` and reads it
from there when present, so that extraction can run on a CPU (``--optimize-only``, which needs
no GPU) and scarce GPU time goes to timing alone. ``--ops`` also times each operator inside
each graph's run (``relsat.gpu.executor.op_times``) beside its price in each cost model, rows
appended to bench/results/gpu_ops.csv and a table of them summed per op printed: where prices
and the graph disagree.
Needs an NVIDIA GPU with CuPy and PyTorch (cuDNN); refuses with one line otherwise.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from calls import optimize
from common import append_csv, markdown

from relsat import models
from relsat.cost import DEVICES, AnalyticModel, CostModel, CostTable, OpSignature, TableModel
from relsat.engine.egraph import encode_node
from relsat.errors import GpuUnavailableError
from relsat.gpu.measure import device_slug
from relsat.graph.graph import Graph, Node
from relsat.graph.serial import from_json, to_json

ROOT = Path(__file__).resolve().parent.parent
COSTS = ROOT / "relsat" / "data" / "costs"

#: TENSAT's runtime speedups, % (MLSys 2021 Table 1, T4 GPU; reference/MODELS.md §2).
TENSAT_SPEEDUP = {
    "nasrnn": 68.9,
    "bert": 9.2,
    "resnext50": 8.8,
    "nasneta": 7.3,
    "squeezenet": 24.5,
    "vgg19": 8.9,
    "inceptionv3": 10.0,
}


def cost_model(choice: str, device: str) -> tuple[CostModel, str, str]:
    """The cost model to optimize with, a label saying which, and a short name for files."""
    analytic = AnalyticModel(device if device in DEVICES else "h100")
    if choice == "analytic":
        return analytic, f"analytic ({analytic.device})", "roofline"
    path = COSTS / f"{device}.parquet" if choice == "auto" else Path(choice)
    if not path.exists():
        if choice != "auto":
            sys.exit(f"bench/gpu.py: no cost table at {path}")
        return analytic, f"analytic ({analytic.device}; no {path.name})", "roofline"
    table = CostTable.from_parquet(path)
    return TableModel(table, device, fallback=analytic), f"measured table {path.name}", path.stem


def signature(graph: Graph, node: Node) -> OpSignature:
    """``node``'s operator signature, as the e-graph prices it."""
    op, ints, s = encode_node(node)
    inputs = tuple(graph.shape(r) for r in node.inputs)
    return OpSignature(op, tuple(ints), s, inputs, node.shape)


def predicted_ms(graph: Graph, model: CostModel) -> float:
    """Sum of the per-operator costs of ``graph`` as it runs: weight-only operators are free
    (precomputed), every other operator is charged once per node."""
    weight_only = graph.all_weights()
    sigs = [
        signature(graph, node)
        for node in graph.nodes
        if node.op not in ("input", "weight", "noop") and not weight_only[node.id]
    ]
    return float(model.costs(sigs).sum()) if sigs else 0.0


def optimized(
    name: str, graph: Graph, cm: CostModel, short: str, args: argparse.Namespace
) -> Graph:
    """``graph`` optimized with ``cm``: read from ``--graphs`` when kept there, else extracted
    (and kept there when ``--graphs`` is given)."""
    path = args.graphs / f"{name}.{short}.json" if args.graphs else None
    if path is not None and path.exists():
        return from_json(path.read_text(), path=str(path))
    result = optimize(graph, cost_model=cm, k_multi=args.k_multi, ilp_time_limit=args.time_limit)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(to_json(result.graph))
    return result.graph


def summarize_ops(ops: list[list], prices: int) -> list[list]:
    """:func:`op_rows` summed per model, graph and op: count, in-graph ms, then each price."""
    sums: dict[tuple[str, str, str], list[float]] = {}
    for name, key, _, op, ms, *rest in ops:
        acc = sums.setdefault((name, key, op), [0.0] * (2 + prices))
        for i, v in enumerate([1, ms, *rest[:prices]]):
            acc[i] += v
    return [[*k, int(v[0]), *(round(x, 4) for x in v[1:])] for k, v in sorted(sums.items())]


def op_rows(name: str, key: str, graph: Graph, choices: list) -> list[list]:
    """Each operator's GPU time inside ``graph``'s run beside its price in each cost model."""
    from relsat.gpu.executor import op_times

    steps = op_times(graph)
    nodes = [graph.node(step.id) for step, _ in steps]  # not a swapped-in precomputed weight
    sigs = [signature(graph, node) for node in nodes]
    prices = [cm.costs(sigs) for _, cm, _ in choices]  # each model prices the graph at once
    return [
        [name, key, node.id, node.op, round(ms, 5), *(round(float(p[i]), 5) for p in prices), s.key]
        for i, (node, (_, ms), s) in enumerate(zip(nodes, steps, sigs, strict=True))
    ]


def _ratio(a: float | None, b: float | None, digits: int = 3) -> float | str:
    return round(a / b, digits) if a and b else ""


def _speedup(orig: float | None, opt: float | None) -> float | str:
    return round(100 * (orig / opt - 1), 1) if orig and opt else ""


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(models.BENCHMARKS))
    ap.add_argument("--k-multi", type=int, default=1)
    ap.add_argument(
        "--cost-model", nargs="+", default=["auto"], help="auto, analytic or Parquet paths"
    )
    ap.add_argument("--warmup", type=int, default=100, help="CUDA-graph replays untimed")
    ap.add_argument("--runs", type=int, default=100, help="CUDA-graph replays timed")
    ap.add_argument("--eager-warmup", type=int, default=10)
    ap.add_argument("--eager-runs", type=int, default=20, help="eager runs are host-bound")
    ap.add_argument("--repeat", type=int, default=3, help="alternating timings per graph")
    ap.add_argument("--time-limit", type=float, default=60.0, help="ILP seconds per model")
    ap.add_argument("--no-tf32", action="store_true", help="full fp32 matmul and conv")
    ap.add_argument("--no-cuda-graph", action="store_true", help="eager timings only")
    ap.add_argument("--graphs", type=Path, help="keep and reuse the optimized graphs here")
    ap.add_argument(
        "--optimize-only", action="store_true", help="fill --graphs for --device; no GPU"
    )
    ap.add_argument("--device", default="h200", help="the GPU --optimize-only extracts for")
    ap.add_argument("--ops", action="store_true", help="per-operator times: gpu_ops.csv")
    args = ap.parse_args()
    if args.optimize_only:
        if not args.graphs:
            sys.exit("bench/gpu.py: --optimize-only needs --graphs DIR")
        for choice in [*args.cost_model, "analytic"]:
            cm, label, short = cost_model(choice, args.device)
            for name in args.models:
                optimized(name, models.load(name), cm, short, args)
                print(f"{name}: {label} -> {args.graphs}/{name}.{short}.json", file=sys.stderr)
        return
    try:
        from relsat.gpu.executor import load_gpu, time_graph_detail

        gpu = load_gpu()
    except GpuUnavailableError as exc:
        sys.exit(f"bench/gpu.py: {exc}")
    device = device_slug(gpu.name)
    choices: list[tuple[str, CostModel, str]] = []
    for choice in [*args.cost_model, "analytic"]:
        cm, label, short = cost_model(choice, device)
        if label not in [c for c, _, _ in choices]:
            choices.append((label, cm, short))
    label = choices[0][0]
    print(
        f"device {gpu.name} ('{device}'); cost models: {[c for c, _, _ in choices]}",
        file=sys.stderr,
    )

    headers = [
        "model",
        "device",
        "cost model",
        "original ms",
        "optimized ms",
        "speedup %",
        "TENSAT %",
        "original graph ms",
        "optimized graph ms",
        "graph speedup %",
        "predicted original ms",
        "predicted optimized ms",
        "predicted/real original",
        "predicted/real optimized",
        "predicted speedup %",
        "original wall ms",
        "optimized wall ms",
        "ops",
        "fallbacks",
        "same graph as",
    ]
    rows = []
    op_summary: list[list] = []
    faster = at_least_tensat = total = 0
    for name in args.models:
        graph = models.load(name)
        graphs: dict[str, Graph] = {"original": graph}
        fallbacks: dict[str, int] = {}
        for key, cm, short in choices:
            before = getattr(cm, "fallbacks", 0)
            graphs[key] = optimized(name, graph, cm, short, args)
            fallbacks[key] = getattr(cm, "fallbacks", 0) - before
        if args.ops:
            ops = [r for key, g in graphs.items() for r in op_rows(name, key, g, choices)]
            prices = [f"{short} ms" for _, _, short in choices]
            ops_headers = ["model", "graph", "node", "op", "in-graph ms", *prices, "signature"]
            append_csv("gpu_ops", ops_headers, ops)
            op_summary.extend(summarize_ops(ops, len(choices)))
        timings: dict[str, list] = {key: [] for key in graphs}
        for _ in range(args.repeat):  # alternate, so drift hits all alike
            for key, g in graphs.items():
                timings[key].append(
                    time_graph_detail(
                        g,
                        warmup=args.eager_warmup,
                        runs=args.eager_runs,
                        tf32=not args.no_tf32,
                        cuda_graph=not args.no_cuda_graph,
                        graph_warmup=args.warmup,
                        graph_runs=args.runs,
                    )
                )
        for t in timings["original"][:1]:
            if t.graph_error:
                print(f"{name}: no CUDA graph ({t.graph_error})", file=sys.stderr)
        orig = statistics.median(t.ms for t in timings["original"])
        orig_graph = _median([t.graph_ms for t in timings["original"]])
        for key, cm, _ in choices:
            opt = statistics.median(t.ms for t in timings[key])
            opt_graph = _median([t.graph_ms for t in timings[key]])
            speedup = 100 * (orig / opt - 1)
            pred_orig, pred_opt = predicted_ms(graph, cm), predicted_ms(graphs[key], cm)
            same = [k for k, _, _ in choices if k != key and graphs[k] == graphs[key]]
            if key == label:  # the targets count the first cost model's graphs
                total += 1
                faster += (opt_graph or opt) < (orig_graph or orig)
                best = _speedup(orig_graph, opt_graph) if opt_graph else speedup
                at_least_tensat += float(best or 0) >= TENSAT_SPEEDUP.get(name, float("inf"))
            rows.append(
                [
                    name,
                    gpu.name,
                    key,
                    round(orig, 4),
                    round(opt, 4),
                    round(speedup, 1),
                    TENSAT_SPEEDUP.get(name, ""),
                    round(orig_graph, 4) if orig_graph else "",
                    round(opt_graph, 4) if opt_graph else "",
                    _speedup(orig_graph, opt_graph),
                    round(pred_orig, 4),
                    round(pred_opt, 4),
                    _ratio(pred_orig, orig_graph or orig),
                    _ratio(pred_opt, opt_graph or opt),
                    _speedup(pred_orig, pred_opt),
                    round(statistics.median(t.wall_ms for t in timings["original"]), 4),
                    round(statistics.median(t.wall_ms for t in timings[key]), 4),
                    f"{timings['original'][0].operators}->{timings[key][0].operators}",
                    fallbacks[key],
                    ",".join(same),
                ]
            )
            print(" | ".join(str(v) for v in rows[-1]), file=sys.stderr, flush=True)
    print(markdown(headers, rows))
    if op_summary:
        print("\nEach operator's GPU time inside the run against its prices, summed per op:\n")
        prices = [f"{short} ms" for _, _, short in choices]
        print(markdown(["model", "graph", "op", "count", "in-graph ms", *prices], op_summary))
    print(
        f"\n{gpu.name}: with {label}, optimized faster on {faster}/{total} models, speedup >= "
        f"TENSAT's Table 1 on {at_least_tensat}/{total} (CUDA-graph times where captured, else "
        "eager). Eager GPU ms close to wall ms means the eager Python run was host-bound; the "
        "CUDA-graph replay is the GPU's own time.\nReproduce: python bench/gpu.py "
        + " ".join(sys.argv[1:])
    )
    print(f"appended to {append_csv('gpu', headers, rows)}")


if __name__ == "__main__":
    main()
