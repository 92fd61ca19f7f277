"""Transformers in onnxruntime: relsat against onnxruntime's own transformers optimizer.

    pip install -e '.[bench]'
    python bench/ort_fusions.py [--models hf-bert hf-gpt2 ...] [--rounds 60] [--threads 2]
                                [--exports DIR] [--no-variants]

For each Hugging Face export of bench/real.py's corpus (BERT, GPT-2, DistilBERT, ViT, ConvNeXt-T:
bench/hfmodels.py, random init from a fixed seed, the legacy ``torch.onnx.export`` at opset 17,
batch 1, cached in ``--exports``), five variants are timed side by side in one run
(bench/timing.py: interleaved rounds, rotated order, medians; onnxruntime CPU with ``--threads``
intra-op threads, ORT_ENABLE_ALL, spinning off):

* ``original`` and ``A/A`` (a second session of the original: what noise alone does);
* ``ort-opt``: ``onnxruntime.transformers.optimizer.optimize_model`` (model type ``bert``,
  ``gpt2`` or ``vit``; ``opt_level=0``: its Python pattern fusions only, onnxruntime's own graph
  optimizations run at session creation for every variant alike);
* ``relsat``: ``relsat optimize --keep-slower`` (measured ``ort-cpu`` costs), the raw optimized
  model; ``handed``: what ``relsat optimize`` hands back without ``--keep-slower`` (the raw
  model when relsat's own timing says faster beyond noise, else the original);
* ``ort-opt+relsat``: relsat on the ort-opt model (after onnxruntime's symbolic shape inference,
  which gives its contrib ops' outputs the static shapes relsat's importer needs).

Each row says which fused operators the variant's file contains (LayerNormalization, Gelu,
FastGelu, BiasGelu, SkipLayerNormalization, Attention, ...), the ratio of its median to the
original's (below 1 = faster) and whether its outputs match the original's (rtol 1e-4,
atol 1e-5). Then the exporter-variant check: the same model exported with two spellings of one
activation or of attention (BERT with ``hidden_act`` ``gelu`` — torch's Erf form — and
``gelu_python`` — transformers' ``x * 0.5 * (1 + erf(x / sqrt 2))``; GPT-2 with ``gelu_new`` —
Pow form — and ``gelu_pytorch_tanh`` — torch's ``x * x * x`` form; BERT with attention through
torch's SDPA and through eager MatMul/Softmax): does each reach the same fused graph in relsat,
and in onnxruntime's optimizer? Markdown on stdout, progress on stderr, rows appended to
bench/results/transformers.csv.
"""

from __future__ import annotations

import argparse
import collections
import csv
import datetime
import functools
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench modules

import calls
import common
import corpus
import onnx
import timing
from exports import export, stdout_to_stderr

MODELS = ("hf-bert", "hf-gpt2", "hf-distilbert", "hf-vit", "hf-convnext-tiny")
#: onnxruntime optimizer model type and (heads, hidden) by model (0: let it detect).
ORT_TYPES = {
    "hf-bert": ("bert", 4, 256),
    "hf-gpt2": ("gpt2", 4, 256),
    "hf-distilbert": ("bert", 4, 256),
    "hf-vit": ("vit", 4, 256),
    "hf-convnext-tiny": ("bert", 0, 0),
}
#: ONNX operators that are one fused kernel for a transformer's hot path.
FUSED = (
    "LayerNormalization",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    "Gelu",
    "FastGelu",
    "BiasGelu",
    "QuickGelu",
    "Attention",
    "MultiHeadAttention",
    "GroupQueryAttention",
    "FusedMatMul",
    "EmbedLayerNormalization",
)
VARIANTS = ("original", "A/A", "ort-opt", "relsat", "handed", "ort-opt+relsat")
CSV = common.RESULTS / "transformers.csv"


def fused(counts: collections.Counter[str]) -> str:
    items = [f"{op} {counts[op]}" for op in FUSED if counts.get(op)]
    return ", ".join(items) or "–"


