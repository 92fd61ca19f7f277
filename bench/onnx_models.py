"""onnxruntime CPU latency of original vs relsat-optimized ONNX models, with op counts.

    python bench/onnx_models.py [--models nasrnn bert ...] [--torch-models transformer convnet]
                                [--rounds 50] [--threads 2] [--skip-torch] [--no-disable-all]

Two sources: (a) the seven bundled TENSAT graphs, written with ``relsat.onnx.save`` (weights get
seeded random values), optimized with ``relsat.optimize`` (through bench/calls.py) and the result
written the same way; (b) ``torch.nn`` models (bench/architectures.py: a TransformerEncoder and a
conv net) exported by the legacy ``torch.onnx.export`` (bench/exports.py), read with
``relsat.onnx.load(path, batch=1)``, optimized and written back with the original output names.
A torch export relsat cannot read (shape computations such as Shape -> Slice whose outputs ONNX
shape inference leaves dynamic) is first shape-folded by onnxruntime's BASIC level (constant
folding; what onnxruntime does at session creation anyway) and that file is the original.
Part (b) is skipped, with a message, when torch is missing.

Graphs with opaque ops cannot run in relsat's NumPy executor, so nothing is verified there
(``verify=False``); every pair is verified in onnxruntime instead (``relsat.onnx.verify``: random
inputs, ``rtol=1e-4, atol=1e-5``) against the file the user had (the raw torch export).

Latency: bench/timing.py's side-by-side timing (original, A/A, optimized; ``--threads`` intra-op
threads, spinning off, ``--rounds`` interleaved rounds, medians in ms) with graph optimizations
at onnxruntime's default level (ORT_ENABLE_ALL) and, unless ``--no-disable-all``, at
ORT_DISABLE_ALL. Ops count ONNX nodes other than Constant. Markdown on stdout; rows appended to
bench/results/onnx.csv.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench modules

import calls
import common
import onnxruntime as ort
import timing
from exports import export

from relsat import models
from relsat import onnx as ronnx

#: The timing's levels by the table's names.
LEVELS = {"default": "all", "disable_all": "disable"}


def latency(
    original: Path, optimized: Path, level: str, args: argparse.Namespace
) -> tuple[float, float, float]:
    """Median ms of the original, the optimized model and the A/A session."""
    timed = timing.side_by_side(
        original, {"optimized": optimized}, threads=args.threads, rounds=args.rounds, level=level
    )
    nan = float("nan")
    ms = [timed.ms.get(v, nan) for v in (timing.ORIGINAL, "optimized", timing.AA)]
    return ms[0], ms[1], ms[2]


def bundled(name: str, tmp: Path) -> tuple[Path, Path, Path, Any, str]:
    """(reference, original, optimized, result, note) for a bundled graph."""
    original, optimized = tmp / f"{name}.onnx", tmp / f"{name}.opt.onnx"
    graph = models.load(name)
    model = ronnx.save(graph, original)
    result = calls.optimize(graph, verify=False)
    ronnx.save(result.graph, optimized, output_names=[o.name for o in model.graph.output])
    return original, original, optimized, result, "relsat.onnx.save"


def shape_fold(source: Path, target: Path) -> None:
    """onnxruntime's BASIC level (constant folding, Shape of static tensors included) to a file."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(target)
    options.log_severity_level = 3
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


def from_torch(name: str, tmp: Path) -> tuple[Path, Path, Path, Any, str]:
    """(reference, original, optimized, result, note) for a torch.nn model."""
    import architectures

    optimized = tmp / f"{name}.opt.onnx"
    build = architectures.SMALL[name]
    exported = export(name, lambda: (*build(), ["input"]), tmp, "legacy").path
    names = ["output"]
    original, note = exported, "torch.onnx.export"
    try:
        graph = ronnx.load(exported, batch=1)
    # Broad on purpose: the importer may raise a bare internal exception on some exports, and
    # the bench reports what happened rather than stopping.
    except Exception as exc:
        print(
            f"  {name}: relsat.onnx.load refused the raw export ({type(exc).__name__}: "
            f"{str(exc)[:160]}); shape-folding it with onnxruntime BASIC",
            file=sys.stderr,
        )
        original = tmp / f"{name}.folded.onnx"
        shape_fold(exported, original)
        graph = ronnx.load(original, batch=1)
        note = "torch.onnx.export + ORT BASIC fold"
    result = calls.optimize(graph, verify=False)
    ronnx.save(result.graph, optimized, output_names=names)
    return exported, original, optimized, result, note


