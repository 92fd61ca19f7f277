"""How often relsat's latency verdict is right on a loaded machine (relsat/onnx/latency.py).

usage: python bench/verdicts.py record [--pairs NAME ...] [--loads 0 1 2] [--orders fixed random]
                                       [--trials 4] [--seconds 5] [--threads 1] [--out FILE]
       python bench/verdicts.py replay FILE [FILE ...] [--seconds S]
       python bench/verdicts.py live [--pairs NAME ...] [--loads 0 1 2] [--trials 2] [--seconds 10]
       python bench/verdicts.py --list

``record`` times trials the way :func:`relsat.onnx.compare_latency` times them — three
onnxruntime sessions (original, optimized, a second session of the original: the A/A control),
warm-up, rounds of six blocks ``X Y Z Z Y X`` of ``k`` back-to-back runs each, ``k`` so a block
lasts ``seconds / 200`` — but never stops early: every round until the budget is spent (at least
15), so that any rule can be replayed on the same rounds afterwards. ``--orders``: ``fixed``
runs every round as original, optimized, control (the order before this bench: ``a b c c b a``);
``random`` draws each round's order uniformly from the six (what compare_latency does now).
``--loads``: how many busy loops (``python -c 'while True: pass'``) run beside a trial, started
before its sessions and ended after. Trials of every (pair, load, order) are shuffled together so
that the machine's own drift hits all alike. Each trial is one JSON line (per round: the order,
each session's mean ms per run, the seconds since the trial began) appended to ``--out``.

The rounds recorded for bench/history/timing.md are in bench/results/verdicts_rounds_5s.jsonl.gz
and verdicts_rounds_10s.jsonl.gz (``replay`` reads them as they are).

``A/A`` pairs time a model against itself: any "faster" or "slower" is wrong. Gain pairs time an
original against relsat's ``--no-timing`` output: "faster" is right, "slower" wrong.

``replay`` applies each rule to every recorded trial with the sequential looks compare_latency
makes (after ``min_rounds``, at :meth:`Timing.looks`, and when ``--seconds`` of rounds are
spent), and prints per (kind, pair, load, order) how many trials each rule called faster, slower
or neither; rows are appended to bench/results/verdicts.csv. Rules:

* ``old``: the rule before this bench (the median per-round ratio optimized / original, its
  order-statistic interval below ``1 - min_gain`` and below the control's interval; slower above
  1 and above the control's), copied here as it was;
* ``new``: :meth:`relsat.onnx.LatencyComparison.from_rounds` of this checkout.

``live`` runs :func:`relsat.onnx.compare_latency` itself — of whatever relsat is first on the
path (``PYTHONPATH=<checkout>`` times another branch's) — per pair and load, and prints one
tab-separated line per run: pair, kind, load, verdict, word, report.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import gzip
import json
import math
import os
import platform
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import calls
import numpy as np

from relsat.onnx.latency import (
    BLOCKS_PER_BUDGET,
    LatencyComparison,
    Timing,
    _block_size,
    _draw_inputs,
    _runner,
    compare_latency,
)
from relsat.onnx.runtime import OrtSettings

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "verdicts.csv"
ENCODER = HERE.parent / "relsat" / "models" / "data" / "encoder.onnx"
EXPORTS = Path("/tmp/relsat-exports/families")
WORK = Path("/tmp/relsat-verdicts")
PROTOCOLS = ("fixed", "random")
SYNTHETIC = ("matmul4", "elementwise")
#: The six orders of (original, optimized, control) = (0, 1, 2), the first the fixed one.
ORDERS = ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))
EXPORTED = ("hubert.dynamo", "deit.legacy", "phi.dynamo", "convnextv2.dynamo")


def _synthetic(work: Path) -> None:
    """Two small models made here: four 32x256 @ 256x256 MatMuls, twelve elementwise ops."""
    from onnx import TensorProto, helper, numpy_helper, save

    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    opset = [helper.make_opsetid("", 17)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 256])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 256])
    w = [
        numpy_helper.from_array((rng.standard_normal((256, 256)) / 16).astype(np.float32), f"w{i}")
        for i in range(4)
    ]
    names = ["x", "h0", "h1", "h2", "y"]
    nodes = [helper.make_node("MatMul", [names[i], f"w{i}"], [names[i + 1]]) for i in range(4)]
    save(
        helper.make_model(helper.make_graph(nodes, "mm", [x], [y], w), opset_imports=opset),
        str(work / "matmul4.onnx"),
    )
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 1024])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 1024])
    ops = ["Tanh", "Sigmoid", "Relu", "Neg"] * 3
    names = ["x", *(f"e{i}" for i in range(11)), "y"]
    nodes = [helper.make_node(op, [names[i]], [names[i + 1]]) for i, op in enumerate(ops)]
    save(
        helper.make_model(helper.make_graph(nodes, "ew", [x], [y]), opset_imports=opset),
        str(work / "elementwise.onnx"),
    )


def pairs(work: Path = WORK) -> dict[str, tuple[str, Path, Path, Path | None]]:
    """name → (kind, original, optimized, inputs .npz or None); kind ``A/A`` or ``gain``. The
    files in ``work`` are made by :func:`prepare`; the exports' pairs only where bench/families.py
    left them (the original and its ``raw``: relsat ``--no-timing``)."""
    out: dict[str, tuple[str, Path, Path, Path | None]] = {}
    for name in SYNTHETIC:
        out[f"aa-{name}"] = ("A/A", work / f"{name}.onnx", work / f"{name}.onnx", None)
    out["aa-encoder"] = ("A/A", ENCODER, ENCODER, None)
    out["gain-encoder"] = ("gain", ENCODER, work / "encoder-opt.onnx", None)
    for export in EXPORTED:
        original, raw = EXPORTS / f"{export}.onnx", EXPORTS / "runs" / export / "raw.onnx"
        if original.exists() and raw.exists():
            inputs = EXPORTS / f"{export}.inputs.npz"
            given = inputs if inputs.exists() else None
            out[f"aa-{export}"] = ("A/A", original, original, given)
            out[f"gain-{export}"] = ("gain", original, raw, given)
    return out


def prepare(work: Path) -> None:
    """The synthetic models and relsat's encoder (``--no-timing``) in ``work``."""
    _synthetic(work)
    encoder_opt = work / "encoder-opt.onnx"
    if not encoder_opt.exists():
        run = calls.cli(ENCODER, encoder_opt, ["--no-timing", "--threads", "1"], timeout=600)
        if not encoder_opt.exists():
            raise SystemExit(f"relsat optimize failed: {run}")


