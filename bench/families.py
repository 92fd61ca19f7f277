"""The model families users bring: tiny Hugging Face models through relsat and its peers.

    python bench/families.py [--more] --list
    python bench/families.py [--more | --models qwen3 t5 ...] [--exporters dynamo legacy]
                             [--rounds 200] [--threads 1] [--timeout 600] [--no-peers]
                             [--exports DIR]

relsat's transformer fusions are tested on BERT, GPT-2, ViT, Llama- and GPT-J-style models
(bench/ort_fusions.py, bench/today.py). This bench asks what it does with the others: Qwen3
(Qwen2 where transformers lacks it), Mistral, Phi-3, Gemma 3's text model (head size 256), T5
(encoder and one decoder step), BART (encoder and decoder), Whisper's encoder, CLIP's text and
vision towers (``quick_gelu``), wav2vec2, Swin and SegFormer; ``--more`` the next ones
(:data:`hffamilies.MORE`): GPT-NeoX/Pythia (partial rotary, parallel residual), Falcon
(multi-query, parallel block), BLOOM (ALiBi), OPT, Phi-2 (partial rotary, parallel block),
StableLM, GPT-Neo (local attention), Mixtral (top-2 of 4 experts), DeBERTa-v2 (disentangled
relative attention), ALBERT (shared layers), ModernBERT, DistilBERT, BEiT (relative position
bias), DeiT, ConvNeXt-V2, MobileViT-V2 and HuBERT. Each is built from a tiny config
(2 layers or stages, hidden 64-128, short sequences; random init, nothing downloaded; every bias
made non-zero by :func:`architectures.nonzero_biases`) and exported by torch's ``dynamo``
exporter (``torch.onnx.export(dynamo=True)``, its default opset) and the ``legacy`` one (opset
17), bench/exports.py, cached. An export that fails is a row saying so.

Per export, each tool in a subprocess with ``--timeout``:

* ``raw``: ``relsat optimize IN -o OUT --no-timing`` (what extraction chose, kept whatever its
  latency) and ``relsat``: the default ``relsat optimize IN -o OUT`` (what a user gets: the
  original handed back when the optimized model is not faster);
* ``onnxslim`` and ``ort-opt`` (onnxruntime's transformers optimizer, its pattern fusions only,
  the ``model_type`` of :data:`ORT_TYPE`), bench/peers.py; a peer that fails is a note.

Then every file is timed side by side with the original and an A/A session of it
(bench/timing.py: ``--threads`` intra-op threads, no spinning, ``--rounds`` interleaved rounds,
medians), outputs checked against the original's. Each row lists the fused kernels the file holds
(:data:`FUSED`; ``ms.Attention`` is com.microsoft's, ``Attention`` ONNX's) and the operators that
spell out a fusion when left (:data:`SPELLED`: Softmax, Erf, Tanh, Sigmoid, ReduceMean, Pow,
Sqrt). ``flag`` marks a raw or handed output whose ratio exceeds 1 by more than the noise (the
A/A's distance from 1, at least 0.03), a crash or a check that differs. A second table gives
relsat's runs: seconds, exit, what it kept and the rewrites it chose (``gains by rule``).

Markdown on stdout, progress on stderr, rows appended to bench/results/families.csv; exports under
``--exports``/families, each tool's output (a ``.log`` beside it) under ``families/runs/<export>``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench modules

import calls
import common
import hffamilies
import timing

EXPORTERS = ("dynamo", "legacy")
#: Fused kernels looked for in every file (``ms.`` prefix: the com.microsoft domain).
FUSED = (
    "Attention",
    "ms.Attention",
    "MultiHeadAttention",
    "ms.MultiHeadAttention",
    "ms.GroupQueryAttention",
    "ms.SkipLayerNormalization",
    "ms.SkipSimplifiedLayerNormalization",
    "LayerNormalization",
    "RMSNormalization",
    "ms.SimplifiedLayerNormalization",
    "SimplifiedLayerNormalization",
    "ms.Gelu",
    "Gelu",
    "ms.FastGelu",
    "ms.BiasGelu",
    "ms.QuickGelu",
    "ms.RotaryEmbedding",
    "RotaryEmbedding",
    "GroupNormalization",
    "ms.GroupNorm",
    "ms.BiasAdd",
    "ms.FusedMatMul",
)
#: Operators that spell out attention (Softmax), a GELU (Erf, Tanh), SiLU / QuickGELU (Sigmoid)
#: or a norm (ReduceMean, Pow, Sqrt) when a file still holds them.
SPELLED = ("Softmax", "Erf", "Tanh", "Sigmoid", "ReduceMean", "Pow", "Sqrt")
#: onnxruntime's transformers optimizer's ``model_type`` per family (``bert`` otherwise).
ORT_TYPE = {
    "t5": "t5",
    "bart": "bart",
    "clip-text": "clip",
    "clip-vision": "clip",
    "swin": "swin",
    "gpt-neox": "gpt_neox",
    "falcon": "gpt2",
    "bloom": "gpt2",
    "opt": "gpt2",
    "gpt-neo": "gpt2",
    "beit": "vit",
    "deit": "vit",
}
#: Every family the bench can build: the first twelve, then ``--more``.
ALL = hffamilies.MODELS | hffamilies.MORE
VARIANTS = ("original", "A/A", "raw", "relsat", "onnxslim", "ort-opt")
NOISE_FLOOR = 0.03
NAN = float("nan")

# ---------------------------------------------------------------------------------------------
# one export through the tools


def listed(counts: Counter[str], names: tuple[str, ...]) -> str:
    return ", ".join(f"{k} {counts[k]}" for k in names if counts.get(k)) or "–"


def short(text: str | None, n: int = 90) -> str:
    text = " ".join((text or "").split()).replace("|", "/")
    return text if len(text) <= n else text[: n - 1] + "…"


def bench_export(model: str, exporter: str, args: argparse.Namespace) -> tuple[list, list]:
    """The rows of the latency table and of relsat's table for ``model`` through ``exporter``."""
    from exports import export

    tag = f"{model}.{exporter}"
    folder = args.exports / "families"
    start = time.perf_counter()
    try:
        made = export(tag, ALL[model], folder, exporter)
    # Broad on purpose: an exporter that cannot export this model is a row, not the end.
    except Exception as exc:
        error = timing.first_line(exc)
        common.log(f"{tag}: export failed: {error}")
        row = [
            model,
            exporter,
            "original",
            NAN,
            NAN,
            NAN,
            "",
            "",
            "",
            f"export failed: {short(error)}",
        ]
        return [row], []
    common.log(f"{tag}: exported ({time.perf_counter() - start:.1f} s)")
    work = folder / "runs" / tag
    work.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    seconds: dict[str, float] = {}
    notes: dict[str, str] = {}
    relsat_rows = []
    base = ["--threads", str(args.threads)]
    for variant, options in (("raw", [*base, "--no-timing"]), ("relsat", base)):
        common.log(f"{tag}: relsat optimize ({variant})")
        run = calls.cli(made.path, work / f"{variant}.onnx", options, timeout=args.timeout)
        seconds[variant] = run.seconds
        if run.output is not None:
            files[variant] = run.output
        if run.error or run.rc != 0:
            notes[variant] = f"failed (rc {run.rc}): {short(run.error, 120)}"
        elif run.output is None:
            notes[variant] = f"no file: {short(run.kept)}"
        else:
            notes[variant] = short(run.kept, 60) if variant == "relsat" else ""
        relsat_rows.append(
            [
                tag,
                variant,
                round(run.seconds, 1),
                run.rc,
                short(run.error or run.kept, 70),
                short(run.verified, 40),
                run.rewrites or "",
            ]
        )
    if not args.no_peers:
        from peers import run as peer

        for name in ("onnxslim", "ort-opt"):
            common.log(f"{tag}: {name}")
            done = peer(
                name,
                made.path,
                work / f"{name}.onnx",
                model_type=ORT_TYPE.get(model, "bert"),
                timeout=args.timeout,
            )
            seconds[name] = done.seconds
            if done.output is not None and done.output.exists():
                files[name] = done.output
            notes[name] = f"failed: {short(done.error)}" if done.error else short(done.detail)
    common.log(f"{tag}: timing {list(files)}")
    t = timing.side_by_side(made.path, files, made.inputs, threads=args.threads, rounds=args.rounds)
    noise = max(abs((t.ratio("A/A") or 1.0) - 1.0), NOISE_FLOOR)
    rows = []
    for variant in VARIANTS:
        path = made.path if variant in ("original", "A/A") else files.get(variant)
        if path is None and variant not in notes:
            continue
        counts = common.op_types(path, qualified=True) if path is not None else Counter()
        ratio = t.ratio(variant)
        check = t.checks.get(variant, "")
        flag = ""
        if variant in ("raw", "relsat"):
            if variant not in files or notes[variant].startswith("failed"):
                flag = "CRASH"
            elif check.startswith(("DIFFERS", "fails")):
                flag = "DIFFERS"
            elif ratio is not None and ratio > 1 + noise and "original" not in notes[variant]:
                flag = "SLOWER"  # (the original handed back is the A/A's noise again)
        rows.append(
            [
                model,
                exporter,
                variant,
                round(seconds.get(variant, NAN), 1),
                round(t.ms.get(variant, NAN), 4),
                round(ratio if ratio is not None else NAN, 3),
                flag,
                listed(counts, FUSED),
                listed(counts, SPELLED),
                "; ".join(s for s in (check, notes.get(variant, "")) if s),
            ]
        )
    return rows, relsat_rows


