"""The order-restricted primal search: a depth-first order of the classes around the incumbent,
and the acyclic sub-e-graph of the nodes that respect it (solved by :func:`~relsat.extract.ilp`
without cycle cuts)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from relsat.extract.problem import I64, Problem, _with_forbidden


def _dfs_order(
    p: Problem, incumbent: dict[int, int], rng: np.random.Generator, *, block: bool
) -> np.ndarray:
    """A topological position per class from a depth-first search of the class graph from the
    roots (children finish first). A used class explores its incumbent node's children first,
    then the other nodes' children in random order, so unused alternatives are placed before the
    classes that may read them. With ``block`` the search never enters an unvisited used class
    from an alternative, which keeps every incumbent edge forward (the incumbent stays feasible)."""
    m = p.n_classes
    pos = np.full(m, m, dtype=I64)
    state = np.zeros(m, dtype=np.int8)  # 0 new, 1 on the stack, 2 done
    cptr, cnodes = p.class_nodes
    k = 0

    def successors(c: int) -> Iterator[tuple[int, bool]]:
        own = incumbent.get(c)
        if own is not None:
            yield from ((int(d), True) for d in p.children(own))
        nodes = cnodes[cptr[c] : cptr[c + 1]].tolist()
        rng.shuffle(nodes)
        for i in nodes:
            if i != own:
                yield from ((int(d), False) for d in p.children(i))

    for r in p.roots.tolist():
        if state[r]:
            continue
        state[r] = 1
        stack = [(r, successors(r))]
        while stack:
            c, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[c], pos[c] = 2, k
                k += 1
                continue
            d, on_incumbent = nxt
            if state[d] or (block and not on_incumbent and d in incumbent):
                continue
            state[d] = 1
            stack.append((d, successors(d)))
    return pos


def _order_restriction(p: Problem, pos: np.ndarray) -> Problem:
    """``p`` with every node forbidden that reads a class not strictly before its own: an
    acyclic sub-e-graph, so any of its extractions is acyclic."""
    owner = np.repeat(np.arange(p.n_nodes, dtype=I64), np.diff(p.child_ptr))
    back = np.zeros(p.n_nodes, dtype=bool)
    back[owner[pos[p.child_idx] >= pos[p.node_class[owner]]]] = True
    return _with_forbidden(p, p.forbidden | back)