def record_trial(
    original: Path,
    optimized: Path,
    inputs: Path | None,
    order: str,
    seconds: float,
    threads: int,
    seed: int,
) -> dict[str, Any]:
    """One trial as compare_latency times it, every round until ``seconds`` are spent."""
    timing = Timing(max_seconds=seconds)
    settings = OrtSettings(threads=threads)
    start = time.perf_counter()
    runs = [
        _runner(original, "original", settings),
        _runner(optimized, "optimized", settings),
        _runner(original, "original", settings),
    ]
    given = dict(np.load(inputs)) if inputs is not None else None
    feed = _draw_inputs(runs[1].session, runs[0].session, 0, (original, optimized), None, given)
    block_s = seconds / BLOCKS_PER_BUDGET
    ks = [_block_size(run, feed, timing.warmup, block_s) for run in runs]
    rng = random.Random(seed)
    rounds: list[dict[str, Any]] = []
    while True:
        perm = ORDERS[0] if order == "fixed" else rng.choice(ORDERS)
        ms = [0.0, 0.0, 0.0]
        for i in (*perm, *reversed(perm)):
            ms[i] += runs[i](feed, ks[i]) / 2
        rounds.append({"order": perm, "ms": ms, "s": time.perf_counter() - start})
        if len(rounds) >= timing.min_rounds and rounds[-1]["s"] >= seconds:
            break
        if len(rounds) >= timing.max_rounds:
            break
    return {"k": ks, "rounds": rounds}


