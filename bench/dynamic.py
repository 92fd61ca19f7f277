"""Dynamic-axes exports through ``relsat optimize``: interface kept, outputs at three shapes,
speedup at the pricing shape beside the ``--static`` run (issue 27).

    pip install -e '.[bench]'
    python bench/dynamic.py --list
    python bench/dynamic.py [--models bert-tiny gpt2-tiny ...] [--rounds 30] [--threads 1]
                            [--timeout 1800] [--exports DIR] [--relsat-args "..."] [--no-static]
                            [--peers [onnxslim ort-opt onnxscript]]

The corpus (bench/corpus.py's ``dynamic``): today's tiny Hugging Face BERT, GPT-2, Llama-style and
GPT-J-style decoders and ViT exported with dynamic axes — ``batch`` and ``sequence`` on
``input_ids`` and ``attention_mask`` (ViT: ``batch`` on ``pixel_values``), tiny HF ResNet and
ConvNeXt with ``batch``, ``height`` and ``width`` on ``pixel_values`` — through both exporters
(``legacy``: ``dynamic_axes``; ``dynamo``: ``dynamic_shapes`` with ``Dim.DYNAMIC``, which names the
dims ``s21``, ``s35``, ...); the tiny decoder's decode step (one token after a cache) with a
dynamic batch and cache (bench/corpus.py's ``decode_axes``: dynamo spells the mask's dim
``past_sequence_length + 1``, the legacy export names it ``total_sequence_length``; priced with
``--input-shape attention_mask=1,129``); and, where timm imports (not beside the pinned CPU torch),
timm's ResNet-18 and ConvNeXt-atto with a dynamic batch and image size.

Per model: ``relsat optimize IN -o OUT --threads N`` (dims symbolic, priced at batch 1 and
sequence 128), and unless ``--no-static`` the same with ``--static`` (fixed at the pricing
shape), in subprocesses (bench/calls.py). Then, in onnxruntime, independently of relsat's own
check: whether the written model keeps the original's interface (each input's and output's
dims, names included), and whether its outputs equal the original's (rtol 1e-4, atol 1e-5) at
three shapes — batch 1 and sequence 128, batch 2, sequence 65 (images: batch 1, 2, 3; images of
a dynamic size: 128x128, batch 2, 97x75; the decode step: 128 cached positions, batch 2, 65
cached) — on token
ids below 100 (every tiny model's vocabulary is larger), an all-ones mask, N(0, 1) pixels. Last,
latency at the pricing shape: the original, an A/A session of it, relsat's dynamic output and
the static one, side by side (bench/timing.py: ``--threads``, ``--rounds`` interleaved rounds,
medians; ratios to the original, below 1 = faster).

Peers (``--peers``; default onnxslim and onnxruntime's transformers optimizer, ``ort-opt``, as
bench/peers.py runs them; ``--peers`` alone for none): each on the same dynamic export, its output
checked the same way (interface, outputs at three shapes) and timed in the same interleaved
rounds.

Markdown on stdout, progress on stderr, rows appended to bench/results/dynamic.csv; exports and
outputs kept in ``--exports`` (``runs/<model>/``, each run's output in a ``.log`` beside it).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench modules

import calls
import common
import corpus
import peers
import timing

NAN = float("nan")
#: The pricing shape relsat defaults to, and the three shapes outputs are compared at: text
#: (batch, sequence), images (batch), a decode step (batch, cached positions).
SEQUENCE = 128
TEXT_SHAPES = ((1, SEQUENCE), (2, SEQUENCE), (1, SEQUENCE // 2 + 1))
IMAGE_BATCHES = ((1,), (2,), (3,))
#: An image model with a dynamic size: (batch, height, width); sides that no stride divides.
IMAGE_SIZES = ((1, SEQUENCE, SEQUENCE), (2, SEQUENCE, SEQUENCE), (1, 97, 75))
DECODE_SHAPES = ((1, SEQUENCE), (2, SEQUENCE), (1, SEQUENCE // 2 + 1))
SCHEMES = {
    "text": TEXT_SHAPES,
    "image": IMAGE_BATCHES,
    "image-size": IMAGE_SIZES,
    "decode": DECODE_SHAPES,
}
CSV_HEADERS = [
    "model",
    "exporter",
    "relsat_s",
    "relsat_rc",
    "shapes",
    "checked_at",
    "interface",
    "outputs_3_shapes",
    "ratio_dynamic",
    "ratio_static",
    "aa",
    "kept_dynamic",
    "kept_static",
    "rounds",
    "threads",
    "machine",
    "notes",
    # the peers on the same export (--peers): interface, outputs at 3 shapes, ratio each
    *(f"{peer}_{what}" for peer in peers.PEERS for what in ("interface", "outputs", "ratio")),
]
#: The peers run by default, and the table's peer columns (``--peers``).
PEER_COLUMNS: tuple[str, ...] = ("onnxslim", "ort-opt")
#: ort-opt's model type by the corpus name's first part (heads and hidden size: detected).
ORT_TYPES = {"bert": "bert", "gpt2": "gpt2", "llama": "gpt2", "gptj": "gpt2", "vit": "vit"}


@dataclass
class Row:
    """One model's numbers (NaN / empty: not measured)."""

    model: str
    exporter: str = ""
    dynamic: calls.CliRun | None = None
    static: calls.CliRun | None = None
    interface: str = ""
    outputs: str = ""
    peer_checks: dict[str, tuple[str, str]] = field(default_factory=dict)  # interface, outputs
    timed: timing.Timing | None = None
    notes: list[str] = field(default_factory=list)

    def ratio(self, variant: str) -> float:
        r = self.timed.ratio(variant) if self.timed else None
        return NAN if r is None else r