def ort_optimize(source: Path, target: Path, name: str) -> str | None:
    """onnxruntime's transformers optimizer on ``source``; None, or why it failed."""
    from onnxruntime.transformers.optimizer import optimize_model

    kind, heads, hidden = ORT_TYPES.get(name, ("bert", 0, 0))
    try:
        with warnings.catch_warnings(), stdout_to_stderr():
            warnings.simplefilter("ignore")
            model = optimize_model(
                str(source), kind, num_heads=heads, hidden_size=hidden, opt_level=0
            )
            model.save_model_to_file(str(target))
    except Exception as exc:  # its matchers raise all kinds of errors on unknown graphs
        return timing.first_line(exc)
    _annotate_shapes(target)
    return None


def _annotate_shapes(path: Path) -> None:
    """Static shapes on every tensor of ``path`` from onnxruntime's symbolic shape inference,
    which knows its contrib ops (ONNX's does not, and relsat needs a static shape for each
    operator it keeps opaque); the file is left as is when that fails."""
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    try:
        with warnings.catch_warnings(), stdout_to_stderr():
            warnings.simplefilter("ignore")
            inferred = SymbolicShapeInference.infer_shapes(onnx.load(str(path)), auto_merge=True)
        onnx.save(inferred, str(path))
    except Exception as exc:  # a model it cannot follow: relsat will say what it lacks
        common.log(f"symbolic shape inference failed on {path.name}: {timing.first_line(exc)}")


