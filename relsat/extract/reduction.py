"""Reduction: what the ILP never needs to see (forbidden, self-loop, underivable, too dear,
dominated and unreachable nodes), as a smaller :class:`Problem` with the same optimum.

Every step is set-at-a-time on NumPy arrays (sorts, group-bys, frontier sweeps), so reducing an
e-graph of a million e-nodes takes seconds, whatever the size of its largest class.

>>> p = Problem.from_lists([(0, 1.0, []), (0, 2.0, []), (1, 1.0, [0]), (1, 5.0, [0, 1])], [1])
>>> r = reduce(p)
>>> r.nodes.tolist(), r.stats["dominated"], r.stats["self_loop"]
([0, 2], 1, 1)
"""

from __future__ import annotations

from itertools import combinations
from math import comb
from typing import NamedTuple

import numpy as np

from relsat.extract.greedy import _no_node
from relsat.extract.problem import I64, Problem, gather, reachable_masks, unique

#: Domination of a node with ``t`` child classes by one with ``k`` is checked when ``a`` has at
#: most this many ``k``-subsets (``comb(t, k)``): ``k`` small, or ``t - k`` small, or equal.
SUBSET_CAP = 64
#: At most this many subsets are generated in all (keeps memory and time linear).
SUBSET_BUDGET = 20_000_000


class Reduced(NamedTuple):
    """A smaller problem with the same optimum; ``nodes[i]`` / ``classes[m]`` are the original
    indices of its node ``i`` / class ``m``; ``stats`` counts what each step removed."""

    problem: Problem
    nodes: np.ndarray
    classes: np.ndarray
    stats: dict[str, int]


def reduce(problem: Problem, *, upper: float | None = None) -> Reduced:
    """Drop forbidden and self-loop nodes, nodes dearer than ``upper`` (the cost of a known
    extraction: a node that alone costs more is in no better one), nodes with a child class
    that has no acyclic term, dominated nodes and everything unreachable from the roots.

    Node ``a`` is dominated by ``b`` of the same class when ``cost[b] <= cost[a]`` and ``b``'s
    child classes are a subset of ``a``'s: swapping ``a`` for ``b`` in any extraction only removes
    class-graph edges (so it cannot create a cycle) and cannot raise the cost. Only the subsets
    found by sorting are used (see :func:`dominated`).
    """
    p = problem
    stats: dict[str, int] = {"nodes": p.n_nodes, "classes": p.n_classes}
    owner = _owners(p)
    selfloop = np.zeros(p.n_nodes, dtype=bool)
    selfloop[owner[p.child_idx == p.node_class[owner]]] = True
    keep = ~p.forbidden & ~selfloop
    stats["forbidden"] = int(p.forbidden.sum())
    stats["self_loop"] = int((selfloop & ~p.forbidden).sum())
    if upper is not None:
        dear = keep & (p.node_cost > upper * (1 + 1e-9) + 1e-12)
        stats["too_dear"] = int(dear.sum())
        keep &= ~dear
    derivable = derivable_classes(p, keep)
    bad_child = np.zeros(p.n_nodes, dtype=bool)
    bad_child[owner[~derivable[p.child_idx]]] = True
    stats["underivable"] = int((keep & bad_child).sum())
    keep &= ~bad_child
    missing = [int(r) for r in p.roots if not derivable[r]]
    if missing:
        raise _no_node(p, missing)
    dom = dominated(p, keep)
    stats["dominated"] = int(dom.sum())
    keep &= ~dom
    reach_c, reach_n = reachable_masks(p, keep)
    keep &= reach_n
    classes = np.flatnonzero(reach_c)
    nodes = np.flatnonzero(keep)
    stats["kept_nodes"], stats["kept_classes"] = len(nodes), len(classes)
    return Reduced(_subproblem(p, nodes, classes), nodes, classes, stats)


def _owners(p: Problem) -> np.ndarray:
    """The node of each ``child_idx`` entry."""
    return np.repeat(np.arange(p.n_nodes, dtype=I64), np.diff(p.child_ptr))


def _subproblem(p: Problem, nodes: np.ndarray, classes: np.ndarray) -> Problem:
    """``p`` restricted to ``nodes`` and ``classes`` (renumbered in that order)."""
    cmap = np.full(p.n_classes, -1, dtype=I64)
    cmap[classes] = np.arange(len(classes))
    counts = np.diff(p.child_ptr)[nodes]
    ptr = np.zeros(len(nodes) + 1, dtype=I64)
    np.cumsum(counts, out=ptr[1:])
    take = np.repeat(p.child_ptr[nodes], counts) + np.arange(ptr[-1]) - np.repeat(ptr[:-1], counts)
    return Problem(
        node_class=cmap[p.node_class[nodes]],
        node_cost=p.node_cost[nodes],
        child_ptr=ptr,
        child_idx=cmap[p.child_idx[take]],
        roots=cmap[p.roots],
    )