def dims_of(path: Path) -> list[list[int | str]]:
    """Each graph input's and output's dims: a ``dim_param`` name or a number."""
    graph = onnx.load(str(path), load_external_data=False).graph
    inits = {t.name for t in graph.initializer}
    values = [vi for vi in graph.input if vi.name not in inits] + list(graph.output)
    return [[d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in values]


def scheme(path: Path) -> str:
    """``decode`` for a model with a KV cache (``past_*`` inputs), ``image-size`` for one with a
    4-D float input whose sides are dynamic, ``image`` for one whose are not, else ``text``."""
    graph = onnx.load(str(path), load_external_data=False).graph
    if any(vi.name.startswith("past_") for vi in graph.input):
        return "decode"
    floats = [vi for vi in graph.input if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT]
    images = [vi.type.tensor_type.shape.dim for vi in floats]
    images = [dims for dims in images if len(dims) == 4]
    if not images:
        return "text"
    return "image-size" if any(d.dim_param for d in images[0][2:]) else "image"


def inputs_at(path: Path, shape: tuple[int, ...], seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs of the model at ``shape``: ``(batch, sequence)`` for token models (ids below 100,
    an all-ones mask), ``(batch,)`` for an image model (the other dims as declared), ``(batch,
    height, width)`` for one of a dynamic size, ``(batch, past)`` for a decode step (one token;
    the mask spans the cache and the token)."""
    graph = onnx.load(str(path), load_external_data=False).graph
    inits = {t.name for t in graph.initializer}
    rng = np.random.default_rng(seed)
    decode = scheme(path) == "decode"
    out: dict[str, np.ndarray] = {}
    for vi in graph.input:
        if vi.name in inits:
            continue
        declared = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        given = iter(shape)  # the batch, then each dynamic dim in order
        dims = [next(given, 1) if i == 0 or not d else d for i, d in enumerate(declared)]
        if decode:
            batch, past = shape
            if vi.name == "input_ids":
                dims = [batch, 1]
            elif vi.name == "attention_mask":
                dims = [batch, past + 1]
            else:  # a cache: batch, key/value heads, past, head size
                dims = [batch, declared[1], past, declared[3]]
        if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            out[vi.name] = rng.standard_normal(dims).astype(np.float32)
        elif "mask" in vi.name:
            out[vi.name] = np.ones(dims, dtype=np.int64)
        else:
            out[vi.name] = rng.integers(0, 100, dims).astype(np.int64)
    return out


def outputs_equal(original: Path, written: Path, shapes: list[tuple[int, ...]]) -> str:
    """``3/3`` when both models agree at every shape, else what went wrong first."""
    good = 0
    for shape in shapes:
        got = timing.side_by_side(original, {"w": written}, inputs_at(original, shape), rounds=0)
        check = got.checks.get("w", "not run")
        if not check.startswith("ok"):
            return f"{good}/{len(shapes)}: at {list(shape)} {check}"
        good += 1
    return f"{good}/{len(shapes)}"


def bench_model(entry: corpus.Entry, args: argparse.Namespace) -> Row:
    row = Row(entry.name, entry.exporter)
    exports = Path(args.exports)
    work = exports / "runs" / entry.name
    work.mkdir(parents=True, exist_ok=True)
    made = entry.make(exports)
    row.exporter = made.exporter
    common.log(f"  {entry.name}: {made.exporter}")
    options = ["--threads", str(args.threads), *shlex.split(args.relsat_args)]
    kind = scheme(made.path)
    if kind == "decode":  # priced at 128 cached positions (legacy: the mask's dim on its own)
        options += ["--input-shape", f"attention_mask=1,{SEQUENCE + 1}"]
    variants: dict[str, Path] = {}
    for variant, flags in (("dynamic", []), ("static", ["--static"])):
        if variant == "static" and args.no_static:
            continue
        run = calls.cli(made.path, work / f"relsat.{variant}.onnx", options + flags, args.timeout)
        setattr(row, variant, run)
        common.log(
            f"  {entry.name}: relsat {variant} {run.seconds:.1f} s, rc {run.rc}"
            + (f": {run.error}" if run.error else f", kept {run.kept}; {run.shapes}")
        )
        if run.error:
            row.notes.append(f"relsat {variant}: {run.error}")
        elif run.output is not None:
            variants[variant] = run.output
    for peer in args.peers:
        kind_of = ORT_TYPES.get(entry.name.split("-")[0], "bert")
        done = peers.run(peer, made.path, work / f"{peer}.onnx", model_type=kind_of, annotate=False)
        common.log(f"  {entry.name}: {peer} {done.seconds:.1f} s" + f": {done.error or 'ok'}")
        if done.output is None:
            row.notes.append(f"{peer}: {done.error}")
            row.peer_checks[peer] = ("–", "–")
            continue
        variants[peer] = done.output
    for variant, written in variants.items():
        if variant == "static":
            continue
        want, got = dims_of(made.path), dims_of(written)
        interface = "kept" if want == got else f"{want} became {got}"
        outputs = outputs_equal(made.path, written, list(SCHEMES[kind]))
        if variant == "dynamic":
            row.interface, row.outputs = interface, outputs
        else:
            row.peer_checks[variant] = ("kept" if want == got else "changed", outputs)
            if want != got:
                row.notes.append(f"{variant} interface: {interface}")
    pricing = SCHEMES[kind][0]
    row.timed = timing.side_by_side(
        made.path,
        variants,
        inputs_at(made.path, pricing),
        threads=args.threads,
        rounds=args.rounds,
    )
    row.notes += [f"{v} {c}" for v, c in row.timed.checks.items() if not c.startswith("ok")]
    return row


def _f(x: float) -> str:
    return "–" if x != x else f"{x:.2f}"


def _kept(run: calls.CliRun | None) -> str:
    return "–" if run is None else run.error or run.kept or "?"


def table(rows: list[Row], shown: tuple[str, ...] = PEER_COLUMNS) -> str:
    headers = [
        "model",
        "relsat s",
        "dims",
        "interface",
        "outputs at 3 shapes",
        "dynamic ratio",
        "static ratio",
        "A/A",
        "kept (dynamic)",
        "kept (static)",
        *(f"{peer}: ratio, interface, outputs" for peer in shown),
    ]
    body = [
        [
            r.model,
            f"{r.dynamic.seconds:.1f}" if r.dynamic else "–",
            (r.dynamic.shapes or "") if r.dynamic else "",
            r.interface or "–",
            r.outputs or "–",
            _f(r.ratio("dynamic")),
            _f(r.ratio("static")),
            _f(r.ratio(timing.AA)),
            _kept(r.dynamic),
            _kept(r.static),
            *(_peer(r, peer) for peer in shown),
        ]
        for r in rows
    ]
    return common.markdown(headers, body)


def _peer(r: Row, peer: str) -> str:
    if peer not in r.peer_checks:
        return "–"
    interface, outputs = r.peer_checks[peer]
    return f"{_f(r.ratio(peer))}, {interface}, {outputs}"


def csv_row(r: Row, args: argparse.Namespace, machine: str) -> list[object]:
    d = r.dynamic

    def num(x: float) -> object:
        return "" if x != x else round(x, 4)

    return [
        r.model,
        r.exporter,
        num(d.seconds) if d else "",
        d.rc if d else "",
        (d.shapes or "") if d else "",
        (d.checked_at or "") if d else "",
        r.interface,
        r.outputs,
        num(r.ratio("dynamic")),
        num(r.ratio("static")),
        num(r.ratio(timing.AA)),
        _kept(d),
        _kept(r.static),
        args.rounds,
        args.threads,
        machine,
        "; ".join(r.notes),
        *(
            value
            for peer in peers.PEERS
            for value in (*r.peer_checks.get(peer, ("", "")), num(r.ratio(peer)))
        ),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print the corpus and exit")
    ap.add_argument("--models", nargs="*", help="names, models (both exporters); default: all")
    ap.add_argument("--rounds", type=int, default=30, help="interleaved timing rounds")
    ap.add_argument("--threads", type=int, default=1, help="relsat's and the timing's threads")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per relsat call")
    common.add_exports(ap)
    ap.add_argument("--relsat-args", default="", help="more relsat options")
    ap.add_argument("--no-static", action="store_true", help="leave the --static run out")
    ap.add_argument(
        "--peers",
        nargs="*",
        choices=peers.PEERS,
        default=list(PEER_COLUMNS),
        help=f"peers on the same exports (default: {' '.join(PEER_COLUMNS)}; none: --peers)",
    )
    args = ap.parse_args()
    available = corpus.dynamic()
    if args.list:
        for e in available.values():
            print(f"{e.name}\t{e.family}\t{e.exporter}")
        if not corpus.timm_available():
            print(f"# {corpus.TIMM_NOTE}")
        return
    try:
        entries = corpus.select(available, args.models)
    except KeyError as exc:
        ap.error(str(exc.args[0]))
    machine = timing.machine(args.threads)
    rows = []
    start = time.perf_counter()
    for entry in entries:
        t = time.perf_counter()
        try:
            rows.append(bench_model(entry, args))
        # Broad on purpose: one model's failure is a row with the error, never the end.
        except Exception as exc:
            common.log(traceback.format_exc())
            rows.append(Row(entry.name, entry.exporter))
            rows[-1].notes.append(f"bench failed: {timing.first_line(exc)}")
        common.log(f"  {entry.name}: {time.perf_counter() - t:.1f} s in all")
    print(f"### dynamic-axes exports through relsat ({machine}, {args.rounds} rounds)\n")
    print(table(rows, tuple(args.peers)))
    print(
        "\ndims: what relsat did with the dynamic dims. interface: the written model's inputs "
        "and outputs have the original's dims (names included). outputs: onnxruntime, written "
        "vs original, at batch 1 / seq 128, batch 2, seq 65 (images: batch 1, 2, 3; of a "
        "dynamic size: 128x128, batch 2, 97x75; a decode step: 128, 128 at batch 2, 65 cached). "
        "ratio: median latency at batch 1, seq 128 (128 "
        "cached) over the original's (below 1 = faster); A/A: a second "
        "session of the original (noise); static: the --static run's output."
    )
    path = common.append_csv("dynamic", CSV_HEADERS, [csv_row(r, args, machine) for r in rows])
    common.log(f"rows appended to {path} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
