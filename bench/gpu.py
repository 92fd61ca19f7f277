"""Real end-to-end GPU runtimes of the seven benchmarks, original vs optimized (TENSAT Table 1).

    python bench/gpu.py [--models nasrnn bert ...] [--k-multi 1] [--cost-model auto]
                        [--warmup 100] [--runs 100] [--eager-warmup 10] [--eager-runs 20]
                        [--repeat 3] [--time-limit 60] [--no-tf32] [--no-cuda-graph]

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
from relsat.graph.graph import Graph

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


def cost_model(choice: str, device: str) -> tuple[CostModel, str]:
    """The cost model to optimize with, and a label saying which."""
    analytic = AnalyticModel(device if device in DEVICES else "h100")
    if choice == "analytic":
        return analytic, f"analytic ({analytic.device})"
    path = COSTS / f"{device}.parquet" if choice == "auto" else Path(choice)
    if not path.exists():
        if choice != "auto":
            sys.exit(f"bench/gpu.py: no cost table at {path}")
        return analytic, f"analytic ({analytic.device}; no {path.name})"
    table = CostTable.from_parquet(path)
    return TableModel(table, device, fallback=analytic), f"measured table {path.name}"


def predicted_ms(graph: Graph, model: CostModel) -> float:
    """Sum of the per-operator costs of ``graph`` as it runs: weight-only operators are free
    (precomputed), every other operator is charged once per node."""
    weight_only = graph.all_weights()
    sigs = []
    for node in graph.nodes:
        if node.op in ("input", "weight", "noop") or weight_only[node.id]:
            continue
        op, ints, s = encode_node(node)
        inputs = tuple(graph.shape(r) for r in node.inputs)
        sigs.append(OpSignature(op, tuple(ints), s, inputs, node.shape))
    return float(model.costs(sigs).sum()) if sigs else 0.0


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
    ap.add_argument("--cost-model", default="auto", help="auto, analytic or a Parquet path")
    ap.add_argument("--warmup", type=int, default=100, help="CUDA-graph replays untimed")
    ap.add_argument("--runs", type=int, default=100, help="CUDA-graph replays timed")
    ap.add_argument("--eager-warmup", type=int, default=10)
    ap.add_argument("--eager-runs", type=int, default=20, help="eager runs are host-bound")
    ap.add_argument("--repeat", type=int, default=3, help="alternating timings per graph")
    ap.add_argument("--time-limit", type=float, default=60.0, help="ILP seconds per model")
    ap.add_argument("--no-tf32", action="store_true", help="full fp32 matmul and conv")
    ap.add_argument("--no-cuda-graph", action="store_true", help="eager timings only")
    args = ap.parse_args()
    try:
        from relsat.gpu.executor import load_gpu, time_graph_detail

        gpu = load_gpu()
    except GpuUnavailableError as exc:
        sys.exit(f"bench/gpu.py: {exc}")
    device = device_slug(gpu.name)
    model, label = cost_model(args.cost_model, device)
    roofline, roof_label = cost_model("analytic", device)
    choices = [(label, model)] + ([] if label == roof_label else [(roof_label, roofline)])
    print(
        f"device {gpu.name} ('{device}'); cost models: {[c for c, _ in choices]}", file=sys.stderr
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
    faster = at_least_tensat = total = 0
    for name in args.models:
        graph = models.load(name)
        graphs: dict[str, Graph] = {"original": graph}
        fallbacks: dict[str, int] = {}
        for key, cm in choices:
            before = getattr(cm, "fallbacks", 0)
            result = optimize(
                graph, cost_model=cm, k_multi=args.k_multi, ilp_time_limit=args.time_limit
            )
            fallbacks[key] = getattr(cm, "fallbacks", 0) - before
            graphs[key] = result.graph
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
        for key, cm in choices:
            opt = statistics.median(t.ms for t in timings[key])
            opt_graph = _median([t.graph_ms for t in timings[key]])
            speedup = 100 * (orig / opt - 1)
            pred_orig, pred_opt = predicted_ms(graph, cm), predicted_ms(graphs[key], cm)
            same = [k for k, _ in choices if k != key and graphs[k] == graphs[key]]
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
