"""Exploration at scale: e-nodes reached, seconds, peak memory and e-nodes per second.

    python bench/scale.py [--models nasrnn bert ...] [--k-multi 1 2 3] [--nodes 200000]
                          [--seconds 120] [--no-peer]

Each (model, k_multi) runs in a fresh process (so that its peak RSS is its own) with the limits
given (TENSAT's node limit would stop k_multi = 3 early; the defaults let it grow to 200,000
e-nodes or 120 s). With k_multi = 1 the egglog peer (``../shared/tools/egglog_peer.py``: TENSAT's
rules in egglog, no shape checks) runs on the same model in the same run when the ``egglog``
package is importable; otherwise its columns say why not. Prints a Markdown table and appends it
to ``bench/results/scale.csv``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import append_csv, markdown

from relsat import models

ROOT = Path(__file__).resolve().parent.parent
PEER = ROOT.parent / "shared" / "tools" / "egglog_peer.py"
REFERENCE = ROOT.parent / "shared" / "reference"
#: The peer reads TENSAT's op lists: relsat model name -> reference file.
OPLISTS = {
    "nasrnn": "nasrnn.oplist.json",
    "bert": "bert.oplist.json",
    "resnext50": "resnext50.oplist.json",
    "nasneta": "nasnet_a.oplist.json",
    "inceptionv3": "inceptionv3.oplist.json",
}

#: One exploration in a child process; prints one JSON line.
_CHILD = r"""
import json, resource, sys, time
from relsat import models
from relsat.engine.egraph import EGraph
from relsat.engine.explore import Limits, Schedule, explore
name, k, nodes, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
eg = EGraph.from_graph(models.load(name))
start = eg.counts()[0]
t = time.perf_counter()
r = explore(eg, limits=Limits(nodes=nodes, seconds=seconds), schedule=Schedule(k_multi=k))
dt = time.perf_counter() - t
print(json.dumps({"enodes": r.enodes, "start": start, "seconds": dt, "stop": r.stop.value,
                  "iterations": len({s.iteration for s in r.iterations}),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def relsat_run(name: str, k: int, nodes: int, seconds: float) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, name, str(k), str(nodes), str(seconds)],
        capture_output=True,
        text=True,
        timeout=seconds + 600,
    )
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    result: dict = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def peer_run(name: str, nodes: int, seconds: float) -> dict:
    """egglog's time on the same model (k_multi = 1), or why there is none."""
    if importlib.util.find_spec("egglog") is None:
        return {"note": "egglog not installed"}
    if not PEER.is_file() or name not in OPLISTS:
        return {"note": "no peer input"}
    cmd = [
        sys.executable,
        str(PEER),
        "--rules-dir",
        str(REFERENCE / "rules"),
        "--model",
        str(REFERENCE / "models" / OPLISTS[name]),
        "--name",
        name,
        "--node-limit",
        str(nodes),
        "--k-multi",
        "1",
        "--budget",
        str(int(seconds)),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
    events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    stops = [e for e in events if e.get("event") == "stop"]
    if not stops:
        return {"note": f"peer failed (exit {out.returncode})"}
    return {"enodes": stops[-1].get("enodes"), "seconds": stops[-1].get("total_s")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(models.BENCHMARKS))
    ap.add_argument("--k-multi", nargs="*", type=int, default=[1, 2, 3])
    ap.add_argument("--nodes", type=int, default=200_000, help="e-node limit")
    ap.add_argument("--seconds", type=float, default=120.0, help="time limit per exploration")
    ap.add_argument("--no-peer", action="store_true", help="skip the egglog peer")
    args = ap.parse_args()
    headers = [
        "model",
        "k_multi",
        "e-nodes",
        "seconds",
        "stop",
        "peak RSS MB",
        "e-nodes/s",
        "egglog e-nodes",
        "egglog s",
        "relsat / egglog",
    ]
    rows = []
    for name in args.models:
        for k in args.k_multi:
            print(f"  {name} k_multi={k} ...", file=sys.stderr)
            r = relsat_run(name, k, args.nodes, args.seconds)
            if "error" in r:
                rows.append([name, k, "-", "-", r["error"][:60], "-", "-", "", "", ""])
                continue
            rate = (r["enodes"] - r["start"]) / r["seconds"] if r["seconds"] else 0.0
            peer: dict = {}
            if k == 1 and not args.no_peer:
                peer = peer_run(name, args.nodes, args.seconds)
            note = peer.get("note", "")
            ratio = f"{r['seconds'] / peer['seconds']:.1f}x" if peer.get("seconds") else note
            rows.append(
                [
                    name,
                    k,
                    r["enodes"],
                    round(r["seconds"], 3),
                    r["stop"],
                    round(r["rss_mb"]),
                    round(rate),
                    peer.get("enodes", ""),
                    round(peer["seconds"], 3) if peer.get("seconds") else "",
                    ratio,
                ]
            )
    print(markdown(headers, rows))
    print(f"\nappended to {append_csv('scale', headers, rows)}")


if __name__ == "__main__":
    main()
