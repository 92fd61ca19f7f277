"""Measure every operator signature of the seven benchmarks' explored e-graphs on this GPU.

    python bench/measure_costs.py [--models nasrnn bert ...] [--k-multi 1 2] [--runs 32]
                                  [--warmup 8] [--batch 8] [--backend auto] [--out PATH]
                                  [--exports A.onnx ...] [--collect FILE | --signatures FILE]

Explores each model with k_multi 1 and 2 (TENSAT's limits), collects every distinct operator
signature of the e-graphs (``relsat.cost.enode_signatures``), times each one with
``relsat.gpu.measure.MeasuredModel`` (TASO's protocol, median of the timed runs) and writes
``relsat/data/costs/<device>.parquet`` (device from the GPU's name: ``h100``, ``h200``, …), each
row with the backend that measured it. Prints the signature counts, what measured them, the
signatures no backend could run, and the time spent; appends a row per source to
bench/results/measure_costs.csv. Needs an NVIDIA GPU with CuPy and PyTorch (cuDNN); refuses
with one line otherwise.

``--exports`` adds the e-graphs of ONNX files (the real-export bench models: explored as
``relsat.optimize`` explores them, priced by the roofline so nothing is timed on the CPU).
Exploring needs no GPU: ``--collect FILE`` writes the distinct signatures (one
:attr:`OpSignature.key` per line) and stops, and ``--signatures FILE`` measures such a list
instead of exploring, so that scarce GPU time goes to measuring alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import append_csv, markdown

from relsat import models
from relsat.cost import CostTable, OpSignature, enode_signatures
from relsat.engine.egraph import EGraph
from relsat.engine.explore import Limits, Schedule, explore
from relsat.errors import GpuUnavailableError
from relsat.gpu.measure import BACKENDS, MeasuredModel, measure_signatures

ROOT = Path(__file__).resolve().parent.parent
COSTS = ROOT / "relsat" / "data" / "costs"


def signatures(names: list[str], k_multis: list[int]) -> tuple[list[OpSignature], list[list]]:
    """The distinct signatures of every explored e-graph (first-seen order), and per-run rows."""
    seen: dict[OpSignature, None] = {}
    rows = []
    for name in names:
        for k in k_multis:
            t = time.perf_counter()
            eg = EGraph.from_graph(models.load(name))
            ex = explore(eg, limits=Limits(), schedule=Schedule(k_multi=k))
            _, sigs = enode_signatures(eg)
            new = [s for s in sigs if s not in seen]
            seen.update(dict.fromkeys(sigs))
            rows.append(
                [name, k, ex.stop.value, ex.enodes, len(sigs), len(new), time.perf_counter() - t]
            )
            print(" | ".join(str(v) for v in rows[-1]), file=sys.stderr, flush=True)
    return list(seen), rows


def export_signatures(paths: list[Path], seen: dict[OpSignature, None], rows: list[list]) -> None:
    """Add the distinct signatures of each ONNX file's explored e-graph to ``seen``."""
    from calls import optimize

    from relsat.cost import AnalyticModel

    for path in paths:
        t = time.perf_counter()
        result = optimize(path, cost_model=AnalyticModel("h100"), verify=False, timing=None)
        _, sigs = enode_signatures(result.egraph)
        new = [s for s in sigs if s not in seen]
        seen.update(dict.fromkeys(sigs))
        rows.append(
            [
                path.stem,
                1,
                result.stop.value,
                result.egraph.counts()[0],
                len(sigs),
                len(new),
                time.perf_counter() - t,
            ]
        )
        print(" | ".join(str(v) for v in rows[-1]), file=sys.stderr, flush=True)


def read_signatures(path: Path) -> list[OpSignature]:
    """The signatures of a ``--collect`` file (one :attr:`OpSignature.key` per line)."""
    sigs = []
    for line in path.read_text().splitlines():
        if line.strip():
            op, params, s, inputs, output, *constants = json.loads(line)
            sigs.append(
                OpSignature(
                    op,
                    tuple(params),
                    s,
                    tuple(map(tuple, inputs)),
                    tuple(output),
                    tuple(constants[0]) if constants else None,
                )
            )
    return sigs


