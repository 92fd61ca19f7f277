"""The extraction problem of a priced relational e-graph, and its egraph-serialize JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from relsat.engine.egraph import EGraph
from relsat.extract.gym import dumps
from relsat.extract.problem import Problem

__all__ = ["egraph_problem", "save_egraph_json"]


def egraph_problem(egraph: EGraph) -> tuple[Problem, np.ndarray, np.ndarray]:
    """The extraction problem of a priced e-graph (``enode_cost`` filled), with the e-node id of
    each problem node and the e-class id of each problem class.

    Forbidden are the e-nodes on the cycle filter list (the pipeline also forbids, for an ONNX
    output, what the exporter cannot write: :func:`relsat.onnx.exportable.unexportable`)."""
    rows = egraph.sql(
        "SELECT e.id, e.class, e.filtered, c.ms, e.op, e.p0, e.p1, e.p2, e.p3, e.p4, e.p5, e.s, "
        "list_filter([e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, e.c6, e.c7], lambda k: k >= 0) AS kids "
        "FROM enode e JOIN enode_cost c ON c.enode = e.id ORDER BY e.id"
    )
    class_ids = egraph.sql("SELECT id FROM eclass ORDER BY id")["id"].to_numpy()
    lookup = {int(c): i for i, c in enumerate(class_ids)}
    kids = rows["kids"].to_pylist()
    ptr = np.zeros(len(kids) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(k) for k in kids])
    flat = np.array([lookup[c] for k in kids for c in k], dtype=np.int64)
    outputs = [lookup[r[0]] for r in egraph.db.execute("SELECT class FROM output ORDER BY pos")]
    node_class = np.array([lookup[c] for c in rows["class"].to_pylist()], dtype=np.int64)
    filtered = rows["filtered"].to_numpy(zero_copy_only=False)
    problem = Problem(
        node_class=node_class,
        node_cost=rows["ms"].to_numpy(zero_copy_only=False),
        child_ptr=ptr,
        child_idx=flat,
        roots=np.array(outputs, dtype=np.int64),
        forbidden=filtered,
        node_labels=[str(i) for i in rows["id"].to_pylist()],
        class_labels=[str(c) for c in class_ids.tolist()],
        node_ops=[
            _label(r)
            for r in rows.select(["op", "p0", "p1", "p2", "p3", "p4", "p5", "s"]).to_pylist()
        ],
    )
    return problem, rows["id"].to_numpy(), class_ids


def _label(r: dict[str, Any]) -> str:
    """An e-node's op with its parameters, e.g. ``conv2d[1,1,0,2]`` or ``weight(w3)``."""
    opaque = r["op"] == "opaque"  # its p0 is its type's key; the type is in s
    params = [r[f"p{i}"] for i in range(6) if r[f"p{i}"] >= 0 and not (opaque and i == 0)]
    text = r["op"] + (f"[{','.join(map(str, params))}]" if params else "")
    return text + (f"({r['s']})" if r["s"] else "")


def save_egraph_json(egraph: EGraph, path: str | Path, *, indent: int | None = None) -> None:
    """Write a priced e-graph as extraction-gym's egraph-serialize JSON. E-nodes on the cycle
    filter list are left out (extraction must never choose them), so the file is acyclic."""
    problem, _, _ = egraph_problem(egraph)
    keep = ~problem.forbidden
    Path(path).write_text(dumps(_subset(problem, keep), indent=indent))


def _subset(p: Problem, keep: np.ndarray) -> Problem:
    idx = np.flatnonzero(keep)
    kids = [p.child_idx[p.child_ptr[i] : p.child_ptr[i + 1]] for i in idx]
    ptr = np.zeros(len(idx) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(k) for k in kids])
    return Problem(
        node_class=p.node_class[idx],
        node_cost=p.node_cost[idx],
        child_ptr=ptr,
        child_idx=np.concatenate(kids) if kids else np.zeros(0, dtype=np.int64),
        roots=p.roots,
        node_labels=[p.node_labels[i] for i in idx] if p.node_labels else None,
        class_labels=p.class_labels,
        node_ops=[p.node_ops[i] for i in idx] if p.node_ops else None,
    )
