"""Cycle filtering (TENSAT's Algorithm 2): keep the e-graph acyclic so extraction needs no order
constraints.

Multi-pattern rules can make a class depend on itself (SEMANTICS.md §8). Two defences, as in TENSAT:

* **pre-filter** (multi-pattern matches, before anything is inserted): a match is refused when a
  class bound to one of its variables reaches one of the match's roots. ``sql/cycles/prefilter.sql``
  answers that once per distinct (variable class, root class) pair, not per match, with a
  recursive descendant query seeded only from those pairs and pruned by a per-class rank (a path
  down to a root only visits classes ranked above it); the full descendant closure (10⁹ pairs on
  graph-shaped DAGs of this size) is never built. ``mode="vanilla"`` computes
  the unpruned descendant set per match instead, for the paper's Table 6 ablation.
* **post-pass** (after every phase): find the cycles that remain among e-nodes reachable from the
  outputs, self-loops included (TENSAT's DFS missed them), and put the most recently added e-node of
  each on the filter list (``enode.filtered``) until none remains. Filtered e-nodes stay in the
  e-graph, are ignored by later searches and are never extracted. Input-graph e-nodes are never
  filtered (the input graph is acyclic). The post-pass is incremental: a cycle that the last
  post-pass did not see must use an edge of an e-node the phase created or re-canonicalized
  (stamped with its epoch) whose child class lies on or above a cycle; ranking the classes
  (vectorized peeling from the leaves, as for the pre-filter) tells in linear time whether any
  such edge exists, and the depth-first search runs only when one does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from relsat.engine.db import Database

__all__ = ["MODES", "prefilter", "ranks", "remove_cycles"]

#: Cycle-filtering modes of :func:`relsat.engine.explore.explore`.
MODES = ("efficient", "vanilla", "off")
#: The rank of a class that lies on (or above) a cycle: never pruned.
UNRANKED = 2**31 - 1


def ranks(db: Database) -> None:
    """Fill ``cedge`` (class → child class, e-nodes not filtered) and ``crank`` (longest path to a
    leaf; classes on or above a cycle get :data:`UNRANKED`)."""
    edges = db.run_arrow("cycles/class_edges")
    classes = db.arrow("SELECT id FROM eclass")["id"].to_numpy()
    parent, child = _unique_pairs(edges["class"].to_numpy(), edges["child"].to_numpy())
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


def prefilter(db: Database, mode: str = "efficient", mids: tuple[int, int] | None = None) -> None:
    """Refuse the multi-pattern matches whose application would close a cycle: all of them, or
    those with match ids in ``mids`` (first, last) against the class graph of the last
    :func:`ranks` (a phase applied a chunk at a time ranks once: the chunks it inserts add new
    classes only, which no existing class reaches)."""
    if mids is None:
        ranks(db)
    lo, hi = mids or (0, 2**63 - 1)
    db.run("cycles/prefilter" if mode == "efficient" else "cycles/prefilter_vanilla", lo=lo, hi=hi)


def remove_cycles(db: Database, epoch: int | None = None) -> int:
    """The post-pass: filter the newest e-node of every cycle reachable from the outputs, until
    none is left; returns how many e-nodes were put on the filter list. With ``epoch`` (the
    phase's stamp; the e-graph had no cycle reachable from the outputs before the phase) the
    search runs only if an e-node stamped ``epoch`` can be on or lead to a cycle."""
    rows = db.run_arrow("cycles/class_edges")
    node = rows["id"].to_numpy()
    cls = rows["class"].to_numpy()
    child = rows["child"].to_numpy()
    born = rows["born"].to_numpy()
    if epoch is not None:
        changed = rows["stamp"].to_numpy() == epoch
        if not changed.any():
            return 0
        classes = _ids_present(cls, child)
        rank = _longest_path(classes, cls, child)
        if not (rank[np.searchsorted(classes, child[changed])] == UNRANKED).any():
            return 0
    outputs = [r[0] for r in db.execute("SELECT class FROM output")]
    filtered: set[int] = set()
    while True:
        db.check_deadline()
        found = _cycle_nodes(node, cls, child, born, outputs, filtered, db.check_deadline)
        if not found:
            break
        filtered |= found
    if filtered:
        ids = pa.table({"id": pa.array(sorted(filtered), pa.int64())})
        with db.registered("relsat_filtered", ids):
            db.execute(
                "UPDATE enode SET filtered = true WHERE id IN (SELECT id FROM relsat_filtered)"
            )
    return len(filtered)


def _longest_path(classes: np.ndarray, parent: np.ndarray, child: np.ndarray) -> np.ndarray:
    """Rank of each class: 0 for leaves, 1 + the children's maximum otherwise; classes that never
    complete (on or above a cycle, self-loops included) get UNRANKED.

    Kahn's order from the leaves, one vectorized round per rank: round r ranks every class
    whose last child was ranked in round r - 1. ``classes`` need not be sorted.

    >>> _longest_path(np.array([0, 1, 2, 3]), np.array([1, 2, 2, 3]), np.array([0, 0, 1, 3]))
    array([         0,          1,          2, 2147483647])
    """
    n = len(classes)
    rank = np.full(n, UNRANKED, dtype=np.int64)
    if n == 0:
        return rank
    # each edge as a pair of positions in `classes`; an edge repeated (two e-nodes of a class
    # with the same child) counts once per copy in `pending` and in every decrement, so it needs
    # no deduplication
    top = max(int(classes.max()), int(parent.max(initial=0)), int(child.max(initial=0)))
    index = np.full(top + 1, -1, dtype=np.int64)
    index[classes] = np.arange(n)
    ps, cs = index[parent], index[child]
    pending = np.bincount(ps, minlength=n)  # edges to children not ranked yet, per class
    by_child = np.argsort(cs, kind="stable")
    users = ps[by_child]  # the parents of each class, grouped by child
    start = np.searchsorted(cs[by_child], np.arange(n + 1))
    frontier = np.flatnonzero(pending == 0)
    r = 0
    while frontier.size:
        rank[frontier] = r
        lo, counts = start[frontier], start[frontier + 1] - start[frontier]
        total = int(counts.sum())
        if total == 0:
            break
        # positions lo[i] .. lo[i] + counts[i] - 1 of every frontier class, concatenated
        idx = np.arange(total) + np.repeat(lo - np.cumsum(counts) + counts, counts)
        up, done = np.unique(users[idx], return_counts=True)
        pending[up] -= done
        frontier = up[pending[up] == 0]
        r += 1
    return rank


def _ids_present(*ids: np.ndarray) -> np.ndarray:
    """The distinct non-negative integers in ``ids``, sorted (``np.unique`` of their
    concatenation, without the sort: a table of the ids seen).

    >>> _ids_present(np.array([4, 1]), np.array([1, 7]))
    array([1, 4, 7])
    """
    top = max((int(a.max()) for a in ids if len(a)), default=-1)
    seen = np.zeros(top + 1, dtype=bool)
    for a in ids:
        seen[a] = True
    return np.flatnonzero(seen)


def _unique_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct pairs ``(a[i], b[i])`` of non-negative integers, sorted by ``a`` then ``b``
    (what ``np.unique(..., axis=0)`` gives, through one int64 key per pair: 45 instead of 91 ms on
    the 180,000 class edges of NasNet-A at k_multi = 3).

    >>> _unique_pairs(np.array([2, 1, 2, 1]), np.array([0, 5, 0, 3]))
    (array([1, 1, 2]), array([3, 5, 0]))
    """
    if not len(a):
        return a.astype(np.int64), b.astype(np.int64)
    if min(int(a.min()), int(b.min())) < 0:  # not class ids: the general (slower) way
        pairs = np.unique(np.stack([a, b], axis=1), axis=0)
        return pairs[:, 0], pairs[:, 1]
    base = int(b.max()) + 1
    key = np.unique(a.astype(np.int64) * base + b.astype(np.int64))
    return key // base, key % base


def _cycle_nodes(
    node: np.ndarray,
    cls: np.ndarray,
    child: np.ndarray,
    born: np.ndarray,
    outputs: list[int],
    filtered: set[int],
    check: Callable[[], None] | None = None,
) -> set[int]:
    """One depth-first pass from the outputs over the class graph (edges through e-nodes not
    yet filtered); for every cycle closed, the newest e-node on it. Empty when acyclic.
    ``check`` is called every 65,536 steps (the time limit: it raises to stop)."""
    out_edges: dict[int, list[tuple[int, int, int]]] = defaultdict(
        list
    )  # class -> (child, node, born)
    for n, c, k, b in zip(node.tolist(), cls.tolist(), child.tolist(), born.tolist(), strict=True):
        if n not in filtered:
            out_edges[c].append((k, n, b))
    state: dict[int, int] = {}  # 1 on the current path, 2 finished
    steps = 0
    chosen: set[int] = set()
    for root in outputs:
        if state.get(root):
            continue
        path: list[tuple[int, int, int]] = []  # (class, node that leads further down, born)
        stack = [(root, iter(out_edges[root]))]
        state[root] = 1
        while stack:
            steps += 1
            if check is not None and steps & 0xFFFF == 0:
                check()
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
