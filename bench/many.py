"""Many models on 1 vs N local workers (issue 26): total wall time and where it goes.

    python bench/many.py --list
    python bench/many.py [--models zoo-resnet50 encoder ...] [--workers 1 2] [--repeats 1]
                         [--timing-seconds 2] [--threads 0] [--warm]

The 16 models (``--list``): the model-zoo graphs inside the onnx wheel (``zoo-<name>``, opset 9),
the two bundled ONNX files (``example``, ``encoder``) and five of relsat's bundled graphs exported
to ONNX (``tensat-<name>``: NasRNN, BERT, ResNeXt-50, SqueezeNet, ResNet-50; written to a
temporary folder first, not timed). Each configuration runs
``relsat.fleet.optimize_many`` (bench/calls.py) over all of them with ``Fleet(workers=N)``, from a
cold cost cache of its own (``--warm``: one cache for every run, filled by an unreported warm-up
run first: the steady state of a fleet sharing a cost store), the configurations alternating
``--repeats`` times. Per configuration: wall seconds from the call to
the summary, the speedup of the wall time over the first configuration, and where the workers'
time went, summed over models — the stages that overlap (load, explore, extract, verify, ...)
and the measuring ones that run alone (``price``: unit timings; ``time``: never-slower timing),
the seconds holding the machine's measuring lock and waiting for it, and the pool's own cost
(wall × workers − worker seconds: start-up, idle slots at the end), the cores the workers kept
busy (their CPU seconds / wall) and the machine's load average when the configuration started
(other programs' work competes for the same cores). Then per model: what each
configuration kept (timing verdicts may differ between runs: that is noise, shown, not hidden).

Markdown on stdout, progress on stderr, rows appended to bench/results/many.csv.

On paper, N nodes of a Ray cluster (``--ray``): each node runs its share of the models with the
same lock, so the measuring stages of different nodes run in parallel and only a node's own
measuring is serialized; with one shared cost store (``--cost-store``) a signature measured on
one node is read by every node of the same machine identity that starts after the writer's file
lands (nodes running at the same moment may measure it twice: the store keeps both, merged to
the median); nodes of another identity re-measure. Expected wall time ≈ max over nodes of (its
models' overlapping stages / its slots + its measuring stages) + Ray start-up (~5 s locally) +
moving each kept model back to the driver.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench modules

import calls
import common
import corpus

import relsat

MEASURING = ("price", "time")
#: relsat's bundled graphs exported to ONNX for the corpus (the quick ones).
EXPORTED = ("nasrnn", "bert", "resnext50", "squeezenet", "resnet50")


def models(work: Path) -> dict[str, Path]:
    """The corpus by name: the onnx wheel's zoo graphs, the bundled ONNX files, and the bundled
    graphs of :data:`EXPORTED` (their files under ``work``, written by :func:`export`)."""
    found: dict[str, Path] = {}
    zoo = corpus.zoo_dir()
    for path in sorted(zoo.glob("*.onnx")) if zoo else []:
        found[corpus.ZOO_PREFIX + path.stem.removeprefix("light_")] = path
    data = Path(relsat.__file__).parent / "models" / "data"
    for path in sorted(data.glob("*.onnx")):
        found[path.stem] = path
    for name in EXPORTED:
        found[f"tensat-{name}"] = work / f"tensat-{name}.onnx"
    return found


def export(paths: list[Path]) -> None:
    """Write the bundled graphs among ``paths`` that are not written yet as ONNX."""
    import onnx

    from relsat import models as bundled
    from relsat.onnx import to_model

    for path in paths:
        if path.stem.startswith("tensat-") and not path.exists():
            common.log(f"exporting {path.stem}")
            onnx.save(to_model(bundled.load(path.stem.removeprefix("tensat-"))), str(path))


def run_config(
    paths: list[Path], workers: int, args: argparse.Namespace, work: Path, cache: Path
) -> dict[str, Any]:
    """One ``optimize_many`` over ``paths`` on ``workers`` workers, from ``cache``."""
    os.environ["RELSAT_CACHE_DIR"] = str(cache)  # the spawned workers inherit it
    out = work / f"out-{workers}"
    load = os.getloadavg()[0]  # what else the machine runs (1-minute load average)
    cpu = _children_cpu()
    start = time.perf_counter()
    summary = calls.optimize_many(
        [str(p) for p in paths],
        out,
        {"workers": workers},
        timing=relsat.Timing(max_seconds=args.timing_seconds),
        ort=relsat.OrtSettings(threads=args.threads),
    )
    wall = time.perf_counter() - start
    cpu = _children_cpu() - cpu  # the workers' CPU seconds (they have exited)
    stages: dict[str, float] = defaultdict(float)
    for row in summary.rows:
        for stage, s in json.loads(row.seconds or "{}").items():
            stages[stage] += s
    worker_s = sum(r.optimize_s or 0.0 for r in summary.rows)
    return {
        "workers": workers,
        "wall": wall,
        "worker_s": worker_s,
        "measure_s": sum(r.measure_s or 0.0 for r in summary.rows),
        "wait_s": sum(r.wait_s or 0.0 for r in summary.rows),
        "overlapping_s": sum(s for k, s in stages.items() if k not in MEASURING),
        "price_s": stages["price"],
        "time_s": stages["time"],
        "pool_s": wall * workers - worker_s,
        "cores": cpu / wall,
        "load": load,
        "errors": len(summary.failed),
        "optimized": sum(r.kept == "optimized" for r in summary.rows),
        "rows": list(summary.rows),  # in the order of ``paths``
    }


def run_all(paths: list[Path], args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """Every configuration, ``--repeats`` rounds, alternating (a warm-up first with ``--warm``)."""
    results = []
    if args.warm:  # measure every unit once, unreported, so no configuration pays for it
        common.log(f"warm-up: {len(paths)} models on {args.workers[0]} workers")
        run_config(paths, args.workers[0], args, work, work / "cache")
    for repeat in range(args.repeats):
        for workers in args.workers:
            cache = work / ("cache" if args.warm else f"cache-{repeat}-{workers}")
            common.log(f"round {repeat + 1}: {len(paths)} models on {workers} workers")
            result = run_config(paths, workers, args, work, cache)
            common.log(f"  {result['wall']:.1f} s wall, {result['errors']} errors")
            results.append(result)
    return results


def _children_cpu() -> float:
    """User + system CPU seconds of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cell(row: Any) -> str:
    """One model's outcome in one configuration."""
    if row.error is not None:
        return f"error: {row.error[:60]}"
    return f"{row.kept} ({row.why}), {row.optimize_s or 0:.1f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument("--models", nargs="*", help="names (default: all)")
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--repeats", type=int, default=1, help="alternating rounds")
    parser.add_argument("--timing-seconds", type=float, default=2.0)
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime threads")
    parser.add_argument(
        "--warm",
        action="store_true",
        help="one cost cache for all runs, filled by an unreported warm-up run first",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="relsat-many-") as tmp:
        work = Path(tmp)
        corpus_ = models(work)
        if args.list:
            for name, path in corpus_.items():
                print(f"{name}\t{path.name if path.parent == work else path}")
            return 0
        unknown = sorted(set(args.models or []) - set(corpus_))
        if unknown:
            parser.error(f"unknown models {unknown} (--list)")
        names = args.models or list(corpus_)
        paths = [corpus_[n] for n in names]
        export(paths)
        results = run_all(paths, args, work)
    base = results[0]["wall"]
    headers = [
        "workers",
        "models",
        "wall s",
        "vs first",
        "worker s",
        "overlapping stages s",
        "price s",
        "time s",
        "lock held s",
        "lock wait s",
        "pool s",
        "cores busy",
        "load before",
        "optimized",
        "errors",
    ]
    rows = [
        [
            r["workers"],
            len(paths),
            r["wall"],
            base / r["wall"],
            r["worker_s"],
            r["overlapping_s"],
            r["price_s"],
            r["time_s"],
            r["measure_s"],
            r["wait_s"],
            r["pool_s"],
            r["cores"],
            r["load"],
            r["optimized"],
            r["errors"],
        ]
        for r in results
    ]
    print(common.markdown(headers, rows))
    print()
    per_model = [[name, *[_cell(r["rows"][i]) for r in results]] for i, name in enumerate(names)]
    print(common.markdown(["model", *[f"{r['workers']} workers" for r in results]], per_model))
    machine = relsat.OrtSettings(threads=args.threads).machine()
    extra = [args.timing_seconds, args.threads, "warm" if args.warm else "cold", machine]
    late = ["cores busy", "load before"]  # columns added later go last (common.append_csv)
    at = [headers.index(h) for h in late]
    early = [h for h in headers if h not in late]
    path = common.append_csv(
        "many",
        [*early, "timing s", "threads", "cache", "identity", *late],
        [
            [v for i, v in enumerate(row) if i not in at] + extra + [row[i] for i in at]
            for row in rows
        ],
    )
    common.log(f"rows appended to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
