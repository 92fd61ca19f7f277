"""Spellings (issue 39): the corpus of exporter spellings and near misses in
``tests/spellings.py`` through relsat and its peers — which fuse, and which stay equal.

    python bench/spellings.py [--tools relsat ort-opt ort-session onnxscript onnxslim]
                              [--only rmsnorm gqa/group-3]

Per corpus model and tool: whether the written model holds the fusion's kernel
(``spellings.fused``: LayerNormalization, SimplifiedLayerNormalization / RMSNormalization, Gelu,
FastGelu, QuickGelu, Attention / MultiHeadAttention, GroupQueryAttention or Attention with no
Expand or Tile left, RotaryEmbedding), whether its output equals the original's in onnxruntime
on random inputs, and the seconds the tool took. The tools: ``relsat`` (``relsat.optimize``,
shipped rules, analytic prices, no timing: what ``tests/test_spellings.py`` runs),
``ort-opt`` (onnxruntime's transformers optimizer, ``model_type="bert"``, pattern fusions only),
``ort-session`` (the graph onnxruntime's own optimizer runs, ``ORT_ENABLE_EXTENDED`` on the CPU,
saved through ``optimized_model_filepath``), ``onnxscript`` (``optimize_for_ort``) and
``onnxslim``; a tool that is not installed or fails is a note, not the end of the bench.

Prints a Markdown table per fusion (spellings fused / spellings, near misses fused, near misses
whose output differs) and the spellings each tool leaves unfused; appends one row per model and
tool to ``bench/results/spellings.csv``.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import onnx
import peers
from calls import optimize
from common import append_csv, log, markdown
from timing import first_line

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("relsat", "ort-opt", "ort-session", "onnxscript", "onnxslim")
MISSING = re.compile(r"No module named|not installed|is unavailable")  # a tool not there at all


def _corpus_module() -> ModuleType:
    """``tests/spellings.py``, loaded by path (this script's own name would shadow it)."""
    spec = importlib.util.spec_from_file_location("spelling_corpus", ROOT / "tests/spellings.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in model.graph.input
    }


def _session(model: onnx.ModelProto, level: int | None = None, save: Path | None = None):  # type: ignore[no-untyped-def]
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if level is not None:
        so.graph_optimization_level = ort.GraphOptimizationLevel(level)
    if save is not None:
        so.optimized_model_filepath = str(save)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _equal(original: onnx.ModelProto, written: onnx.ModelProto) -> bool:
    """The written model's output equals the original's in onnxruntime on random inputs (each
    session without graph optimizations: what each file says, not what onnxruntime makes of it)."""
    import onnxruntime as ort

    feeds = _feeds(original)
    off = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = _session(original, off).run(None, feeds)[0]
    got = _session(written, off).run(None, feeds)[0]
    return bool(np.allclose(got, want, rtol=1e-4, atol=1e-4))


def _tool(tool: str, model: onnx.ModelProto, work: Path) -> onnx.ModelProto:
    """``tool`` on ``model``: the model it writes (raises when it fails)."""
    if tool == "relsat":
        result = optimize(model, cost_model="analytic", timing=None)
        return result.exported if result.exported is not None else model
    if tool == "ort-session":
        import onnxruntime as ort

        target = work / "session.onnx"
        _session(model, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, target)
        return onnx.load(str(target))
    source, target = work / "in.onnx", work / f"{tool}.onnx"
    onnx.save(model, str(source))
    run = peers.run(tool, source, target, annotate=False)
    if run.output is None:
        raise RuntimeError(run.error or "no output")
    return onnx.load(str(run.output))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", nargs="+", default=list(TOOLS), choices=TOOLS)
    ap.add_argument("--only", nargs="*", default=[], help="corpus ids containing one of these")
    args = ap.parse_args()
    corpus = _corpus_module()
    items = [s for s in corpus.corpus() if not args.only or any(o in s.id for o in args.only)]
    headers = ["tool", "fusion", "spelling", "near_miss", "fused", "equal", "s", "note"]
    rows: list[list[object]] = []
    missing: dict[str, str] = {}
    for tool in args.tools:
        for s in items:
            if tool in missing:
                break
            model = s.build()
            start = time.perf_counter()
            with tempfile.TemporaryDirectory() as scratch:
                try:
                    written = _tool(tool, model, Path(scratch))
                    note = ""
                # Broad on purpose: a peer's matcher may raise anything on a graph it does not know.
                except Exception as exc:
                    written, note = None, first_line(exc)
            seconds = time.perf_counter() - start
            if written is None and MISSING.search(note):
                missing[tool] = note
                log(f"{tool}: not installed ({note})")
                break
            fused = corpus.fused(written, s.fusion)
            equal = None if written is None else _equal(model, written)
            rows.append(
                [tool, s.fusion, s.name, s.near_miss, fused, equal, round(seconds, 2), note]
            )
            log(f"{tool} {s.id}: fused {fused}, equal {equal} {note}")
    tools = [t for t in args.tools if t not in missing]
    _print(rows, tools, items)
    for tool, why in missing.items():
        print(f"\n{tool}: not measured, not installed ({why})")
    append_csv("spellings", headers, rows)


def _print(rows: list[list[object]], tools: list[str], items: list) -> None:  # type: ignore[type-arg]
    by: dict[tuple[str, str], list[list[object]]] = defaultdict(list)
    for r in rows:
        by[(str(r[0]), str(r[1]))].append(r)
    fusions = list(dict.fromkeys(s.fusion for s in items))
    table = []
    for fusion in [*fusions, "all"]:
        line: list[object] = [fusion]
        for tool in tools:
            rs = [r for (t, f), v in by.items() if t == tool and fusion in (f, "all") for r in v]
            good = [r for r in rs if not r[3]]
            near = [r for r in rs if r[3]]
            cell = f"{sum(bool(r[4]) for r in good)}/{len(good)}"
            if near:
                wrong = sum(bool(r[4]) for r in near)
                differ = sum(r[5] is False for r in near)
                cell += f" · near {wrong}/{len(near)} fused" + (
                    f", {differ} differ" if differ else ""
                )
            failed = sum(bool(r[7]) for r in rs)
            line.append(cell + (f" · {failed} failed" if failed else ""))
        table.append(line)
    print("\nSpellings fused / spellings; near misses fused (and differing outputs):\n")
    print(markdown(["fusion", *tools], table))
    for tool in tools:
        unfused = [f"{r[1]}/{r[2]}" for r in rows if r[0] == tool and not r[3] and not r[4]]
        good = [r for r in rows if r[0] == tool and not r[3]]
        share = 1 - len(unfused) / len(good) if good else 0.0
        print(f"\n{tool}: {share:.1%} fused; unfused: {', '.join(unfused) or 'none'}")


if __name__ == "__main__":
    main()
