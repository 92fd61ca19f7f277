"""Rebuild: union-find plus congruence closure to a fixpoint, incrementally.

Each round takes the pending unions, computes their connected components (through Arrow, in
NumPy: the edge lists are small, and a pointer-jumping loop in SQL would cost one statement per
jump), writes the old → new mapping back as one table, and lets ``sql/rebuild`` re-canonicalize
only the e-nodes that mention a merged-away class. Those e-nodes are then checked for congruence
with the rest; new collisions are the next round's unions.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa

from relsat.engine.db import Database

__all__ = ["Rebuilt", "components", "rebuild"]


class Rebuilt(NamedTuple):
    """What one rebuild did: e-classes merged away, e-nodes removed as duplicates of congruent
    ones (what congruence merged away)."""

    unions: int
    removed: int


def components(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union ``a[i]`` with ``b[i]``; returns ``(old, new)``: every non-root id and its root.

    The root of a component is its smallest id.

    >>> components(np.array([5, 7, 2]), np.array([7, 9, 1]))
    (array([2, 7, 9]), array([1, 5, 5]))
    """
    ids, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)
    parent = np.arange(len(ids))
    ia, ib = inverse[: len(a)], inverse[len(a) :]
    while True:  # label propagation: every id takes the smallest label among its neighbours
        low = np.minimum(parent[ia], parent[ib])
        new = parent.copy()
        np.minimum.at(new, ia, low)
        np.minimum.at(new, ib, low)
        new = new[new]  # pointer jumping
        if np.array_equal(new, parent):
            break
        parent = new
    moved = parent != np.arange(len(ids))
    return ids[moved], ids[parent[moved]]


def rebuild(db: Database, epoch: int, *, facts: bool = True) -> Rebuilt:
    """Process ``pending`` to a fixpoint; returns how many classes were merged away and how many
    e-nodes were removed. ``facts``: whether table ``fact`` may hold anything to merge."""
    merged = 0
    edges = db.run_arrow("rebuild/pending_edges")
    while edges.num_rows:
        old, new = components(edges["a"].to_numpy(), edges["b"].to_numpy())
        db.execute("DELETE FROM remap")
        db.insert_arrow(
            "remap", pa.table({"old": pa.array(old, pa.int64()), "new": pa.array(new, pa.int64())})
        )
        if facts and db.scalar(
            "SELECT EXISTS (SELECT 1 FROM fact WHERE class IN (SELECT old FROM remap))"
        ):
            db.run("rebuild/merge_facts")  # (the root's own facts stay as they are)
        db.run("rebuild/apply_remap", epoch=epoch)
        merged += len(old)
        ((found,),) = db.run("rebuild/congruence", epoch=epoch)
        # the next round's unions, fetched only when congruence found some
        edges = db.run_arrow("rebuild/pending_edges") if found else edges.slice(0, 0)
    if not merged:  # new e-nodes were hash-consed when built: without unions none is a duplicate
        return Rebuilt(0, 0)
    ((removed,),) = db.run("rebuild/dedupe", epoch=epoch)
    return Rebuilt(merged, int(removed))
