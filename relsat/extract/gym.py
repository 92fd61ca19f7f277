"""Read and write e-graphs in egraph-serialize JSON (the extraction-gym format).

The format (``reference/extraction-gym/FORMAT.md``): a top-level object with ``nodes`` keyed by
node id, each ``{"op", "children": [node ids], "eclass", "cost"}``, and ``root_eclasses``. A child
names a *node*, but only its class matters: any node of that class may be chosen. Unknown
top-level fields (``class_data``, ``comment``) are ignored. Cycles are allowed: they are real in
the TENSAT dumps.

>>> p = loads('{"nodes": {"a": {"op": "x", "children": [], "eclass": "c0", "cost": 2},'
...           ' "b": {"op": "f", "children": ["a"], "eclass": "c1"}}, "root_eclasses": ["c1"]}')
>>> p.class_labels, p.node_cost.tolist(), p.roots.tolist()
(['c0', 'c1'], [2.0, 1.0], [1])
>>> loads(dumps(p)).node_labels
['a', 'b']
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from relsat.errors import EGraphFormatError
from relsat.extract import Problem

__all__ = ["EGraphFormatError", "dumps", "load", "loads", "save"]


def load(path: str | Path) -> Problem:
    """Read an egraph-serialize JSON file into a :class:`~relsat.extract.Problem`."""
    p = Path(path)
    try:
        text = p.read_bytes()
    except OSError as exc:
        raise EGraphFormatError(f"cannot read file: {exc.strerror}", path=str(p)) from exc
    return loads(text, path=str(p))


def loads(text: str | bytes, *, path: str | None = None) -> Problem:
    """Parse egraph-serialize JSON text; ``path`` only names the place in errors."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EGraphFormatError(
            f"invalid JSON: {exc.msg}", path=path, line=exc.lineno, column=exc.colno
        ) from exc
    except UnicodeDecodeError as exc:
        raise EGraphFormatError(f"not UTF-8 text: {exc.reason}", path=path) from exc

    def fail(message: str, **fields: Any) -> EGraphFormatError:
        return EGraphFormatError(message, path=path, **fields)

    if not isinstance(doc, Mapping):
        raise fail("top level is not a JSON object")
    nodes = doc.get("nodes")
    if not isinstance(nodes, Mapping):
        raise fail("missing or non-object 'nodes'", field="nodes")
    roots_raw = doc.get("root_eclasses", [])
    if not isinstance(roots_raw, list) or not all(isinstance(r, str | int) for r in roots_raw):
        raise fail("'root_eclasses' must be a list of class ids", field="root_eclasses")

    node_labels = list(nodes)
    node_index = {nid: i for i, nid in enumerate(node_labels)}
    class_index: dict[str, int] = {}
    node_class = np.empty(len(node_labels), dtype=np.int64)
    node_cost = np.empty(len(node_labels), dtype=np.float64)
    ops: list[str] = []
    raw_children: list[list[str]] = []
    for i, nid in enumerate(node_labels):
        node = nodes[nid]
        if not isinstance(node, Mapping):
            raise fail("node is not an object", node=nid)
        eclass = node.get("eclass")
        if not isinstance(eclass, str | int) or isinstance(eclass, bool):
            raise fail("missing or invalid 'eclass'", node=nid, field="eclass")
        node_class[i] = class_index.setdefault(str(eclass), len(class_index))
        cost = node.get("cost", 1.0)
        if isinstance(cost, bool) or not isinstance(cost, int | float):
            raise fail(f"'cost' is not a number: {cost!r}", node=nid, field="cost")
        if not math.isfinite(cost) or cost < 0:
            raise fail(f"'cost' must be finite and >= 0, got {cost!r}", node=nid, field="cost")
        node_cost[i] = cost
        op = node.get("op")
        if not isinstance(op, str):
            raise fail("missing or non-string 'op'", node=nid, field="op")
        ops.append(op)
        children = node.get("children", [])
        if not isinstance(children, list) or not all(isinstance(c, str) for c in children):
            raise fail("'children' must be a list of node ids", node=nid, field="children")
        raw_children.append(children)

    child_ptr = np.zeros(len(node_labels) + 1, dtype=np.int64)
    flat: list[int] = []
    for i, children in enumerate(raw_children):
        for c in children:
            j = node_index.get(c)
            if j is None:
                raise fail(f"child {c!r} is not a node id", node=node_labels[i], field="children")
            flat.append(int(node_class[j]))
        child_ptr[i + 1] = len(flat)

    roots = []
    for r in roots_raw:
        k = class_index.get(str(r))
        if k is None:
            raise fail(f"root class {str(r)!r} has no node", field="root_eclasses")
        roots.append(k)

    return Problem(
        node_class=node_class,
        node_cost=node_cost,
        child_ptr=child_ptr,
        child_idx=np.asarray(flat, dtype=np.int64),
        roots=np.asarray(roots, dtype=np.int64),
        node_labels=node_labels,
        class_labels=list(class_index),
        node_ops=ops,
    )


def dumps(problem: Problem, *, indent: int | None = None) -> str:
    """egraph-serialize JSON for ``problem``; a child names the first node of its class.

    Labels default to ``n<i>`` for nodes and ``<m>`` for classes, ops to the node label.
    """
    p = problem
    nl = p.node_labels or [f"n{i}" for i in range(p.n_nodes)]
    cl = p.class_labels or [str(m) for m in range(p.n_classes)]
    ops = p.node_ops or nl
    first = np.full(p.n_classes, -1, dtype=np.int64)
    for i in range(p.n_nodes - 1, -1, -1):
        first[p.node_class[i]] = i
    nodes: dict[str, Any] = {}
    for i in range(p.n_nodes):
        kids = p.child_idx[p.child_ptr[i] : p.child_ptr[i + 1]]
        nodes[nl[i]] = {
            "op": ops[i],
            "children": [nl[first[m]] for m in kids],
            "eclass": cl[p.node_class[i]],
            "cost": float(p.node_cost[i]),
        }
    doc = {"nodes": nodes, "root_eclasses": [cl[r] for r in p.roots]}
    return json.dumps(doc, indent=indent)


def save(problem: Problem, path: str | Path, *, indent: int | None = None) -> None:
    """Write ``problem`` to ``path`` as egraph-serialize JSON."""
    Path(path).write_text(dumps(problem, indent=indent))
