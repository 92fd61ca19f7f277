"""Real end-to-end GPU runtimes of the seven benchmarks, original vs optimized (TENSAT Table 1).

    python bench/gpu.py [--models nasrnn bert ...] [--k-multi 1] [--cost-model auto]
                        [--warmup 100] [--runs 100] [--repeat 3] [--time-limit 60] [--no-tf32]

For each model: ``relsat.optimize`` with the shipped measured table of this GPU
(``relsat/data/costs/<device>.parquet``) when there is one, else the analytic model
(``--cost-model analytic`` forces it; a path picks another Parquet table); then the original and
the optimized graph are timed in the same process with ``relsat.gpu.executor.time_graph_detail``
(TASO's
protocol: 100 warm-ups, 100 timed runs between CUDA events, weight-only subgraphs precomputed in
both), alternating ``--repeat`` times, median. Prints speedup % = (original / optimized - 1) x 100
beside TENSAT's Table 1 (measured on a T4: compare direction and size, not exact values), and how
well the cost model predicts the real runtime (sum of per-operator costs of the graph, weight-only
operators free, vs the measured ms). Markdown on stdout, rows appended to bench/results/gpu.csv.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(models.BENCHMARKS))
    ap.add_argument("--k-multi", type=int, default=1)
    ap.add_argument("--cost-model", default="auto", help="auto, analytic or a Parquet path")
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3, help="alternating timings per graph")
    ap.add_argument("--time-limit", type=float, default=60.0, help="ILP seconds per model")
    ap.add_argument("--no-tf32", action="store_true", help="full fp32 matmul and conv")
    args = ap.parse_args()
    try:
        from relsat.gpu.executor import load_gpu, time_graph_detail

        gpu = load_gpu()
    except GpuUnavailableError as exc:
        sys.exit(f"bench/gpu.py: {exc}")
    device = device_slug(gpu.name)
    model, label = cost_model(args.cost_model, device)
    print(f"device {gpu.name} ('{device}'); cost model: {label}", file=sys.stderr)

    headers = [
        "model",
        "device",
        "original ms",
        "optimized ms",
        "speedup %",
        "TENSAT %",
        "predicted original ms",
        "predicted optimized ms",
        "predicted/real original",
        "predicted/real optimized",
        "predicted speedup %",
        "original wall ms",
        "optimized wall ms",
        "ops",
        "cost model",
        "fallbacks",
    ]
    rows = []
    faster = at_least_tensat = 0
    for name in args.models:
        graph = models.load(name)
        before = getattr(model, "fallbacks", 0)
        result = optimize(
            graph, cost_model=model, k_multi=args.k_multi, ilp_time_limit=args.time_limit
        )
        fallbacks = getattr(model, "fallbacks", 0) - before
        timings: dict[str, list] = {"original": [], "optimized": []}
        for _ in range(args.repeat):  # alternate, so drift hits both alike
            for key, g in (("original", graph), ("optimized", result.graph)):
                timings[key].append(
                    time_graph_detail(g, warmup=args.warmup, runs=args.runs, tf32=not args.no_tf32)
                )
        orig = statistics.median(t.ms for t in timings["original"])
        opt = statistics.median(t.ms for t in timings["optimized"])
        speedup = 100 * (orig / opt - 1)
        pred_orig, pred_opt = predicted_ms(graph, model), predicted_ms(result.graph, model)
        faster += opt < orig
        at_least_tensat += speedup >= TENSAT_SPEEDUP.get(name, float("inf"))
        rows.append(
            [
                name,
                gpu.name,
                round(orig, 4),
                round(opt, 4),
                round(speedup, 1),
                TENSAT_SPEEDUP.get(name, ""),
                round(pred_orig, 4),
                round(pred_opt, 4),
                round(pred_orig / orig, 3),
                round(pred_opt / opt, 3),
                round(100 * (pred_orig / pred_opt - 1), 1) if pred_opt else "",
                round(statistics.median(t.wall_ms for t in timings["original"]), 4),
                round(statistics.median(t.wall_ms for t in timings["optimized"]), 4),
                f"{timings['original'][0].operators}->{timings['optimized'][0].operators}",
                label,
                fallbacks,
            ]
        )
        print(" | ".join(str(v) for v in rows[-1]), file=sys.stderr, flush=True)
    print(markdown(headers, rows))
    print(
        f"\n{gpu.name}: optimized faster on {faster}/{len(rows)} models, speedup >= TENSAT's "
        f"Table 1 on {at_least_tensat}/{len(rows)}. Wall ms close to GPU ms means the eager "
        "Python run was host-bound.\nReproduce: python bench/gpu.py " + " ".join(sys.argv[1:])
    )
    print(f"appended to {append_csv('gpu', headers, rows)}")


if __name__ == "__main__":
    main()
