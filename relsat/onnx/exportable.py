"""What the exporter can write: the e-nodes an extraction must never choose for an ONNX model.

:mod:`relsat.onnx.exporter` writes a *weight-only* subgraph (all of its leaves weights or scalars)
as initializers it computes, and every other op as ONNX nodes — with two exceptions:

* ``merge`` (TASO's merge_gconv) has no ONNX operator: it is written only as a computed
  initializer, so its input must be weight-only. TASO's merge rules match any conv weight, and a
  weight can be computed at run time (an opaque operator, a graph input): then the merged conv is
  in the e-graph but cannot be written.
* a merged weight's value depends on the group count of the conv that reads it (a lazy value,
  :class:`relsat.graph.kernels.Lazy`): it may pass through concat, split and enlarge, and only a
  conv's weight may read it.

:func:`unexportable` finds, per e-node of an e-graph, the e-nodes breaking either rule;
:func:`relsat.engine.problem.egraph_problem` forbids them, so the extractor only offers terms the
exporter writes. A class counts as weight-only only when every e-node in it is (whatever the
extractor chooses there is weight-only), so the test is safe, never optimistic.

>>> ops = np.array(["input", "weight", "merge", "merge", "conv2d"])
>>> node_class = np.array([0, 1, 2, 3, 4])  # merge(input), merge(weight), conv(input, merge(w))
>>> child_ptr, child_idx = np.array([0, 0, 0, 1, 2, 4]), np.array([0, 1, 0, 3])
>>> unexportable(ops, node_class, child_ptr, child_idx, 5).tolist()
[False, False, True, False, False]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import numpy as np

from relsat.extract.problem import Problem

__all__ = [
    "MERGED_READERS",
    "NEVER_FOLDED",
    "SHAPE_ONLY",
    "WEIGHT_ONLY",
    "exportable_only",
    "unexportable",
]

#: Ops the exporter never computes as initializers (their value exists only at run time).
NEVER_FOLDED = frozenset({"input", "opaque", "noop"})
#: Ops the exporter writes only as computed initializers: their inputs must be weight-only.
WEIGHT_ONLY = frozenset({"merge"})
#: Arguments of which only the shape is read (enlarge pads to its reference's kernel size).
SHAPE_ONLY: dict[str, frozenset[int]] = {"enlarge": frozenset({1})}
#: Arguments that may read a merged weight, by op (None: all); those that carry it on are the
#: same less the conv weights (e-graph spelling: a split is a pair, split_0 / split_1 its pieces).
MERGED_READERS: dict[str, frozenset[int] | None] = {
    "conv2d": frozenset({1}),
    "conv2d_bias": frozenset({1}),
    "concat": None,
    "split": frozenset({0}),
    "split_0": frozenset({0}),
    "split_1": frozenset({0}),
    "enlarge": frozenset({0, 1}),
}
_MERGED_CARRIERS = {"concat", "split", "split_0", "split_1", "enlarge"}


def unexportable(
    ops: Sequence[str] | np.ndarray,
    node_class: np.ndarray,
    child_ptr: np.ndarray,
    child_idx: np.ndarray,
    n_classes: int,
    forbidden: np.ndarray | None = None,
) -> np.ndarray:
    """Per e-node: whether choosing it can give a graph the exporter cannot write.

    ``ops``: each e-node's op; ``node_class``: its class; ``child_idx[child_ptr[i]:child_ptr[i +
    1]]``: its child classes in argument order (the CSR arrays of
    :class:`relsat.extract.problem.Problem`); ``forbidden``: e-nodes never chosen anyway.
    """
    n = len(ops)
    bad = np.zeros(n, dtype=bool)
    names: dict[str, int] = {}
    code = np.fromiter((names.setdefault(op, len(names)) for op in ops), dtype=np.int64, count=n)

    def among(kinds: Iterable[str]) -> np.ndarray:
        """Which e-nodes have one of the ops ``kinds``."""
        return np.isin(code, [names[k] for k in kinds if k in names])

    allowed = np.ones(n, dtype=bool) if forbidden is None else ~np.asarray(forbidden, dtype=bool)
    merges = among(WEIGHT_ONLY) & allowed
    if not merges.any():  # (most e-graphs: nothing to check)
        return bad
    parent = np.repeat(np.arange(n), np.diff(child_ptr))  # the e-node of each child slot
    position = np.arange(len(child_idx)) - child_ptr[parent]
    # Classes not weight-only: reached from a run-time leaf through the values e-nodes read.
    shape_only = np.zeros(len(child_idx), dtype=bool)
    for op, args in SHAPE_ONLY.items():
        shape_only |= among([op])[parent] & np.isin(position, list(args))
    reads = allowed[parent] & ~shape_only
    seeds = np.unique(node_class[allowed & among(NEVER_FOLDED)])
    run_time = _reached(seeds, child_idx[reads], node_class[parent[reads]], n_classes)
    bad[parent[merges[parent] & run_time[child_idx]]] = True
    # Classes that may hold a merged weight: a merge, and what concat, split, enlarge make of it.
    ok = allowed & ~bad
    carried = (ok & among(_MERGED_CARRIERS))[parent] & ~shape_only
    seeds = np.unique(node_class[ok & merges])
    merged = _reached(seeds, child_idx[carried], node_class[parent[carried]], n_classes)
    may_read = np.zeros(len(child_idx), dtype=bool)
    for op, readers in MERGED_READERS.items():
        at = among([op])[parent]
        may_read |= at if readers is None else at & np.isin(position, list(readers))
    bad[parent[merged[child_idx] & ~may_read]] = True
    return bad


def _reached(seeds: np.ndarray, src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """Which of ``n`` classes the edges ``src[i] -> dst[i]`` reach from ``seeds`` (seeds
    included): a breadth-first search, one NumPy step per level."""
    order = np.argsort(src, kind="stable")
    targets = dst[order]
    ptr = np.searchsorted(src[order], np.arange(n + 1))
    seen = np.zeros(n, dtype=bool)
    seen[seeds] = True
    frontier = np.asarray(seeds, dtype=np.int64)
    while len(frontier):
        starts, ends = ptr[frontier], ptr[frontier + 1]
        counts = ends - starts
        if not counts.sum():
            break
        offsets = np.repeat(starts - np.cumsum(counts) + counts, counts)
        nxt = targets[np.arange(counts.sum()) + offsets]
        nxt = np.unique(nxt[~seen[nxt]])
        seen[nxt] = True
        frontier = nxt
    return seen


def exportable_only(
    problem: Problem, ops: Sequence[str] | np.ndarray, spelled: Iterable[str] = ()
) -> Problem:
    """``problem`` with what the exporter cannot write forbidden too (``ops``: each problem
    node's operator), so that every extraction of it exports; and the fused ops ``spelled``,
    which it writes spelled out (:func:`relsat.onnx.exporter.spelled_out`), so that none is
    chosen at its fused kernel's price and run as the spelling."""
    bad = np.isin(np.asarray(ops), list(spelled)) | unexportable(
        ops,
        problem.node_class,
        problem.child_ptr,
        problem.child_idx,
        problem.n_classes,
        problem.forbidden,
    )
    return dataclasses.replace(problem, forbidden=problem.forbidden | bad)