def _busy(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def record(args: argparse.Namespace) -> None:
    prepare(Path(args.work))
    known = pairs(Path(args.work))
    names = args.pairs or list(known)
    plan = [
        (name, load, order, t)
        for name in names
        for load in args.loads
        for order in args.orders
        for t in range(args.trials)
    ]
    random.Random(args.seed).shuffle(plan)
    out = Path(args.out)
    for i, (name, load, order, t) in enumerate(plan):
        kind, original, optimized, inputs = known[name]
        busy = _busy(load)
        try:
            time.sleep(0.2 if load else 0.0)
            trial = record_trial(
                original,
                optimized,
                inputs,
                order,
                args.seconds,
                args.threads,
                seed=args.seed * 100_003 + i,
            )
        finally:
            for p in busy:
                p.kill()
                p.wait()
        trial.update(
            pair=name,
            kind=kind,
            load=load,
            order=order,
            trial=t,
            threads=args.threads,
            seconds=args.seconds,
            loadavg=os.getloadavg()[0],
            when=datetime.datetime.now().isoformat(timespec="seconds"),
        )
        with out.open("a") as f:
            f.write(json.dumps(trial) + "\n")
        n = len(trial["rounds"])
        print(f"[{i + 1}/{len(plan)}] {name} load {load} {order}: {n} rounds", file=sys.stderr)


# -- the rules ------------------------------------------------------------------------------------


def _old_interval(ordered: list[float], alpha: float) -> tuple[float, float]:
    """The order-statistic interval for the median (relsat before this bench)."""
    n = len(ordered)
    j, tail = 0, 0.0
    while j < n // 2:
        next_tail = tail + math.comb(n, j) / 2**n
        if next_tail > alpha / 2:
            break
        j, tail = j + 1, next_tail
    j = max(j, 1)
    return ordered[j - 1], ordered[n - j]


def old_rule(
    a: list[float], b: list[float], c: list[float], timing: Timing, last: bool
) -> str | None:
    """The decision before this bench, as it was (None: undecided): every look at
    ``timing.alpha``."""
    low, high = _old_interval(sorted(y / x for x, y in zip(a, b, strict=True)), timing.alpha)
    c_low, c_high = _old_interval(sorted(z / x for x, z in zip(a, c, strict=True)), timing.alpha)
    if high < min(1.0 - timing.min_gain, c_low):
        return "faster"
    if low > max(1.0, c_high):
        return "slower"
    if 1.0 - timing.min_gain <= low:
        return "same"
    return None


def new_rule(
    a: list[float], b: list[float], c: list[float], timing: Timing, last: bool
) -> str | None:
    """This checkout's decision (None: undecided)."""
    comparison = LatencyComparison.from_rounds(a, b, c, timing=timing, last=last)
    return comparison.verdict if comparison.decided else None


RULES = {"old": old_rule, "new": new_rule}


def replay(trial: dict[str, Any], rule: Any, seconds: float) -> tuple[str, int]:
    """The verdict and rounds ``rule`` gives ``trial`` with compare_latency's looks."""
    timing = Timing(max_seconds=seconds)
    looks = set(timing.looks())
    a: list[float] = []
    b: list[float] = []
    c: list[float] = []
    for r in trial["rounds"]:
        a.append(r["ms"][0])
        b.append(r["ms"][1])
        c.append(r["ms"][2])
        n = len(a)
        spent = r["s"] >= seconds
        if n < timing.min_rounds or not (n in looks or spent):
            continue
        last = spent or n >= timing.max_rounds
        decision = rule(a, b, c, timing, last)
        if decision is not None:
            return decision, n
        if last:
            break
    return "undecided", len(a)


def _lines(path: Path) -> list[str]:
    """The lines of a recording, gzipped (``.gz``) or not."""
    if path.suffix == ".gz":
        with gzip.open(path, "rt") as f:
            return f.read().splitlines()
    return path.read_text().splitlines()


def replay_all(args: argparse.Namespace) -> None:
    trials = [json.loads(line) for path in args.files for line in _lines(Path(path))]
    cells: dict[tuple[Any, ...], Counter[str]] = {}
    for trial in trials:
        for rule_name, rule in RULES.items():
            verdict, _ = replay(trial, rule, args.seconds or trial["seconds"])
            key = (trial["kind"], trial["pair"], trial["load"], trial["order"], rule_name)
            cells.setdefault(key, Counter())[verdict] += 1
            cells.setdefault((trial["kind"], "all", "all", trial["order"], rule_name), Counter())[
                verdict
            ] += 1
            cells.setdefault(
                (trial["kind"], "all", trial["load"], trial["order"], rule_name), Counter()
            )[verdict] += 1
    print("| kind | pair | load | order | rule | trials | faster | slower | same | undecided |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    stamp = datetime.datetime.now().isoformat(timespec="seconds")
    for key in sorted(cells, key=lambda k: tuple(str(x) for x in k)):
        count = cells[key]
        total = sum(count.values())
        kind, pair, load, order, rule = key
        print(
            f"| {kind} | {pair} | {load} | {order} | {rule} | {total} | {count['faster']} | "
            f"{count['slower']} | {count['same']} | {count['undecided']} |"
        )
        rows.append(
            [
                stamp,
                platform.node(),
                kind,
                pair,
                load,
                order,
                rule,
                total,
                count["faster"],
                count["slower"],
                count["same"],
                count["undecided"],
            ]
        )
    new = not RESULTS.exists()
    with RESULTS.open("a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(
                [
                    "when",
                    "machine",
                    "kind",
                    "pair",
                    "load",
                    "order",
                    "rule",
                    "trials",
                    "faster",
                    "slower",
                    "same",
                    "undecided",
                ]
            )
        w.writerows(rows)


def live(args: argparse.Namespace) -> None:
    """compare_latency of whatever relsat is imported (``PYTHONPATH=<checkout>``), live."""
    prepare(Path(args.work))
    known = pairs(Path(args.work))
    plan = [
        (n, load, t)
        for n in args.pairs or list(known)
        for load in args.loads
        for t in range(args.trials)
    ]
    random.Random(args.seed).shuffle(plan)
    for name, load, t in plan:
        kind, original, optimized, inputs = known[name]
        given = dict(np.load(inputs)) if inputs is not None else None
        busy = _busy(load)
        try:
            c = compare_latency(
                original,
                optimized,
                settings=OrtSettings(threads=args.threads),
                timing=Timing(max_seconds=args.seconds, seed=t),
                given=given,
            )
        finally:
            for p in busy:
                p.kill()
                p.wait()
        print(f"{name}\t{kind}\t{load}\t{c.verdict}\t{c.word}\t{c.report()}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--list", action="store_true", help="list the pairs and exit")
    sub = ap.add_subparsers(dest="command")
    rec = sub.add_parser("record", help="record trials (JSON lines)")
    rec.add_argument("--pairs", nargs="*", default=None)
    rec.add_argument("--loads", nargs="*", type=int, default=[0, 1, 2])
    rec.add_argument("--orders", nargs="*", choices=PROTOCOLS, default=list(PROTOCOLS))
    rec.add_argument("--trials", type=int, default=4, help="trials per (pair, load, order)")
    rec.add_argument("--seconds", type=float, default=5.0, help="each trial's budget")
    rec.add_argument("--threads", type=int, default=1)
    rec.add_argument("--seed", type=int, default=0)
    rec.add_argument("--work", default=str(WORK))
    rec.add_argument("--out", default=str(WORK / "trials.jsonl"))
    liv = sub.add_parser("live", help="compare_latency live (tab-separated lines)")
    liv.add_argument("--pairs", nargs="*", default=None)
    liv.add_argument("--loads", nargs="*", type=int, default=[0, 1, 2])
    liv.add_argument("--trials", type=int, default=2, help="runs per (pair, load)")
    liv.add_argument("--seconds", type=float, default=10.0, help="Timing.max_seconds")
    liv.add_argument("--threads", type=int, default=1)
    liv.add_argument("--seed", type=int, default=0)
    liv.add_argument("--work", default=str(WORK))
    rep = sub.add_parser("replay", help="replay the rules on recorded trials")
    rep.add_argument("files", nargs="+")
    rep.add_argument(
        "--seconds", type=float, default=None, help="the budget replayed (default: the recorded)"
    )
    args = ap.parse_args()
    if args.list:
        for name, (kind, original, optimized, _) in pairs().items():
            print(f"{name}\t{kind}\t{original}\t{optimized}")
        return
    if args.command == "record":
        record(args)
    elif args.command == "live":
        live(args)
    elif args.command == "replay":
        replay_all(args)
    else:
        ap.print_help()


if __name__ == "__main__":
    main()
