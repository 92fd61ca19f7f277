"""Transformers in onnxruntime: relsat against onnxruntime's own transformers optimizer.

    pip install -e '.[bench]'
    python bench/transformers.py [--models hf-bert hf-gpt2 ...] [--rounds 60] [--threads 2]
                                 [--exports DIR] [--no-variants]

For each Hugging Face export of bench/real_models.py (BERT, GPT-2, DistilBERT, ViT, ConvNeXt-T:
random init from a fixed seed, ``torch.onnx.export`` at opset 17, batch 1, cached in
``--exports``), five variants are timed side by side in one run (bench/real.py's interleaved
rounds, rotated order, medians; onnxruntime CPU with ``OrtSettings(threads=--threads)``,
ORT_ENABLE_ALL):

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
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # sibling modules: common, real_models

import onnx  # noqa: E402
import real  # noqa: E402

from relsat.onnx.runtime import OrtSettings  # noqa: E402

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
CSV = HERE / "results" / "transformers.csv"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def op_types(path: Path) -> collections.Counter[str]:
    graph = onnx.load(str(path), load_external_data=False).graph
    return collections.Counter(n.op_type for n in graph.node if n.op_type != "Constant")


def fused(counts: collections.Counter[str]) -> str:
    items = [f"{op} {counts[op]}" for op in FUSED if counts.get(op)]
    return ", ".join(items) or "–"


def ort_optimize(source: Path, target: Path, name: str) -> str | None:
    """onnxruntime's transformers optimizer on ``source``; None, or why it failed."""
    from onnxruntime.transformers.optimizer import optimize_model

    kind, heads, hidden = ORT_TYPES.get(name, ("bert", 0, 0))
    try:
        with warnings.catch_warnings(), real._stdout_to_stderr():
            warnings.simplefilter("ignore")
            model = optimize_model(
                str(source), kind, num_heads=heads, hidden_size=hidden, opt_level=0
            )
            model.save_model_to_file(str(target))
    except Exception as exc:  # its matchers raise all kinds of errors on unknown graphs
        return real._first_line(exc)
    _annotate_shapes(target)
    return None


def _annotate_shapes(path: Path) -> None:
    """Static shapes on every tensor of ``path`` from onnxruntime's symbolic shape inference,
    which knows its contrib ops (ONNX's does not, and relsat needs a static shape for each
    operator it keeps opaque); the file is left as is when that fails."""
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    try:
        with warnings.catch_warnings(), real._stdout_to_stderr():
            warnings.simplefilter("ignore")
            inferred = SymbolicShapeInference.infer_shapes(onnx.load(str(path)), auto_merge=True)
        onnx.save(inferred, str(path))
    except Exception as exc:  # a model it cannot follow: relsat will say what it lacks
        log(f"symbolic shape inference failed on {path.name}: {real._first_line(exc)}")