def derivable_classes(p: Problem, keep: np.ndarray) -> np.ndarray:
    """Classes that have an acyclic term using ``keep`` nodes only: the least fixpoint of "some
    kept node has every child class derivable", swept one frontier of classes at a time."""
    pending = np.diff(p.child_ptr).astype(I64)
    pptr, pnodes = p.parents
    done = np.zeros(p.n_classes, dtype=bool)
    ready = keep & (pending == 0)
    while True:
        front = unique(p.node_class[ready])
        front = front[~done[front]]
        if len(front) == 0:
            return done
        done[front] = True
        hit = np.sort(gather(pptr, pnodes, front))
        np.subtract.at(pending, hit, 1)  # fast on sorted indices
        hit = unique(hit)
        ready = np.zeros(p.n_nodes, dtype=bool)
        ready[hit[(pending[hit] == 0) & keep[hit]]] = True


def dominated(p: Problem, keep: np.ndarray) -> np.ndarray:
    """Nodes (among ``keep``) dominated by another kept node of their class, found by sorting.

    Nodes are ranked by (cost, number of distinct child classes, index); ``b`` dominates ``a`` if
    it ranks first and its child classes are a subset of ``a``'s. Checked: ``b`` with no child, and
    ``b`` with ``k`` children against every ``k``-subset of ``a``'s children where ``a`` has few
    of them (:data:`SUBSET_CAP`: one or two children, all but one or two of ``a``'s, the same
    set). Each check is a sort and a search, so the work is near-linear however large a class
    is; other subsets are missed (sound: a node not marked is simply kept).
    """
    n, m = p.n_nodes, max(p.n_classes, 1)
    owner = _owners(p)
    live = keep[owner]
    key = unique(owner[live] * m + p.child_idx[live])  # distinct (node, child class), sorted
    e_node, e_child = key // m, key % m
    nch = np.bincount(e_node, minlength=n)
    rank = np.empty(n, dtype=I64)
    rank[np.lexsort((np.arange(n), nch, p.node_cost))] = np.arange(n)
    out = np.zeros(n, dtype=bool)
    kept = np.flatnonzero(keep)
    cls = p.node_class

    # No child: the best-ranked kept leaf of a class dominates every later-ranked node of it.
    leaves = kept[nch[kept] == 0]
    best_leaf = np.full(p.n_classes, n, dtype=I64)
    np.minimum.at(best_leaf, cls[leaves], rank[leaves])
    out[kept] |= best_leaf[cls[kept]] < rank[kept]

    # b with k children against the k-subsets of the children of a, for every size of a with
    # few such subsets (k small, or a with only a few children more than b; equal sets always).
    estart = np.zeros(n + 1, dtype=I64)
    np.cumsum(nch, out=estart[1:])
    by_size = kept[np.argsort(nch[kept], kind="stable")]
    bounds = np.searchsorted(nch[by_size], np.arange(int(nch.max(initial=0)) + 2))
    sizes = [t for t in range(1, len(bounds) - 1) if bounds[t + 1] > bounds[t]]
    budget = SUBSET_BUDGET
    for k in sizes:
        b_nodes = by_size[bounds[k] : bounds[k + 1]]
        has_b = np.zeros(p.n_classes, dtype=bool)
        has_b[cls[b_nodes]] = True
        tuples = [e_child[estart[b_nodes][:, None] + np.arange(k)]]
        a_nodes = []
        for t in (t for t in sizes if t >= k and comb(t, k) <= SUBSET_CAP):
            group = by_size[bounds[t] : bounds[t + 1]]
            group = group[has_b[cls[group]]]
            if len(group) == 0 or len(group) * comb(t, k) > budget:
                continue
            budget -= len(group) * comb(t, k)
            kids = e_child[estart[group][:, None] + np.arange(t)]
            for sub in combinations(range(t), k):
                a_nodes.append(group)
                tuples.append(kids[:, sub])
        if not a_nodes:
            continue
        ids = _tuple_ids(np.concatenate(tuples), m)
        q = int(ids.max()) + 1
        an = np.concatenate(a_nodes)
        nb = len(b_nodes)
        _mark(out, cls[b_nodes] * q + ids[:nb], rank[b_nodes], cls[an] * q + ids[nb:], an, rank)
    return out & keep


def _tuple_ids(rows: np.ndarray, m: int) -> np.ndarray:
    """Dense ids of the rows of an ``(n, k)`` array of class numbers (equal rows, equal ids)."""
    ids = rows[:, 0].astype(I64)
    for j in range(1, rows.shape[1]):
        _, ids = np.unique(ids * m + rows[:, j], return_inverse=True)
    return ids.reshape(-1)


def _mark(
    out: np.ndarray,
    b_key: np.ndarray,
    b_rank: np.ndarray,
    a_key: np.ndarray,
    a_node: np.ndarray,
    rank: np.ndarray,
) -> None:
    """Mark ``a_node[k]`` when the best rank among ``b_key == a_key[k]`` is below its rank."""
    if len(b_key) == 0 or len(a_key) == 0:
        return
    order = np.lexsort((b_rank, b_key))
    keys, first = np.unique(b_key[order], return_index=True)
    best = b_rank[order][first]
    at = np.minimum(np.searchsorted(keys, a_key), len(keys) - 1)
    hit = (keys[at] == a_key) & (best[at] < rank[a_node])
    out[a_node[hit]] = True
