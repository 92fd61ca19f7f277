"""The order-restricted primal search: a depth-first order of the classes around the incumbent,
and the acyclic sub-e-graph of the nodes that respect it, solved by HiGHS without cycle cuts
(:func:`order_search`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial

import numpy as np

from relsat.errors import ExtractionError
from relsat.extract.highs import SolverLimits, run_model
from relsat.extract.incumbent import Frame, Incumbent
from relsat.extract.problem import I64, Problem, _with_forbidden
from relsat.extract.reduction import reduce


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


def is_cyclic(p: Problem) -> bool:
    """Whether the class graph of ``p`` (through non-forbidden nodes) has a cycle: a depth-first
    order leaves some node reading a class not before its own."""
    pos = _dfs_order(p, {}, np.random.default_rng(0), block=False)
    return bool((_order_restriction(p, pos).forbidden & ~p.forbidden).any())


def order_search(
    frame: Frame,
    best: Incumbent,
    limits: SolverLimits,
    *,
    rounds: int | None,
    seed: int,
    patience: int = 3,
) -> dict[str, int]:
    """Rounds of the order-restricted search on the (reduced, cyclic) ``frame`` until
    ``limits.deadline``, ``rounds`` rounds or ``patience`` rounds in a row without a better
    answer: each round a depth-first class order around the incumbent (see :func:`_dfs_order`;
    every other round blocked so that the incumbent stays feasible), the acyclic sub-e-graph of
    the nodes that respect it, reduced, and solved by HiGHS within ``limits`` (its stall-node
    limit ends a round that stopped improving). Every solution goes to ``best`` as it is found.
    """
    p = frame.problem
    rng = np.random.default_rng(seed)
    done = improved = stale = 0
    while stale < patience and (rounds is None or done < rounds):
        if limits.deadline - time.perf_counter() <= 0:
            break
        inc = frame.lower(best.choice) or {}
        q = _order_restriction(p, _dfs_order(p, inc, rng, block=done % 2 == 1))
        done += 1
        try:
            sub = Frame.of(reduce(q), frame)
        except ExtractionError:  # this order leaves a root no acyclic term: try the next one
            stale += 1
            continue
        before = best.cost
        run_model(
            sub.problem,
            limits,
            incumbent=partial(_lower_best, sub, best),
            offer=partial(_offer_lifted, sub, best),
            cyclic=False,
            cycle_len=0,
        )
        if best.cost < before:
            improved += 1
            stale = 0
        else:
            stale += 1
    return {"search_rounds": done, "search_improved": improved}


def _lower_best(frame: Frame, best: Incumbent) -> dict[int, int] | None:
    return frame.lower(best.choice)


def _offer_lifted(frame: Frame, best: Incumbent, choice: dict[int, int]) -> bool:
    return best.offer(frame.lift(choice), "search")