def bench_model(name: str, args: argparse.Namespace, flags: set[str]) -> list[dict[str, Any]]:
    source, inputs, exporter = real.prepare(name, args.exports)
    work = args.exports / "transformers" / name
    work.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {"original": source, "A/A": source}
    notes: dict[str, str] = {}
    ort_path = work / "ort-opt.onnx"
    log(f"{name}: onnxruntime transformers optimizer")
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
        log(f"{name}: relsat optimize ({variant})")
        run = real.relsat_optimize(src, work / f"{variant}.onnx", options, args.timeout, flags)
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
    log(f"{name}: timing {len(files)} variants, {args.rounds} rounds")
    settings = OrtSettings(threads=args.threads)
    medians, checks = real.latencies(files, inputs, settings, args.rounds)
    base = medians.get("original")
    rows = []
    for variant in VARIANTS:
        path = files.get(variant)
        ms = medians.get(variant)
        run = runs.get(variant)
        rows.append(
            {
                "model": name,
                "variant": variant,
                "ops": sum(op_types(path).values()) if path else None,
                "fused": fused(op_types(path)) if path else "–",
                "ms": ms,
                "ratio": ms / base if ms is not None and base else None,
                "check": checks.get(variant, ""),
                "note": notes.get(variant, ""),
                "rewrites": (run.rewrites if run is not None else "") or "",
                "relsat_timing": (run.timing if run is not None else "") or "",
                "exporter": exporter,
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------
# the exporter-variant check


def export_variant(name: str, act: str, directory: Path) -> Path:
    """``name`` (hf-bert or hf-gpt2) with activation ``act`` — or, for ``attn:<impl>``, BERT's
    default activation and attention implementation ``<impl>`` (``sdpa``: torch's
    scaled_dot_product_attention; ``eager``: explicit MatMul/Mul/Add/Softmax/MatMul) — exported
    as bench/real_models.py exports it (cached by name and variant)."""
    import real_models as rm
    import torch

    path = directory / f"{name}-{act.replace(':', '-')}.onnx"
    if path.exists():
        return path
    attn = act.split(":", 1)[1] if act.startswith("attn:") else None
    act = "gelu" if attn else act
    torch.manual_seed(rm.SEED)
    if name == "hf-bert":
        from transformers import BertConfig, BertModel

        config = BertConfig(
            hidden_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=1024,
            hidden_act=act,
        )
        if attn:
            config._attn_implementation = attn
        model = rm._HiddenState(BertModel(config), ["input_ids", "attention_mask"])
    else:
        from transformers import GPT2Config, GPT2Model

        config = GPT2Config(
            n_embd=256, n_layer=2, n_head=4, use_cache=False, activation_function=act
        )
        model = rm._HiddenState(GPT2Model(config), ["input_ids", "attention_mask"])
    example = rm._tokens(config.vocab_size)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model.eval(),
            example,
            str(tmp),
            dynamo=False,
            opset_version=rm.OPSET,
            do_constant_folding=True,
            input_names=["input_ids", "attention_mask"],
            output_names=["output"],
        )
    tmp.replace(path)
    return path


def spelling(path: Path) -> str:
    """How the export spells its activation and attention: op types that tell them apart."""
    counts = op_types(path)
    keys = ("Erf", "Div", "Pow", "Tanh", "Mul", "IsNaN")
    return ", ".join(f"{k} {counts[k]}" for k in keys if counts.get(k))


def variant_check(args: argparse.Namespace, flags: set[str]) -> list[dict[str, Any]]:
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
            log(f"exporter variant: {name} {act}")
            path = export_variant(name, act, directory)
            opt = path.with_suffix(".relsat.onnx")
            options = ["--keep-slower", "--no-timing", "--threads", str(args.threads)]
            run = real.relsat_optimize(path, opt, options, args.timeout, flags)
            ort_path = path.with_suffix(".ort-opt.onnx")
            failure = ort_optimize(path, ort_path, name)
            relsat_ops = op_types(opt) if run.ok and run.output else collections.Counter()
            ort_ops = op_types(ort_path) if failure is None else collections.Counter()
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


def append_csv(rows: list[dict[str, Any]], settings: OrtSettings) -> None:
    CSV.parent.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    fields = ["timestamp", "machine", "model", "variant", "ops", "fused", "ms", "ratio", "check"]
    new = not CSV.exists()
    with CSV.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        if new:
            w.writeheader()
        for r in rows:
            w.writerow({"timestamp": stamp, "machine": settings.machine(), **r})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument(
        "--exports", type=Path, default=Path(tempfile.gettempdir()) / "relsat-exports"
    )
    parser.add_argument("--no-variants", action="store_true")
    args = parser.parse_args(argv)
    flags = real.cli_flags()
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for name in args.models:
        rows += bench_model(name, args, flags)
    variants = [] if args.no_variants else variant_check(args, flags)
    print_tables(rows, variants)
    append_csv(rows, OrtSettings(threads=args.threads))
    log(f"done in {time.perf_counter() - start:.0f} s")
    print(json.dumps({"rows": len(rows), "seconds": round(time.perf_counter() - start)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
