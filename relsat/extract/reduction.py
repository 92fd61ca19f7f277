"""Reduction: what the ILP never needs to see (forbidden, self-loop, underivable, dominated
and unreachable nodes), as a smaller :class:`Problem` with the same optimum."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from relsat.extract.greedy import _no_node, _tree_best
from relsat.extract.problem import I64, Problem, _with_forbidden, reachable


class Reduced(NamedTuple):
    """A smaller problem with the same optimum; ``nodes[i]`` / ``classes[m]`` are the original
    indices of its node ``i`` / class ``m``; ``stats`` counts what each step removed."""

    problem: Problem
    nodes: np.ndarray
    classes: np.ndarray
    stats: dict[str, int]


def reduce(problem: Problem) -> Reduced:
    """Drop forbidden and self-loop nodes, nodes with a child class that has no acyclic term,
    dominated nodes and everything unreachable from the roots.

    Node ``a`` is dominated by ``b`` of the same class when ``cost[b] <= cost[a]`` and ``b``'s
    child classes are a subset of ``a``'s: swapping ``a`` for ``b`` in any extraction only removes
    class-graph edges (so it cannot create a cycle) and cannot raise the cost.
    """
    p = problem
    stats: dict[str, int] = {"nodes": p.n_nodes, "classes": p.n_classes}
    owner = np.repeat(np.arange(p.n_nodes, dtype=I64), np.diff(p.child_ptr))
    selfloop = np.zeros(p.n_nodes, dtype=bool)
    selfloop[owner[p.child_idx == p.node_class[owner]]] = True
    keep = ~p.forbidden & ~selfloop
    stats["forbidden"], stats["self_loop"] = (
        int(p.forbidden.sum()),
        int((selfloop & ~p.forbidden).sum()),
    )
    # Nodes with a child class that has no acyclic term can never be chosen.
    _, best_node = _tree_best(_with_forbidden(p, ~keep))
    derivable = best_node >= 0
    bad_child = np.zeros(p.n_nodes, dtype=bool)
    bad_child[owner[~derivable[p.child_idx]]] = True
    stats["underivable"] = int((keep & bad_child).sum())
    keep &= ~bad_child
    missing = [int(r) for r in p.roots if not derivable[r]]
    if missing:
        raise _no_node(p, missing)
    dominated = _dominated(p, keep)
    stats["dominated"] = int(dominated.sum())
    keep &= ~dominated
    reach = reachable(_with_forbidden(p, ~keep))
    keep &= reach.nodes
    classes = np.flatnonzero(reach.classes)
    nodes = np.flatnonzero(keep)
    cmap = np.full(p.n_classes, -1, dtype=I64)
    cmap[classes] = np.arange(len(classes))
    counts = np.diff(p.child_ptr)[nodes]
    ptr = np.zeros(len(nodes) + 1, dtype=I64)
    np.cumsum(counts, out=ptr[1:])
    take = np.repeat(p.child_ptr[nodes], counts) + np.arange(ptr[-1]) - np.repeat(ptr[:-1], counts)
    sub = Problem(
        node_class=cmap[p.node_class[nodes]],
        node_cost=p.node_cost[nodes],
        child_ptr=ptr,
        child_idx=cmap[p.child_idx[take]],
        roots=cmap[p.roots],
    )
    stats["kept_nodes"], stats["kept_classes"] = len(nodes), len(classes)
    return Reduced(sub, nodes, classes, stats)


def _dominated(p: Problem, keep: np.ndarray) -> np.ndarray:
    """Nodes (among ``keep``) dominated by another kept node of their class."""
    out = np.zeros(p.n_nodes, dtype=bool)
    cptr, cnodes = p.class_nodes
    sizes = np.diff(cptr)
    for c in np.flatnonzero(sizes > 1):
        members = [int(i) for i in cnodes[cptr[c] : cptr[c + 1]] if keep[i]]
        if len(members) < 2:
            continue
        # Candidates in order of (cost, #children, index): a node can only be dominated by an
        # earlier one, so ties keep the first.
        info = sorted(
            (float(p.node_cost[i]), len(s), i, s)
            for i in members
            for s in [frozenset(p.children(i).tolist())]
        )
        alive: list[tuple[float, frozenset[int]]] = []
        for w, _, i, s in info:
            if any(wb <= w and sb <= s for wb, sb in alive):
                out[i] = True
            else:
                alive.append((w, s))
    return out