HEADERS = ["model", "exporter", "variant", "tool s", "ms", "ratio", "flag", "fused", "spelled"]
HEADERS += ["check / note"]
RELSAT_HEADERS = ["export", "run", "s", "rc", "kept / error", "verified", "rewrites chosen"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", choices=list(ALL), help="default: the first twelve")
    ap.add_argument(
        "--more", action="store_true", help="the families of hffamilies.MORE (default --models)"
    )
    ap.add_argument("--exporters", nargs="+", choices=EXPORTERS, default=list(EXPORTERS))
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per tool run")
    ap.add_argument("--no-peers", action="store_true", help="skip onnxslim and ort-opt")
    ap.add_argument("--list", action="store_true", help="list the exports")
    common.add_exports(ap)
    args = ap.parse_args()
    if args.models is None:
        args.models = list(hffamilies.MORE if args.more else hffamilies.MODELS)
    if args.list:
        for model in args.models:
            for exporter in EXPORTERS:
                print(f"{model}.{exporter}")
        return
    rows, relsat_rows = [], []
    for model in args.models:
        for exporter in args.exporters:
            got, ran = bench_export(model, exporter, args)
            rows += got
            relsat_rows += ran
            print(common.markdown(HEADERS, got), file=sys.stderr, flush=True)
    print(f"{timing.machine(args.threads)}, {args.rounds} rounds\n")
    print(common.markdown(HEADERS, rows))
    print()
    print(common.markdown(RELSAT_HEADERS, relsat_rows))
    common.append_csv(
        "families", [*HEADERS, "threads", "rounds"], [[*r, args.threads, args.rounds] for r in rows]
    )


if __name__ == "__main__":
    main()
