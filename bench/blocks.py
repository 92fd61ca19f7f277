"""Repeated blocks explored once: transformers of 4, 12 and 48 layers, whole and folded.

    pip install -e '.[bench]'
    python bench/blocks.py [--models hf-bert hf-gpt2] [--layers 4 12 48] [--exports DIR]
                           [--cost-model analytic]

For each Hugging Face model (random init from a fixed seed, hidden 256, 4 heads, FFN 1024,
sequence 128: bench/hfmodels.py, exported by the legacy ``torch.onnx.export`` at opset 17 by
bench/exports.py, cached in ``--exports``) at each depth, ``relsat.optimize`` (through
bench/calls.py) runs twice in this process, alternately: on the whole graph (``blocks=False``)
and with repeated blocks explored once (``blocks=True``, :mod:`relsat.pipeline.blocks`). Both
with the default limits (50,000 e-nodes, 60 s ILP), the result checked against the export in
onnxruntime (``relsat.onnx.verify``: the NumPy check skips graphs with opaque operators, as
these have). Reported per run: operators, e-nodes explored, stop reason, seconds per stage and
in all, priced cost before and after, and the folding. Then the growth: each mode's time at 12
and 48 layers over its time at 4. Markdown on stdout, rows appended to bench/results/blocks.csv.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench modules

import calls
import common
import onnx
from exports import export

from relsat import onnx as ronnx


def _export(model: str, layers: int, directory: Path) -> Path:
    """The ONNX export of ``model`` (hf-bert or hf-gpt2) with ``layers`` layers (cached)."""
    import hfmodels

    build = hfmodels.bert if model == "hf-bert" else hfmodels.gpt2
    return export(f"{model}-{layers}", functools.partial(build, layers=layers), directory).path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=["hf-bert", "hf-gpt2"])
    ap.add_argument("--layers", nargs="*", type=int, default=[4, 12, 48])
    ap.add_argument("--exports", type=Path, default=Path("/tmp/relsat-exports/blocks"))
    ap.add_argument("--cost-model", default="analytic")
    args = ap.parse_args()
    headers = [
        "model",
        "layers",
        "mode",
        "ops",
        "e-nodes",
        "stop",
        "explore s",
        "extract s",
        "total s",
        "cost before",
        "cost after",
        "less %",
        "verified",
        "folding",
    ]
    rows, total = [], {}
    for model in args.models:
        for layers in args.layers:
            path = _export(model, layers, args.exports)
            graph = ronnx.load(path)
            for blocks in (False, True):
                mode = "blocks" if blocks else "whole"
                print(f"  {model} x{layers} {mode} ...", file=sys.stderr, flush=True)
                t = time.perf_counter()
                r = calls.optimize(
                    graph, blocks="on" if blocks else "off", cost_model=args.cost_model
                )
                seconds = time.perf_counter() - t
                check = ronnx.verify(path, ronnx.to_model(r.graph, like=onnx.load(path)))
                total[model, layers, mode] = seconds
                rows.append(
                    [
                        model,
                        layers,
                        mode,
                        sum(graph.op_counts().values()),
                        r.egraph.counts()[0],
                        r.stop.value,
                        round(r.seconds["explore"], 2),
                        round(r.seconds["extract"], 2),
                        round(seconds, 2),
                        round(r.cost_before, 4),
                        round(r.cost_after, 4),
                        round(100 * r.reduction, 1),
                        "onnxruntime" if check.ok else "DIFFERS: " + check.report()[:60],
                        r.blocks,
                    ]
                )
    print(common.markdown(headers, rows))
    base = min(args.layers)
    growth = [
        [
            model,
            mode,
            *(f"{total[model, n, mode] / total[model, base, mode]:.2f}x" for n in args.layers),
        ]
        for model in args.models
        for mode in ("whole", "blocks")
    ]
    print()
    print(
        common.markdown(["model", "mode", *(f"{n} / {base} layers" for n in args.layers)], growth)
    )
    print(f"\nappended to {common.append_csv('blocks', headers, rows)}")


if __name__ == "__main__":
    main()
