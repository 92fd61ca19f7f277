"""The order-restricted primal search: an order of the classes around the incumbent (depth-first
from the roots, or a bottom-up sweep), and the acyclic sub-e-graph of the nodes that respect it,
solved by HiGHS without cycle cuts (:func:`order_search`)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from functools import partial
from typing import Literal

import numpy as np

from relsat.errors import ExtractionError
from relsat.extract.highs import SolverLimits, run_model
from relsat.extract.incumbent import Frame, Incumbent
from relsat.extract.model import _edges, _post_order
from relsat.extract.problem import I64, Problem, _with_forbidden
from relsat.extract.reduction import reduce

Mode = Literal["free", "guarded", "blocked"]
#: The orders of the search's rounds, in turn: two depth-first ones from the roots and the
#: bottom-up sweep (:func:`_sweep_order`). On extraction-gym's NasRNN e-graph each finds what the
#: other cannot: greedy-DAG 0.963339, guarded 0.954000, sweep 0.950939, guarded 0.944755.
ROUNDS: tuple[Mode | Literal["sweep"], ...] = ("free", "guarded", "sweep")


def _dfs_order(
    p: Problem, incumbent: dict[int, int], rng: np.random.Generator, *, mode: Mode
) -> np.ndarray:
    """A topological position per class from a depth-first search of the class graph from the
    roots (children finish first). A used class explores its incumbent node's children first,
    then the other nodes' children in random order, so unused alternatives are placed before the
    classes that may read them.

    ``mode`` says when the search may enter an unvisited used class from an alternative:
    ``free`` always (an incumbent edge may then point backwards, and the incumbent, even every
    term of a root, may be lost), ``blocked`` never (every incumbent edge stays forward, but
    most alternatives that read a used class are cut), ``guarded`` unless one of the used
    classes on the stack is an incumbent descendant of it: exactly the entries that would turn
    an incumbent edge backwards are refused, so the incumbent stays feasible with far more of
    the alternatives (extraction-gym's NasRNN e-graph, 57,710 nodes after reduction: from its
    greedy-DAG answer ``free`` strands the root, ``blocked`` leaves a sub-e-graph of 497 nodes
    in which that answer is optimal, ``guarded`` one of 23,883 whose optimum is 1 % cheaper)."""
    m = p.n_classes
    pos = np.full(m, m, dtype=I64)
    state = np.zeros(m, dtype=np.int8)  # 0 new, 1 on the stack, 2 done
    cptr, cnodes = p.class_nodes
    below = _incumbent_descendants(p, incumbent) if mode == "guarded" else {}
    bit = {c: 1 << k for k, c in enumerate(below)}
    on_stack = 0  # bit set of the used classes on the stack
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

    def refused(d: int) -> bool:
        if mode == "free" or d not in incumbent:
            return False
        return mode == "blocked" or bool(below[d] & on_stack)

    for r in p.roots.tolist():
        if state[r]:
            continue
        state[r] = 1
        on_stack |= bit.get(r, 0)
        stack = [(r, successors(r))]
        while stack:
            c, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[c], pos[c] = 2, k
                on_stack &= ~bit.get(c, 0)
                k += 1
                continue
            d, on_incumbent = nxt
            if state[d] or (not on_incumbent and refused(d)):
                continue
            state[d] = 1
            on_stack |= bit.get(d, 0)
            stack.append((d, successors(d)))
    return pos


def _sweep_order(p: Problem, incumbent: dict[int, int], rng: np.random.Generator) -> np.ndarray:
    """A topological position per class from a bottom-up sweep (Kahn's algorithm on classes;
    classes it never reaches come last): an unused class is placed as soon as one of its nodes
    has every child class placed, a used class only once its incumbent node has. The incumbent
    stays feasible and every class with an acyclic term is placed, each as early as the
    incumbent allows, where the depth-first orders of :func:`_dfs_order` place an alternative
    only where the search from the roots meets it. On extraction-gym's NasRNN e-graph the sweep
    around the guarded order's optimum (0.954000) keeps another sub-e-graph, 3,159 nodes after
    reduction, whose optimum is 0.950939. Nodes made ready by one class go in random order."""
    n, m = p.n_nodes, p.n_classes
    en, ec = _edges(p)  # distinct (node, child class) pairs
    waiting = np.bincount(en, minlength=n)  # child classes not placed yet, per node
    by_child = np.argsort(ec, kind="stable")
    ptr = np.zeros(m + 1, dtype=I64)
    np.cumsum(np.bincount(ec, minlength=m), out=ptr[1:])
    readers, bounds = en[by_child].tolist(), ptr.tolist()
    waiting_l, owner, forbidden = waiting.tolist(), p.node_class.tolist(), p.forbidden.tolist()
    pos = np.full(m, m, dtype=I64)
    placed = [False] * m
    k = 0
    ready = np.flatnonzero((waiting == 0) & ~p.forbidden)
    queue = deque(rng.permutation(ready).tolist())
    while queue:
        i = queue.popleft()
        c = owner[i]
        if placed[c] or incumbent.get(c, i) != i:  # a used class waits for its incumbent node
            continue
        placed[c], pos[c] = True, k
        k += 1
        fresh = []
        for j in readers[bounds[c] : bounds[c + 1]]:
            waiting_l[j] -= 1
            if waiting_l[j] == 0 and not forbidden[j]:
                fresh.append(j)
        if len(fresh) > 1:
            rng.shuffle(fresh)
        queue.extend(fresh)
    return pos


def _incumbent_descendants(p: Problem, incumbent: dict[int, int]) -> dict[int, int]:
    """Per used class, the bit set (bit ``k`` for the ``k``-th key of the answer, which lists
    every used class) of the used classes below it in the incumbent, itself excluded."""
    bit = {c: 1 << k for k, c in enumerate(incumbent)}
    below: dict[int, int] = {}
    for c in _post_order(p, incumbent):  # children first
        acc = 0
        for d in p.children(incumbent[c]).tolist():
            acc |= bit[d] | below[d]
        below[c] = acc
    for c in incumbent:  # used classes no root reaches (none in a closed answer)
        below.setdefault(c, 0)
    return {c: below[c] for c in incumbent}


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
    pos = _dfs_order(p, {}, np.random.default_rng(0), mode="free")
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
    answer: each round a class order around the incumbent (:data:`ROUNDS` in turn: a
    ``free`` then a ``guarded`` depth-first order, see :func:`_dfs_order` — the free order keeps
    the most alternatives where it strands nothing, the guarded one keeps the incumbent —, then
    the bottom-up :func:`_sweep_order`), the acyclic sub-e-graph of the nodes that respect it,
    reduced, and solved by HiGHS within ``limits`` (its stall limit ends a round that stopped
    improving). A sub-e-graph already solved to optimality is not solved again (a stale round).
    Every solution goes to ``best`` as it is found.
    """
    p = frame.problem
    rng = np.random.default_rng(seed)
    done = improved = stale = 0
    solved: set[bytes] = set()  # node sets of the sub-e-graphs solved to optimality
    while stale < patience and (rounds is None or done < rounds):
        if limits.deadline - time.perf_counter() <= 0:
            break
        inc = frame.lower(best.choice) or {}
        mode = ROUNDS[done % len(ROUNDS)]
        pos = _sweep_order(p, inc, rng) if mode == "sweep" else _dfs_order(p, inc, rng, mode=mode)
        q = _order_restriction(p, pos)
        done += 1
        try:
            sub = Frame.of(reduce(q), frame)
        except ExtractionError:  # this order leaves a root no acyclic term: try the next one
            stale += 1
            continue
        key = sub.nodes.tobytes()
        if key in solved:  # its optimum was offered: the incumbent is at least as good
            stale += 1
            continue
        before = best.cost
        run = run_model(
            sub.problem,
            limits,
            incumbent=partial(_lower_best, sub, best),
            offer=partial(_offer_lifted, sub, best),
            cyclic=False,
            cycle_len=0,
        )
        if run.status == "optimal":
            solved.add(key)
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