def bench_model(name: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    made = corpus.real()[name].make(args.exports)
    source, inputs, exporter = made.path, made.inputs, made.exporter
    work = args.exports / "transformers" / name
    work.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {"original": source, "A/A": source}
    notes: dict[str, str] = {}
    ort_path = work / "ort-opt.onnx"
    common.log(f"{name}: onnxruntime transformers optimizer")
    failure = ort_optimize(source, ort_path, name)
    if failure is None:
        files["ort-opt"] = ort_path
    else:
        notes["ort-opt"] = f"failed: {failure}"
    options = ["--keep-slower", "--threads", str(args.threads)]
    runs = {}
    for variant, src in (("relsat", source), ("ort-opt+relsat", files.get("ort-opt"))):
        if src is None:
            continue
        common.log(f"{name}: relsat optimize ({variant})")
        run = calls.cli(src, work / f"{variant}.onnx", options, args.timeout)
        runs[variant] = run
        if run.ok and run.output is not None:
            files[variant] = run.output
        else:
            notes[variant] = f"refused: {run.error}"
    raw = runs.get("relsat")
    if raw is not None and raw.ok and raw.output is not None:
        faster = (raw.kept or "").startswith("optimized (faster")
        files["handed"] = raw.output if faster else source
        notes["handed"] = "the optimized model" if faster else "the original (not faster)"
    common.log(f"{name}: timing {len(files)} variants, {args.rounds} rounds")
    variants = {v: p for v, p in files.items() if v not in (timing.ORIGINAL, timing.AA)}
    timed = timing.side_by_side(source, variants, inputs, threads=args.threads, rounds=args.rounds)
    medians, checks = timed.ms, timed.checks
    base = medians.get("original")
    rows = []
    for variant in VARIANTS:
        path = files.get(variant)
        ms = medians.get(variant)
        variant_run = runs.get(variant)
        rows.append(
            {
                "model": name,
                "variant": variant,
                "ops": sum(common.op_types(path).values()) if path else None,
                "fused": fused(common.op_types(path)) if path else "–",
                "ms": ms,
                "ratio": ms / base if ms is not None and base else None,
                "check": checks.get(variant, ""),
                "note": notes.get(variant, ""),
                "rewrites": (variant_run.rewrites if variant_run else "") or "",
                "relsat_timing": (variant_run.timing if variant_run else "") or "",
                "exporter": exporter,
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------
# the exporter-variant check


def export_variant(name: str, act: str, directory: Path) -> Path:
    """``name`` (hf-bert or hf-gpt2, 2 layers) with activation ``act`` — or, for
    ``attn:<impl>``, BERT's default activation and attention implementation ``<impl>``
    (``sdpa``: torch's scaled_dot_product_attention; ``eager``: explicit
    MatMul/Mul/Add/Softmax/MatMul) — through the legacy exporter (cached)."""
    import hfmodels

    if act.startswith("attn:"):
        build = functools.partial(hfmodels.bert, layers=2, attention=act.split(":", 1)[1])
    elif name == "hf-bert":
        build = functools.partial(hfmodels.bert, layers=2, act=act)
    else:
        build = functools.partial(hfmodels.gpt2, layers=2, act=act)
    return export(f"{name}-{act.replace(':', '-')}", build, directory, "legacy").path


def spelling(path: Path) -> str:
    """How the export spells its activation and attention: op types that tell them apart."""
    counts = common.op_types(path)
    keys = ("Erf", "Div", "Pow", "Tanh", "Mul", "IsNaN")
    return ", ".join(f"{k} {counts[k]}" for k in keys if counts.get(k))


def variant_check(args: argparse.Namespace) -> list[dict[str, Any]]:
    directory = args.exports / "transformers" / "variants"
    rows = []
    pairs = (
        ("hf-bert", ("gelu", "gelu_python")),
        ("hf-gpt2", ("gelu_new", "gelu_pytorch_tanh")),
        ("hf-bert", ("attn:sdpa", "attn:eager")),
    )
    for name, acts in pairs:
        graphs = {}
        for act in acts:
            common.log(f"exporter variant: {name} {act}")
            path = export_variant(name, act, directory)
            opt = path.with_suffix(".relsat.onnx")
            options = ["--keep-slower", "--no-timing", "--threads", str(args.threads)]
            run = calls.cli(path, opt, options, args.timeout)
            ort_path = path.with_suffix(".ort-opt.onnx")
            failure = ort_optimize(path, ort_path, name)
            relsat_ops = common.op_types(opt) if run.ok and run.output else collections.Counter()
            ort_ops = common.op_types(ort_path) if failure is None else collections.Counter()
            graphs[act] = relsat_ops
            rows.append(
                {
                    "model": name,
                    "activation": act,
                    "spelling": spelling(path),
                    "relsat": fused(relsat_ops) if run.ok else f"refused: {run.error}",
                    "ort-opt": fused(ort_ops) if failure is None else f"failed: {failure}",
                    "relsat_ops": sum(relsat_ops.values()),
                }
            )
        a, b = (graphs[act] for act in acts)
        for row in rows[-2:]:
            row["same relsat graph"] = "yes" if a == b and a else "no"
    return rows


# ---------------------------------------------------------------------------------------------
# output


def _fmt(x: float | None, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def print_tables(rows: list[dict[str, Any]], variants: list[dict[str, Any]]) -> None:
    print("| model | variant | ops | fused ops | median ms | ratio | outputs | note |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['variant']} | {_fmt(r['ops'], 'd')} | {r['fused']} | "
            f"{_fmt(r['ms'], '.3f')} | {_fmt(r['ratio'], '.3f')} | {r['check']} | {r['note']} |"
        )
    if variants:
        print()
        print(
            "| model | activation | export spells | relsat fused ops | same relsat graph | "
            "ort-opt fused ops |"
        )
        print("|---|---|---|---|---|---|")
        for v in variants:
            print(
                f"| {v['model']} | {v['activation']} | {v['spelling']} | {v['relsat']} | "
                f"{v['same relsat graph']} | {v['ort-opt']} |"
            )
    print()
    for r in rows:
        if r["variant"] in ("relsat", "ort-opt+relsat") and (r["rewrites"] or r["relsat_timing"]):
            print(f"- {r['model']} {r['variant']}: {r['rewrites']}; {r['relsat_timing']}")


def append_csv(rows: list[dict[str, Any]], machine: str) -> None:
    CSV.parent.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    fields = ["timestamp", "machine", "model", "variant", "ops", "fused", "ms", "ratio", "check"]
    new = not CSV.exists()
    with CSV.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        if new:
            w.writeheader()
        for r in rows:
            w.writerow({"timestamp": stamp, "machine": machine, **r})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), help="default: %(default)s")
    parser.add_argument("--list", action="store_true", help="print the models and exit")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument(
        "--exports", type=Path, default=Path(tempfile.gettempdir()) / "relsat-exports"
    )
    parser.add_argument("--no-variants", action="store_true")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(MODELS))
        return 0
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for name in args.models:
        rows += bench_model(name, args)
    variants = [] if args.no_variants else variant_check(args)
    print_tables(rows, variants)
    append_csv(rows, timing.machine(args.threads))
    common.log(f"done in {time.perf_counter() - start:.0f} s")
    print(json.dumps({"rows": len(rows), "seconds": round(time.perf_counter() - start)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
