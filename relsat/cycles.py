"""Cycle filtering (TENSAT's Algorithm 2): keep the e-graph acyclic so extraction needs no order
constraints.

Multi-pattern rules can make a class depend on itself (SEMANTICS.md §8). Two defences, as in TENSAT:

* **pre-filter** (multi-pattern matches, before anything is inserted): a match is refused when a
  class bound to one of its variables reaches one of the match's roots. ``sql/cycles/prefilter.sql``
  answers that with a recursive descendant query seeded only from the candidate pairs and pruned by
  a per-class rank (a path down to a root only visits classes ranked above it); the full descendant
  closure (10⁹ pairs on graph-shaped DAGs of this size) is never built. ``mode="vanilla"`` computes
  the unpruned descendant set per match instead, for the paper's Table 6 ablation.
* **post-pass** (after every phase): find the cycles that remain among e-nodes reachable from the
  outputs, self-loops included (TENSAT's DFS missed them), and put the most recently added e-node of
  each on the filter list (``enode.filtered``) until none remains. Filtered e-nodes stay in the
  e-graph, are ignored by later searches and are never extracted. Input-graph e-nodes are never
  filtered (the input graph is acyclic).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow as pa

from relsat.db import Database

__all__ = ["MODES", "prefilter", "ranks", "remove_cycles"]

#: Cycle-filtering modes of :func:`relsat.explore.explore`.
MODES = ("efficient", "vanilla", "off")
#: The rank of a class that lies on (or above) a cycle: never pruned.
UNRANKED = 2**31 - 1


def ranks(db: Database) -> None:
    """Fill ``cedge`` (class → child class, e-nodes not filtered) and ``crank`` (longest path to a
    leaf; classes on or above a cycle get :data:`UNRANKED`)."""
    edges = db.arrow("SELECT DISTINCT class, child FROM (" + _class_edges(db) + ")")
    classes = db.arrow("SELECT id FROM eclass")["id"].to_numpy()
    parent = edges["class"].to_numpy()
    child = edges["child"].to_numpy()
    rank = _longest_path(classes, parent, child)
    db.execute("DELETE FROM cedge")
    db.execute("DELETE FROM crank")
    db.insert_arrow(
        "cedge",
        pa.table({"class": pa.array(parent, pa.int64()), "child": pa.array(child, pa.int64())}),
    )
    db.insert_arrow(
        "crank",
        pa.table({"class": pa.array(classes, pa.int64()), "rank": pa.array(rank, pa.int64())}),
    )


def prefilter(db: Database, mode: str = "efficient") -> None:
    """Refuse the multi-pattern matches whose application would close a cycle."""
    ranks(db)
    db.run("cycles/prefilter" if mode == "efficient" else "cycles/prefilter_vanilla")


def remove_cycles(db: Database) -> int:
    """The post-pass: filter the newest e-node of every cycle reachable from the outputs, until
    none is left; returns how many e-nodes were put on the filter list."""
    rows = db.arrow(_class_edges(db))
    node = rows["id"].to_numpy()
    cls = rows["class"].to_numpy()
    child = rows["child"].to_numpy()
    born = rows["born"].to_numpy()
    outputs = [r[0] for r in db.execute("SELECT class FROM output")]
    filtered: set[int] = set()
    while True:
        found = _cycle_nodes(node, cls, child, born, outputs, filtered)
        if not found:
            break
        filtered |= found
    if filtered:
        ids = pa.table({"id": pa.array(sorted(filtered), pa.int64())})
        db.con.register("relsat_filtered", ids)
        try:
            db.execute(
                "UPDATE enode SET filtered = true WHERE id IN (SELECT id FROM relsat_filtered)"
            )
        finally:
            db.con.unregister("relsat_filtered")
    return len(filtered)


def _class_edges(db: Database) -> str:
    from relsat.db import _strip_comments, sql_text

    return _strip_comments(sql_text("cycles/class_edges")).strip().rstrip(";")


def _longest_path(classes: np.ndarray, parent: np.ndarray, child: np.ndarray) -> np.ndarray:
    """Rank of each class: 0 for leaves, 1 + the children's maximum otherwise (Kahn's order);
    classes that never complete (on or above a cycle) get UNRANKED."""
    index = {int(c): i for i, c in enumerate(classes)}
    pi = np.array([index[int(p)] for p in parent], dtype=np.int64)
    ci = np.array([index[int(c)] for c in child], dtype=np.int64)
    pending = np.bincount(pi, minlength=len(classes))  # children not ranked yet, per class
    users: dict[int, list[int]] = defaultdict(list)
    for p, c in zip(pi.tolist(), ci.tolist(), strict=True):
        users[c].append(p)
    rank = np.zeros(len(classes), dtype=np.int64)
    ready = [i for i in range(len(classes)) if pending[i] == 0]
    done = np.zeros(len(classes), dtype=bool)
    while ready:
        i = ready.pop()
        done[i] = True
        for p in users[i]:
            rank[p] = max(rank[p], rank[i] + 1)
            pending[p] -= 1
            if pending[p] == 0:
                ready.append(p)
    rank[~done] = UNRANKED
    return rank


def _cycle_nodes(
    node: np.ndarray,
    cls: np.ndarray,
    child: np.ndarray,
    born: np.ndarray,
    outputs: list[int],
    filtered: set[int],
) -> set[int]:
    """One depth-first pass from the outputs over the class graph (edges through e-nodes not
    yet filtered); for every cycle closed, the newest e-node on it. Empty when acyclic."""
    out_edges: dict[int, list[tuple[int, int, int]]] = defaultdict(
        list
    )  # class -> (child, node, born)
    for n, c, k, b in zip(node.tolist(), cls.tolist(), child.tolist(), born.tolist(), strict=True):
        if n not in filtered:
            out_edges[c].append((k, n, b))
    state: dict[int, int] = {}  # 1 on the current path, 2 finished
    chosen: set[int] = set()
    for root in outputs:
        if state.get(root):
            continue
        path: list[tuple[int, int, int]] = []  # (class, node that leads further down, born)
        stack = [(root, iter(out_edges[root]))]
        state[root] = 1
        while stack:
            c, edges = stack[-1]
            step = next(edges, None)
            if step is None:
                state[c] = 2
                stack.pop()
                if path:
                    path.pop()
                continue
            k, n, b = step
            if n in chosen:
                continue
            if state.get(k) == 1:  # k is on the path (k == c: a self-loop): a cycle
                start = next((i for i, (pc, _, _) in enumerate(path) if pc == k), len(path))
                cycle = [(pn, pb) for _, pn, pb in path[start:]] + [(n, b)]
                newest = max((pn for pn, pb in cycle if pb > 0), default=None)
                if newest is not None:
                    chosen.add(newest)
                continue
            if state.get(k) == 2:
                continue
            state[k] = 1
            path.append((c, n, b))
            stack.append((k, iter(out_edges[k])))
    return chosen