def measure(
    name: str,
    source: str,
    prepare: Callable[[str, Path], tuple[Path, Path, Path, Any, str]],
    args: argparse.Namespace,
) -> list[Any]:
    with tempfile.TemporaryDirectory(prefix="relsat-bench-onnx-") as d:
        t = time.perf_counter()
        reference, original, optimized, result, note = prepare(name, Path(d))
        prepared = time.perf_counter() - t
        check = ronnx.verify(reference, optimized)
        ms = {level: latency(original, optimized, LEVELS[level], args) for level in args.levels}
        ops = (common.op_count(original), common.op_count(optimized))
    before, after, aa = ms["default"]
    print(
        f"  {name}: prepared in {prepared:.1f} s, ORT {before:.3f} -> {after:.3f} ms "
        f"(A/A {aa:.3f}), "
        f"verify {check.report().splitlines()[0]}",
        file=sys.stderr,
    )
    off = ms.get("disable_all", (float("nan"), float("nan"), float("nan")))
    return [
        name,
        source,
        note,
        ops[0],
        ops[1],
        round(result.cost_before, 4),
        round(result.cost_after, 4),
        before,
        after,
        round(100 * (before / after - 1), 1),
        off[0],
        off[1],
        round(100 * (off[0] / off[1] - 1), 1) if args.disable_all else float("nan"),
        "yes" if check.ok else "no",
        max(check.max_abs, default=float("nan")),
        round(aa / before, 3),
    ]


HEADERS = [
    "model",
    "source",
    "original from",
    "ops before",
    "ops after",
    "cost before",
    "cost after",
    "ORT ms original",
    "ORT ms optimized",
    "speedup %",
    "no-opt ms original",
    "no-opt ms optimized",
    "no-opt speedup %",
    "verified",
    "max abs err",
    "A/A ratio",  # added later: last, so the rows written before it keep their columns
]


def table(rows: Sequence[Sequence[Any]]) -> str:
    """The Markdown table, before/after pairs in one cell."""
    headers = [
        "model",
        "source",
        "original from",
        "ORT ops",
        "relsat cost ms",
        "ORT ms original",
        "ORT ms optimized",
        "speedup %",
        "A/A",
        "no-opt ms orig → opt (speedup %)",
        "verified (ORT)",
        "max abs err",
    ]
    out = []
    for r in rows:
        no_opt = "–" if r[10] != r[10] else f"{r[10]:.3f} → {r[11]:.3f} ({r[12]:+.1f})"
        out.append(
            [
                r[0],
                r[1],
                r[2],
                f"{r[3]} → {r[4]}",
                f"{r[5]:.4f} → {r[6]:.4f}",
                r[7],
                r[8],
                f"{r[9]:+.1f}",
                f"{r[15]:.3f}",
                no_opt,
                r[13],
                f"{r[14]:.2g}",
            ]
        )
    return common.markdown(headers, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(models.BENCHMARKS), help="bundled graphs")
    ap.add_argument("--torch-models", nargs="*", default=["transformer", "convnet"])
    ap.add_argument("--skip-torch", action="store_true", help="only the bundled graphs")
    ap.add_argument("--rounds", type=int, default=50, help="interleaved timing rounds")
    ap.add_argument("--threads", type=int, default=2, help="onnxruntime intra_op_num_threads")
    ap.add_argument(
        "--no-disable-all",
        dest="disable_all",
        action="store_false",
        help="skip the timing with ORT_DISABLE_ALL",
    )
    args = ap.parse_args()
    args.levels = ["default", "disable_all"] if args.disable_all else ["default"]

    jobs: list[tuple[str, str, Callable[..., Any]]] = [(m, "bundled", bundled) for m in args.models]
    if args.skip_torch:
        print("torch models skipped (--skip-torch)", file=sys.stderr)
    elif importlib.util.find_spec("torch") is None:
        print(
            "torch is not installed: the torch.nn models are skipped "
            "(pip install torch to measure them)",
            file=sys.stderr,
        )
    else:
        jobs += [(m, "torch", from_torch) for m in args.torch_models]

    rows = [measure(name, source, prepare, args) for name, source, prepare in jobs]
    print(
        f"### onnxruntime {ort.__version__} CPU latency, original vs relsat-optimized "
        f"({args.threads} threads, spinning off, median of {args.rounds} interleaved rounds)\n"
    )
    print(table(rows))
    print(
        "\nORT ops: ONNX nodes other than Constant. relsat cost: the analytic model's ms (H100 "
        "roofline), not a CPU measurement. speedup %: original / optimized - 1 at onnxruntime's "
        "default graph optimizations; A/A: a second session of the original over the first "
        "(noise); no-opt: with ORT_DISABLE_ALL. verified: relsat.onnx.verify "
        "(rtol 1e-4, atol 1e-5) against the bundled graph's ONNX file or the raw torch export.\n"
    )
    common.append_csv(
        "onnx",
        ["threads", "runs", *HEADERS],
        [[args.threads, args.rounds, *row] for row in rows],
    )


if __name__ == "__main__":
    main()
