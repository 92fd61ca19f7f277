"""Greedy extractors: egg's bottom-up tree cost (:func:`greedy_tree`) and extraction-gym's
faster-greedy-dag (:func:`greedy_dag`), which pays shared sub-terms once."""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence

import numpy as np

from relsat.errors import ExtractionError
from relsat.extract.problem import I64, Extraction, Problem, _closure, dag_cost, is_acyclic


def _no_node(problem: Problem, missing: Sequence[int]) -> ExtractionError:
    return ExtractionError(
        "no acyclic term for a root class (every node is forbidden or needs a cycle)",
        field="roots",
        classes=missing,
    )


def _tree_best(
    problem: Problem, weight: np.ndarray | None = None, *, height: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Knuth's generalised Dijkstra on tree cost: ``(best cost, best node)`` per class (inf / -1
    when no acyclic term exists). A node is priced only once all its child classes are final, so
    the choice is acyclic; self-loop nodes never complete. ``weight`` replaces the node costs;
    ``height`` combines children by max instead of sum (a weighted height)."""
    p = problem
    if weight is not None:
        p = Problem(p.node_class, weight, p.child_ptr, p.child_idx, p.roots, p.forbidden)
    n, m = p.n_nodes, p.n_classes
    best = np.full(m, np.inf)
    node = np.full(m, -1, dtype=I64)
    final = np.zeros(m, dtype=bool)
    pending = np.diff(p.child_ptr).copy()
    acc = np.zeros(n)
    pptr, pnodes = p.parents
    heap: list[tuple[float, int]] = []
    for i in np.flatnonzero((pending == 0) & ~p.forbidden):
        c = p.node_class[i]
        if p.node_cost[i] < best[c]:
            best[c], node[c] = p.node_cost[i], i
    heap = [(float(best[c]), int(c)) for c in np.flatnonzero(node >= 0)]
    heapq.heapify(heap)
    cost, forb, ncls = p.node_cost.tolist(), p.forbidden.tolist(), p.node_class.tolist()
    pend, accl = pending.tolist(), acc.tolist()
    bestl, nodel = best.tolist(), node.tolist()
    while heap:
        b, c = heapq.heappop(heap)
        if final[c] or b > bestl[c]:
            continue
        final[c] = True
        for i in pnodes[pptr[c] : pptr[c + 1]].tolist():
            accl[i] = max(accl[i], b) if height else accl[i] + b
            pend[i] -= 1
            if pend[i] == 0 and not forb[i]:
                g = ncls[i]
                t = cost[i] + accl[i]
                if not final[g] and t < bestl[g]:
                    bestl[g], nodel[g] = t, i
                    heapq.heappush(heap, (t, g))
    return np.array(bestl), np.array(nodel, dtype=I64)


class OutOfTime(Exception):
    """A heuristic passed its deadline (internal: the caller keeps what it has)."""


def greedy_tree(problem: Problem) -> Extraction:
    """egg's greedy extractor: per class the node of least tree cost (shared terms paid per use)."""
    t0 = time.perf_counter()
    if len(problem.roots) == 0:
        return Extraction({}, 0.0, "greedy", "heuristic", found_by="greedy")
    _, node = _tree_best(problem)
    missing = [int(r) for r in problem.roots if node[r] < 0]
    if missing:
        raise _no_node(problem, missing)
    choice = _closure(problem, {c: int(i) for c, i in enumerate(node) if i >= 0})
    return Extraction(
        choice,
        dag_cost(problem, choice),
        "greedy",
        "heuristic",
        seconds=time.perf_counter() - t0,
        found_by="greedy",
        found_at=time.perf_counter() - t0,
    )


def greedy_dag(problem: Problem, *, deadline: float | None = None) -> Extraction:
    """extraction-gym's faster-greedy-dag: per class the node whose *set* of needed nodes (its
    sub-term graph, shared nodes once) is cheapest, found by a worklist fixpoint. The root's set
    is read back; if merging children's sets produced a cycle, the tree-greedy choice is used.

    Merging sets costs up to (classes x depth), quadratic on deep e-graphs: past ``deadline``
    (a ``time.perf_counter()`` value) it gives up with the internal :class:`OutOfTime`."""
    t0 = time.perf_counter()
    p = problem
    if len(p.roots) == 0:
        return Extraction({}, 0.0, "greedy-dag", "heuristic", found_by="greedy-dag")
    cost, ncls = p.node_cost.tolist(), p.node_class.tolist()
    kids = [sorted(set(p.children(i).tolist())) for i in range(p.n_nodes)]
    pptr, pnodes = p.parents
    sets: dict[int, dict[int, int]] = {}  # class -> {class: node} of its current best sub-graph
    totals: dict[int, float] = {}
    work = [i for i in range(p.n_nodes) if not kids[i] and not p.forbidden[i]]
    queued = set(work)
    forb = p.forbidden.tolist()
    head = 0
    while head < len(work):
        i = work[head]
        head += 1
        if deadline is not None and time.perf_counter() > deadline:
            raise OutOfTime
        queued.discard(i)
        c = ncls[i]
        ks = kids[i]
        if c in ks or not all(k in sets for k in ks):
            continue
        prev = totals.get(c, np.inf)
        if ks:
            # start from the largest child set, add the others (cost of the union, not the sum)
            big = max(ks, key=lambda k: len(sets[k]))
            merged = dict(sets[big])
            for k in ks:
                if k != big:
                    merged.update(sets[k])
            if c in merged:
                continue  # this node's sub-graph would contain its own class: a cycle
            merged[c] = i
            total = sum(cost[j] for j in merged.values())
        else:
            merged, total = {c: i}, cost[i]
        if total < prev:
            sets[c], totals[c] = merged, total
            for j in pnodes[pptr[c] : pptr[c + 1]].tolist():
                if j not in queued and not forb[j]:
                    queued.add(j)
                    work.append(j)
        if head > 1_000_000 and head > len(work) // 2:  # keep the list from growing unbounded
            work, head = work[head:], 0
    missing = [int(r) for r in p.roots if int(r) not in sets]
    if missing:
        raise _no_node(p, missing)
    choice: dict[int, int] = {}
    for r in p.roots:
        for k, v in sets[int(r)].items():
            choice.setdefault(k, v)
    try:
        choice = _closure(p, choice)
        ok = is_acyclic(p, choice)
    except ExtractionError:
        ok = False
    if not ok:
        choice = greedy_tree(p).choice
    seconds = time.perf_counter() - t0
    return Extraction(
        choice,
        dag_cost(p, choice),
        "greedy-dag",
        "heuristic",
        seconds=seconds,
        found_by="greedy-dag",
        found_at=seconds,
    )