def stamp(path: Path, versions: dict[str, str]) -> None:
    """Add the card's full name and the software versions to every row of a saved table
    (columns ``gpu`` and ``versions``, JSON; reading a table ignores columns it does not know)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = pq.read_table(path)
    n = rows.num_rows
    rows = rows.append_column("gpu", pa.array([versions["gpu"]] * n, pa.string()))
    rows = rows.append_column("versions", pa.array([json.dumps(versions)] * n, pa.string()))
    pq.write_table(rows, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(models.BENCHMARKS))
    ap.add_argument("--k-multi", nargs="*", type=int, default=[1, 2])
    ap.add_argument("--runs", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument(
        "--batch", type=int, default=8, help="back-to-back runs per event pair (TASO's loop)"
    )
    ap.add_argument("--backend", choices=BACKENDS, default="auto")
    ap.add_argument("--out", type=Path, default=None, help="default relsat/data/costs/<device>")
    ap.add_argument("--exports", nargs="*", type=Path, default=[], help="ONNX files to add")
    ap.add_argument("--collect", type=Path, help="write the signatures here, measure nothing")
    ap.add_argument("--signatures", type=Path, help="measure this --collect file's signatures")
    args = ap.parse_args()
    if args.collect:
        t0 = time.perf_counter()
        sigs, explore_rows = signatures(args.models, args.k_multi)
        seen = dict.fromkeys(sigs)
        export_signatures(args.exports, seen, explore_rows)
        args.collect.write_text("".join(s.key + "\n" for s in seen))
        print(
            markdown(
                ["model", "k_multi", "stop", "e-nodes", "signatures", "new", "seconds"],
                explore_rows,
            )
        )
        print(
            f"\n{len(seen)} distinct signatures in {time.perf_counter() - t0:.1f} s; wrote "
            f"{args.collect}"
        )
        return
    try:
        model = MeasuredModel(
            backend=args.backend, warmup=args.warmup, runs=args.runs, batch=args.batch
        )
    except GpuUnavailableError as exc:
        sys.exit(f"bench/measure_costs.py: {exc}")
    gpu = model.gpu
    print(
        f"device {gpu.name} -> '{model.device}'; conv backend {gpu.conv_backend}"
        + (f" (cuDNN frontend: {gpu.cudnn_reason})" if gpu.cudnn is None else ""),
        file=sys.stderr,
    )

    t0 = time.perf_counter()
    if args.signatures:
        sigs = read_signatures(args.signatures)
        print(f"{len(sigs)} signatures from {args.signatures}", file=sys.stderr)
    else:
        sigs, explore_rows = signatures(args.models, args.k_multi)
        seen = dict.fromkeys(sigs)
        export_signatures(args.exports, seen, explore_rows)
        sigs = list(seen)
        print(
            markdown(
                ["model", "k_multi", "stop", "e-nodes", "signatures", "new", "seconds"],
                explore_rows,
            )
        )
    explore_s = time.perf_counter() - t0

    def progress(done: int, total: int) -> None:
        if done % 200 == 0 or done == total:
            print(f"measured {done}/{total}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    table = measure_signatures(sigs, model, CostTable(), skip_errors=True, progress=progress)
    measure_s = time.perf_counter() - t0

    out = args.out or COSTS / f"{model.device}.parquet"
    out.parent.mkdir(parents=True, exist_ok=True)
    table.save_parquet(out, model.device)
    versions = gpu.versions()
    versions["protocol"] = (
        f"{args.warmup} warm-ups, then the median of {args.runs} CUDA-event timings of "
        f"{args.batch} back-to-back run(s), per run"
    )
    stamp(out, versions)
    print(f"versions: {json.dumps(versions)}", file=sys.stderr)

    rows = table.to_arrow(model.device).select(["op", "source"]).to_pylist()
    by_source = Counter((r["op"], r["source"]) for r in rows)
    headers = ["device", "gpu", "op", "source", "signatures"]
    summary = [
        [model.device, gpu.name, op, source, n] for (op, source), n in sorted(by_source.items())
    ]
    print()
    print(markdown(headers, summary))
    for sig, reason in model.failures.items():
        what = sig.op if sig.op != "opaque" else f"opaque {sig.s.split('|', 1)[0]}"
        print(f"not measured: {what} {list(sig.inputs)} -> {list(sig.output)}: {reason}")
    print(
        f"\n{len(sigs)} distinct signatures ({len(rows)} stored, {len(model.failures)} not "
        f"measurable) from {len(args.models)} models x k_multi {args.k_multi}; exploration "
        f"{explore_s:.1f} s, measurement {measure_s:.1f} s; wrote {out}"
    )
    print(f"appended to {append_csv('measure_costs', headers, summary)}")


if __name__ == "__main__":
    main()
