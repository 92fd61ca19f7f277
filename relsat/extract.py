"""Extraction: choose one e-node per needed e-class so that the term graph is cheapest.

The e-graph arrives as a solver-neutral :class:`Problem` of NumPy arrays (CSR child classes per
node). Three extractors: :func:`greedy_tree` (egg's bottom-up tree cost), :func:`greedy_dag`
(extraction-gym's faster-greedy-dag: shared sub-terms paid once) and :func:`ilp` (TENSAT's ILP on
HiGHS, with lazy cycle cuts instead of big-M order constraints by default). Every extractor returns
an :class:`Extraction` whose choice is acyclic and covers every child class of every chosen node.

>>> p = Problem.from_lists([(0, 1.0, []), (1, 1.0, [0]), (2, 1.0, [0, 1])], roots=[2])
>>> e = extract(p, "ilp")
>>> dict(sorted(e.choice.items())), e.cost, e.status
({0: 0, 1: 1, 2: 2}, 3.0, 'optimal')
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, NamedTuple

import highspy
import numpy as np

from relsat.errors import RelsatError

__all__ = [
    "Extraction",
    "ExtractionError",
    "Problem",
    "Reachable",
    "dag_cost",
    "extract",
    "find_cycle",
    "greedy_dag",
    "greedy_tree",
    "ilp",
    "is_acyclic",
    "reachable",
    "reduce",
]

Status = Literal["optimal", "gap", "time_limit", "heuristic"]
I64 = np.int64


class ExtractionError(RelsatError, ValueError):
    """Extraction is impossible or the problem is malformed.

    ``field`` names the bad Problem field, ``index`` the offending entry, ``solver_status`` the
    HiGHS model status when the solver failed, ``classes`` the classes involved (e.g. a root class
    with no usable node).
    """

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        index: int | None = None,
        solver_status: str | None = None,
        classes: Sequence[int] | None = None,
    ) -> None:
        self.reason = message
        self.field = field
        self.index = index
        self.solver_status = solver_status
        self.classes = None if classes is None else [int(c) for c in classes]
        where = f"{field}[{index}]" if field and index is not None else field or ""
        text = f"{where}: {message}" if where else message
        if solver_status:
            text += f" (solver status: {solver_status})"
        super().__init__(text)


@dataclass(frozen=True)
class Problem:
    """An e-graph to extract from: e-nodes with a class, a cost and child classes (CSR).

    ``child_idx[child_ptr[i]:child_ptr[i+1]]`` are the child *classes* of node ``i`` in argument
    order; ``roots`` the classes to extract; ``forbidden`` nodes are never chosen (TENSAT's
    cycle-filter list). Classes are ``0 .. n_classes-1``; a class may have no node.
    """

    node_class: np.ndarray
    node_cost: np.ndarray
    child_ptr: np.ndarray
    child_idx: np.ndarray
    roots: np.ndarray
    forbidden: np.ndarray = field(default=None)  # type: ignore[arg-type]
    node_labels: list[str] | None = None
    class_labels: list[str] | None = None
    node_ops: list[str] | None = None

    def __post_init__(self) -> None:
        def arr(name: str, dtype: Any) -> np.ndarray:
            a = np.ascontiguousarray(np.asarray(getattr(self, name)), dtype=dtype)
            if a.ndim != 1:
                raise ExtractionError(f"must be one-dimensional, has shape {a.shape}", field=name)
            object.__setattr__(self, name, a)
            return a

        try:
            nc, cost = arr("node_class", I64), arr("node_cost", np.float64)
            ptr, idx, roots = arr("child_ptr", I64), arr("child_idx", I64), arr("roots", I64)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, ExtractionError):
                raise
            raise ExtractionError(f"not a numeric array: {exc}") from exc
        n = len(nc)
        if self.forbidden is None:
            object.__setattr__(self, "forbidden", np.zeros(n, dtype=bool))
        forb = arr("forbidden", bool)
        for name, a in (("node_cost", cost), ("forbidden", forb)):
            if len(a) != n:
                raise ExtractionError(f"has {len(a)} entries for {n} nodes", field=name)
        if len(ptr) != n + 1 or ptr[0] != 0 or ptr[-1] != len(idx) or np.any(np.diff(ptr) < 0):
            raise ExtractionError("must be non-decreasing, 0 .. len(child_idx)", field="child_ptr")
        bad = np.flatnonzero(~np.isfinite(cost) | (cost < 0))
        if len(bad):
            i = int(bad[0])
            raise ExtractionError(f"cost {cost[i]} is not finite >= 0", field="node_cost", index=i)
        m = self.n_classes
        for name, a in (("node_class", nc), ("child_idx", idx), ("roots", roots)):
            bad = np.flatnonzero((a < 0) | (a >= m))
            if len(bad):
                i = int(bad[0])
                raise ExtractionError(f"class {a[i]} not in 0..{m - 1}", field=name, index=i)
        for name, labels, k in (
            ("node_labels", self.node_labels, n),
            ("class_labels", self.class_labels, None),
            ("node_ops", self.node_ops, n),
        ):
            if labels is not None and k is not None and len(labels) != k:
                raise ExtractionError(f"has {len(labels)} entries for {k}", field=name)

    @classmethod
    def from_lists(
        cls,
        nodes: Sequence[tuple[int, float, Sequence[int]]],
        roots: Sequence[int],
        forbidden: Iterable[int] = (),
    ) -> Problem:
        """A problem from ``(class, cost, child classes)`` triples (tests, examples)."""
        ptr = np.zeros(len(nodes) + 1, dtype=I64)
        ptr[1:] = np.cumsum([len(ch) for _, _, ch in nodes])
        forb = np.zeros(len(nodes), dtype=bool)
        forb[list(forbidden)] = True
        return cls(
            node_class=np.array([c for c, _, _ in nodes], dtype=I64),
            node_cost=np.array([w for _, w, _ in nodes], dtype=np.float64),
            child_ptr=ptr,
            child_idx=np.array([m for _, _, ch in nodes for m in ch], dtype=I64),
            roots=np.array(roots, dtype=I64),
            forbidden=forb,
        )

    @property
    def n_nodes(self) -> int:
        """Number of e-nodes."""
        return len(self.node_class)

    @cached_property
    def n_classes(self) -> int:
        """Number of e-classes: ``len(class_labels)``, else one more than the largest index."""
        if self.class_labels is not None:
            return len(self.class_labels)
        tops = [int(a.max()) for a in (self.node_class, self.child_idx, self.roots) if len(a)]
        return max(tops, default=-1) + 1

    def children(self, i: int) -> np.ndarray:
        """Child classes of node ``i`` in argument order."""
        return self.child_idx[self.child_ptr[i] : self.child_ptr[i + 1]]

    @cached_property
    def class_nodes(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR ``(ptr, nodes)``: the nodes of class ``m`` are ``nodes[ptr[m]:ptr[m+1]]``."""
        order = np.argsort(self.node_class, kind="stable")
        ptr = np.zeros(self.n_classes + 1, dtype=I64)
        np.cumsum(np.bincount(self.node_class, minlength=self.n_classes), out=ptr[1:])
        return ptr, order

    @cached_property
    def parents(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR ``(ptr, nodes)``: nodes having class ``m`` as a child (once per occurrence)."""
        owner = np.repeat(np.arange(self.n_nodes, dtype=I64), np.diff(self.child_ptr))
        order = np.argsort(self.child_idx, kind="stable")
        ptr = np.zeros(self.n_classes + 1, dtype=I64)
        np.cumsum(np.bincount(self.child_idx, minlength=self.n_classes), out=ptr[1:])
        return ptr, owner[order]


@dataclass(frozen=True)
class Extraction:
    """An extracted term graph: ``choice`` maps every class reachable from the roots to its node.

    ``cost`` is the DAG cost (distinct chosen nodes paid once); ``status`` is ``optimal``, ``gap``
    (stopped at the gap tolerance), ``time_limit`` (feasible answer at the time limit) or
    ``heuristic``; ``gap`` the relative gap and ``bound`` the dual bound when a solver ran;
    ``iterations`` the solver runs (1 + rounds of cycle cuts), ``cuts`` the cycle cuts added.
    """

    choice: dict[int, int]
    cost: float
    method: str
    status: Status
    gap: float | None = None
    seconds: float = 0.0
    bound: float | None = None
    iterations: int = 0
    cuts: int = 0
    stats: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Checks on a choice


class Reachable(NamedTuple):
    """Boolean masks of the classes and nodes reachable from the roots."""

    classes: np.ndarray
    nodes: np.ndarray


def reachable(problem: Problem) -> Reachable:
    """Classes and nodes reachable from the roots through non-forbidden nodes."""
    p = problem
    cptr, cnodes = p.class_nodes
    seen_c = np.zeros(p.n_classes, dtype=bool)
    seen_n = np.zeros(p.n_nodes, dtype=bool)
    stack = [int(r) for r in p.roots]
    seen_c[p.roots] = True
    while stack:
        m = stack.pop()
        for i in cnodes[cptr[m] : cptr[m + 1]]:
            if p.forbidden[i]:
                continue
            seen_n[i] = True
            for c in p.children(i):
                if not seen_c[c]:
                    seen_c[c] = True
                    stack.append(int(c))
    return Reachable(seen_c, seen_n)


def _closure(problem: Problem, choice: dict[int, int]) -> dict[int, int]:
    """``choice`` restricted to the classes the chosen term graph reaches from the roots."""
    out: dict[int, int] = {}
    stack = [int(r) for r in problem.roots]
    while stack:
        m = stack.pop()
        if m in out:
            continue
        if m not in choice:
            raise ExtractionError("chosen term graph needs a class with no choice", classes=[m])
        out[m] = i = choice[m]
        stack.extend(int(c) for c in problem.children(i) if int(c) not in out)
    return out


def dag_cost(problem: Problem, choice: dict[int, int]) -> float:
    """Sum of the costs of the distinct chosen nodes reachable from the roots."""
    sub = _closure(problem, choice)
    return float(problem.node_cost[list(sub.values())].sum()) if sub else 0.0


def find_cycle(problem: Problem, choice: dict[int, int]) -> list[int] | None:
    """A cycle of classes (``[c1, …, ck]``, ``ci → ci+1 → c1``) in the chosen term graph reachable
    from the roots, self-loops included; None if acyclic."""
    cycles = _cycles(problem, choice, first_only=True)
    return cycles[0] if cycles else None


def is_acyclic(problem: Problem, choice: dict[int, int]) -> bool:
    """Whether the chosen term graph reachable from the roots has no cycle."""
    return find_cycle(problem, choice) is None


def _cycles(problem: Problem, choice: dict[int, int], *, first_only: bool) -> list[list[int]]:
    """Cycles closed by back edges of one depth-first search from the roots (at least one per
    cyclic strongly connected component of the chosen graph)."""
    state: dict[int, int] = {}  # 1 on the stack, 2 done
    cycles: list[list[int]] = []
    for r in problem.roots:
        r = int(r)
        if r in state:
            continue
        path = [r]
        state[r] = 1
        iters = [iter(problem.children(choice[r]).tolist())]
        while iters:
            c = next(iters[-1], None)
            if c is None:
                state[path.pop()] = 2
                iters.pop()
                continue
            s = state.get(c)
            if s == 1:
                cycles.append(path[path.index(c) :])
                if first_only:
                    return cycles
            elif s is None:
                if c not in choice:
                    raise ExtractionError(
                        "chosen term graph needs a class with no choice", classes=[c]
                    )
                state[c] = 1
                path.append(c)
                iters.append(iter(problem.children(choice[c]).tolist()))
    return cycles


def check(problem: Problem, choice: dict[int, int]) -> None:
    """Raise :class:`ExtractionError` unless ``choice`` is a valid extraction of ``problem``."""
    for m, i in choice.items():
        if problem.node_class[i] != m:
            raise ExtractionError(f"node {i} is not in class {m}", field="choice", index=m)
        if problem.forbidden[i]:
            raise ExtractionError(f"node {i} is forbidden", field="choice", index=m)
    cycle = find_cycle(problem, choice)
    if cycle is not None:
        raise ExtractionError("chosen term graph has a cycle", classes=cycle)


# ---------------------------------------------------------------------------------------------
# Greedy extractors


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


def greedy_tree(problem: Problem) -> Extraction:
    """egg's greedy extractor: per class the node of least tree cost (shared terms paid per use)."""
    t0 = time.perf_counter()
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
    )


def greedy_dag(problem: Problem) -> Extraction:
    """extraction-gym's faster-greedy-dag: per class the node whose *set* of needed nodes (its
    sub-term graph, shared nodes once) is cheapest, found by a worklist fixpoint. The root's set
    is read back; if merging children's sets produced a cycle, the tree-greedy choice is used."""
    t0 = time.perf_counter()
    p = problem
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
    return Extraction(
        choice, dag_cost(p, choice), "greedy-dag", "heuristic", seconds=time.perf_counter() - t0
    )


# ---------------------------------------------------------------------------------------------
# Reduction: what the ILP never needs to see


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


def _with_forbidden(p: Problem, forbidden: np.ndarray) -> Problem:
    return Problem(p.node_class, p.node_cost, p.child_ptr, p.child_idx, p.roots, forbidden)


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


# ---------------------------------------------------------------------------------------------
# ILP (TENSAT's formulation on HiGHS)

Order = Literal["real", "int"] | None


@dataclass
class _Model:
    """Row-wise constraint matrix under construction (COO), plus column data."""

    n_cols: int
    rows: list[np.ndarray] = field(default_factory=list)
    cols: list[np.ndarray] = field(default_factory=list)
    vals: list[np.ndarray] = field(default_factory=list)
    lower: list[np.ndarray] = field(default_factory=list)
    upper: list[np.ndarray] = field(default_factory=list)
    n_rows: int = 0

    def add(self, row: np.ndarray, col: np.ndarray, val: Any, lo: Any, up: Any, k: int) -> None:
        """Add ``k`` rows; ``row`` holds row numbers relative to the first new row."""
        self.rows.append(row + self.n_rows)
        self.cols.append(col)
        self.vals.append(np.asarray(val, dtype=np.float64) * np.ones(len(col)))
        self.lower.append(np.broadcast_to(np.asarray(lo, dtype=np.float64), (k,)))
        self.upper.append(np.broadcast_to(np.asarray(up, dtype=np.float64), (k,)))
        self.n_rows += k

    def csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        r, c, v = np.concatenate(self.rows), np.concatenate(self.cols), np.concatenate(self.vals)
        order = np.argsort(r, kind="stable")
        start = np.zeros(self.n_rows + 1, dtype=np.int32)
        np.cumsum(np.bincount(r, minlength=self.n_rows), out=start[1:])
        return (
            start,
            c[order].astype(np.int32),
            v[order],
            np.concatenate(self.lower),
            np.concatenate(self.upper),
        )


def _class_sum_rows(p: Problem, cls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """COO ``(row, col)`` of ``sum_{j in e(cls[k])} x_j`` for each k."""
    cptr, cnodes = p.class_nodes
    sizes = cptr[cls + 1] - cptr[cls]
    row = np.repeat(np.arange(len(cls), dtype=I64), sizes)
    starts = np.repeat(cptr[cls], sizes)
    offs = np.arange(len(row)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return row, cnodes[starts + offs]


def _edges(p: Problem) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``(node, child class)`` pairs."""
    owner = np.repeat(np.arange(p.n_nodes, dtype=I64), np.diff(p.child_ptr))
    key = np.unique(owner * p.n_classes + p.child_idx)
    return key // p.n_classes, key % p.n_classes


def _build(p: Problem, order: Order) -> tuple[highspy.HighsLp, np.ndarray, np.ndarray]:
    """TENSAT's model: x binary per node (then t per class with order constraints)."""
    n, m = p.n_nodes, p.n_classes
    en, ec = _edges(p)
    model = _Model(n + (m if order else 0))
    k = len(p.roots)
    r, c = _class_sum_rows(p, p.roots)
    model.add(r, c, 1.0, 1.0, 1.0, k)  # root chosen
    r, c = _class_sum_rows(p, ec)
    model.add(
        np.concatenate([r, np.arange(len(en))]),
        np.concatenate([c, en]),
        np.concatenate([np.ones(len(c)), -np.ones(len(en))]),
        0.0,
        np.inf,
        len(en),
    )  # a chosen node's child classes are covered
    allc = np.arange(m, dtype=I64)
    r, c = _class_sum_rows(p, allc)
    model.add(r, c, 1.0, -np.inf, 1.0, m)  # at most one node per class (makes cycle cuts valid)
    if order:
        e = len(en)
        rows = np.concatenate([np.arange(e)] * 3)
        cols = np.concatenate([n + p.node_class[en], n + ec, en])
        if order == "real":
            big, eps = 2.0, 1.0 / (10 * m)
            lo = eps - big
        else:
            big = float(m)
            lo = 1.0 - big
        vals = np.concatenate([np.ones(e), -np.ones(e), -big * np.ones(e)])
        model.add(rows, cols, vals, lo, np.inf, e)
    start, index, value, lower, upper = model.csr()
    lp = highspy.HighsLp()
    lp.num_col_ = model.n_cols
    lp.num_row_ = model.n_rows
    lp.col_cost_ = np.concatenate([p.node_cost, np.zeros(model.n_cols - n)])
    lp.col_lower_ = np.zeros(model.n_cols)
    tmax = 1.0 if order == "real" else float(m - 1)
    lp.col_upper_ = np.concatenate([np.ones(n), np.full(model.n_cols - n, tmax)])
    kind = highspy.HighsVarType
    lp.integrality_ = [kind.kInteger] * n + [
        kind.kContinuous if order == "real" else kind.kInteger
    ] * (model.n_cols - n)
    lp.row_lower_ = lower
    lp.row_upper_ = upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = model.n_cols
    lp.a_matrix_.num_row_ = model.n_rows
    lp.a_matrix_.start_ = start
    lp.a_matrix_.index_ = index
    lp.a_matrix_.value_ = value
    return lp, en, ec


def _start_vector(p: Problem, choice: dict[int, int], order: Order) -> np.ndarray:
    """Column values of an acyclic choice; ``t`` from a post-order walk (children first)."""
    x = np.zeros(p.n_nodes + (p.n_classes if order else 0))
    x[list(choice.values())] = 1.0
    if order:
        post = _post_order(p, choice)
        for k, c in enumerate(post):
            x[p.n_nodes + c] = k / len(post) if order == "real" else k
    return x


def _post_order(p: Problem, choice: dict[int, int]) -> list[int]:
    out: list[int] = []
    done: set[int] = set()
    for r in p.roots.tolist():
        stack: list[tuple[int, bool]] = [(r, False)]
        while stack:
            c, expanded = stack.pop()
            if expanded:
                out.append(c)
                continue
            if c in done:
                continue
            done.add(c)
            stack.append((c, True))
            stack.extend((int(d), False) for d in p.children(choice[c]) if int(d) not in done)
    return out


def _sccs(p: Problem, choice: dict[int, int]) -> list[list[int]]:
    """Strongly connected components with a cycle in the chosen graph (iterative Tarjan)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    kids = {c: [int(d) for d in p.children(i)] for c, i in choice.items()}
    for root in choice:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, k = work.pop()
            if k == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on.add(v)
            if k < len(kids[v]):
                work.append((v, k + 1))
                w = kids[v][k]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in kids[v]:
                    out.append(comp)
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
    return out


class _Cuts:
    """Acyclicity cuts for class sets ``S`` (generalised subtour elimination): if a class of
    ``S`` is used, some used class of ``S`` is a sink inside ``S``, so for every ``c`` in ``S``
    ``sum(x_n: n in S, no child in S) >= sum(x_j: j in c)``. Valid for every acyclic extraction
    without unused extra nodes, which includes an optimal one."""

    def __init__(self, p: Problem) -> None:
        self.p = p
        self.seen: set[frozenset[int]] = set()
        cptr, cnodes = p.class_nodes
        self.cptr, self.cnodes = cptr.tolist(), cnodes.tolist()
        self.kids = [set(p.children(i).tolist()) for i in range(p.n_nodes)]

    def rows(self, sets: Iterable[Sequence[int]]) -> tuple[list[int], list[int], list[float]]:
        """CSR ``(starts, index, value)`` of the cuts for the sets not cut before."""
        starts: list[int] = []
        idx: list[int] = []
        val: list[float] = []
        for s in sets:
            key = frozenset(s)
            if key in self.seen:
                continue
            self.seen.add(key)
            members = [j for c in key for j in self.cnodes[self.cptr[c] : self.cptr[c + 1]]]
            exits = [j for j in members if not (self.kids[j] & key)]
            for c in key:
                own = self.cnodes[self.cptr[c] : self.cptr[c + 1]]
                starts.append(len(idx))
                coef = dict.fromkeys(exits, 1.0)
                for j in own:
                    coef[j] = coef.get(j, 0.0) - 1.0
                for j, v in coef.items():
                    if v != 0.0:
                        idx.append(j)
                        val.append(v)
        return starts, idx, val


def _short_cycles(p: Problem, max_len: int, limit: int) -> list[list[int]]:
    """Elementary cycles of the class graph with at most ``max_len`` classes (each once, from
    its smallest class), at most ``limit`` of them."""
    adj: list[set[int]] = [set() for _ in range(p.n_classes)]
    for i, c in enumerate(p.node_class.tolist()):
        adj[c].update(p.children(i).tolist())
    out: list[list[int]] = []
    for s in range(p.n_classes):
        stack = [(s, [s])]
        while stack:
            v, path = stack.pop()
            for w in adj[v]:
                if w == s:
                    out.append(path)
                    if len(out) >= limit:
                        return out
                elif w > s and len(path) < max_len and w not in path:
                    stack.append((w, [*path, w]))
    return out


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


def _read_choice(p: Problem, x: np.ndarray) -> dict[int, int]:
    return _closure(p, {int(p.node_class[i]): int(i) for i in np.flatnonzero(x[: p.n_nodes] > 0.5)})


def ilp(
    problem: Problem,
    *,
    time_limit: float = 60.0,
    mip_gap: float = 0.0,
    order: Order = None,
    warm_start: bool = True,
    threads: int | None = None,
    cycle_len: int = 6,
    search: float = 0.5,
    start: dict[int, int] | None = None,
    seed: int = 0,
    log: bool = False,
) -> Extraction:
    """TENSAT's ILP on HiGHS after :func:`reduce`, warm-started from the greedy solutions.

    Without ``order`` acyclicity is enforced lazily: when HiGHS finds a cyclic incumbent, the
    solve is interrupted, a cut is added for every cyclic component and cycle of it (see
    :class:`_Cuts`), and the model is solved again within the same ``time_limit``.
    ``order="real"``/``"int"`` adds TENSAT's big-M topological-order constraints instead.
    ``mip_gap`` is the relative gap at which to stop.

    On a cyclic e-graph, up to ``search`` × ``time_limit`` seconds go first to an order search:
    a depth-first order of the classes (see :func:`_dfs_order`) makes an acyclic sub-e-graph
    holding the incumbent, whose ILP has no cycles to cut and solves fast; the optimum becomes the
    next incumbent. The LP relaxation of the full model is very weak on cyclic e-graphs (on
    vgg.json 0.22 against 4.85: zero-cost split/concat cycles stand in for every conv), so this is
    where better answers come from; the full model then runs with what time is left, for the
    bound. ``start`` (class → node of ``problem``) is an extra warm start.
    """
    t_start = time.perf_counter()
    red = reduce(problem)
    p = red.problem
    lp, _, _ = _build(p, order)
    cut_gen = _Cuts(p)
    static = _short_cycles(p, cycle_len, 50_000) if order is None and cycle_len > 0 else []

    best: dict[int, int] | None = None
    best_cost = np.inf
    if warm_start:
        for heuristic in (greedy_dag, greedy_tree):
            e = heuristic(p)
            if e.cost < best_cost:
                best, best_cost = e.choice, e.cost
    if start is not None:
        back = {int(n): i for i, n in enumerate(red.nodes)}
        cls = {int(c): k for k, c in enumerate(red.classes)}
        mapped = {cls[c]: back[i] for c, i in start.items() if c in cls and i in back}
        try:
            sub_start = _closure(p, mapped)
            if is_acyclic(p, sub_start) and (c := dag_cost(p, sub_start)) < best_cost:
                best, best_cost = sub_start, c
        except ExtractionError:
            pass  # not a complete extraction of the reduced problem: ignore it
    rounds = improved = 0
    solver_s = best_at = 0.0
    if order is None and search > 0 and best is not None:
        rng = np.random.default_rng(seed)
        cyclic = bool(_order_restriction(p, _dfs_order(p, {}, rng, block=False)).forbidden.any())
        stop = t_start + search * time_limit
        stale = 0
        while cyclic and stale < 8 and (left := stop - time.perf_counter()) > 0:
            pos = _dfs_order(p, best, rng, block=rounds % 2 == 1)
            q = _order_restriction(p, pos)
            inner = best if not any(q.forbidden[i] for i in best.values()) else None
            e = ilp(
                q,
                time_limit=left,
                mip_gap=mip_gap,
                threads=threads,
                search=0,
                cycle_len=0,
                start=inner,
            )
            rounds += 1
            solver_s += e.seconds
            if e.cost < best_cost - 1e-12:
                best, best_cost = e.choice, e.cost
                best_at = time.perf_counter() - t_start
                improved += 1
                stale = 0
            else:
                stale += 1

    h = highspy.Highs()
    h.setOptionValue("output_flag", log)
    h.setOptionValue("mip_rel_gap", float(mip_gap))
    h.setOptionValue("mip_abs_gap", 1e-9)
    if threads is not None:
        h.setOptionValue("threads", int(threads))
    h.passModel(lp)
    pending: list[list[int]] = []
    if static:
        starts, idx, val = cut_gen.rows(static)
        k = len(starts)
        h.addRows(
            k,
            np.zeros(k),
            np.full(k, np.inf),
            len(idx),
            np.asarray(starts, dtype=np.int32),
            np.asarray(idx, dtype=np.int32),
            np.asarray(val, dtype=np.float64),
        )

    def on_solution(kind: Any, message: str, data_out: Any, data_in: Any, user: Any) -> None:
        # A cyclic incumbent would prune the tree with an invalid bound: stop and cut it off.
        choice = _read_choice(p, np.asarray(data_out.mip_solution))
        comps = _sccs(p, choice)
        if comps:
            pending.extend(comps)
            pending.extend(_cycles(p, choice, first_only=False))
            data_in.user_interrupt = True

    if order is None:
        h.setCallback(on_solution, None)
        h.startCallback(highspy.cb.HighsCallbackType.kCallbackMipImprovingSolution)
    deadline = t_start + time_limit
    bound = 0.0  # costs are >= 0
    iterations = cuts = 0
    status: Status = "optimal"
    MS = highspy.HighsModelStatus
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            status = "time_limit"
            break
        h.setOptionValue("time_limit", float(left))
        if best is not None:
            x0 = _start_vector(p, best, order)
            h.setSolution(len(x0), np.arange(len(x0), dtype=np.int32), x0)
        pending.clear()
        t0 = time.perf_counter()
        h.run()
        solver_s += time.perf_counter() - t0
        iterations += 1
        ms = h.getModelStatus()
        info = h.getInfo()
        if ms == MS.kInfeasible:
            raise ExtractionError(
                "no acyclic extraction exists", solver_status=h.modelStatusToString(ms)
            )
        if ms not in (MS.kOptimal, MS.kTimeLimit, MS.kInterrupt):
            raise ExtractionError("solver failed", solver_status=h.modelStatusToString(ms))
        if ms != MS.kInterrupt and np.isfinite(info.mip_dual_bound):
            bound = max(bound, float(info.mip_dual_bound))
        if info.primal_solution_status == 2:  # a feasible solution of the current model
            choice = _read_choice(p, np.asarray(h.getSolution().col_value))
            comps = _sccs(p, choice)
            if comps:
                pending.extend(comps)
                pending.extend(_cycles(p, choice, first_only=False))
            else:
                c = float(p.node_cost[list(choice.values())].sum())
                if c < best_cost - 1e-12:
                    best, best_cost = choice, c
                    best_at = time.perf_counter() - t_start
        if not pending:
            if ms == MS.kOptimal:
                status = "optimal" if mip_gap == 0 or info.mip_gap <= 1e-9 else "gap"
            else:
                status = "time_limit"
            break
        starts, idx, val = cut_gen.rows(pending)
        if not starts:
            raise ExtractionError("cycle cut repeated", solver_status=h.modelStatusToString(ms))
        k = len(starts)
        h.addRows(
            k,
            np.full(k, 0.0),
            np.full(k, np.inf),
            len(idx),
            np.asarray(starts, dtype=np.int32),
            np.asarray(idx, dtype=np.int32),
            np.asarray(val, dtype=np.float64),
        )
        cuts += k
    if best is None:
        raise ExtractionError(
            "no acyclic extraction within the time limit", solver_status="time limit"
        )
    choice = {int(red.classes[c]): int(red.nodes[i]) for c, i in best.items()}
    cost = dag_cost(problem, choice)
    bound = min(bound, cost)
    gap = (cost - bound) / cost if cost > 0 else 0.0
    return Extraction(
        choice,
        cost,
        "ilp" if order is None else f"ilp-order-{order}",
        status,
        gap=gap,
        seconds=solver_s,
        bound=bound,
        iterations=iterations,
        cuts=cuts,
        stats={
            **red.stats,
            "search_rounds": rounds,
            "search_improved": improved,
            "best_found_at": best_at,
            "total_seconds": time.perf_counter() - t_start,
        },
    )


EXTRACTORS: dict[str, Callable[..., Extraction]] = {
    "greedy": greedy_tree,
    "greedy-dag": greedy_dag,
    "ilp": ilp,
}


def extract(problem: Problem, method: str = "ilp", **kw: Any) -> Extraction:
    """Run the extractor named ``method`` (``greedy``, ``greedy-dag`` or ``ilp``)."""
    try:
        fn = EXTRACTORS[method]
    except KeyError:
        raise ExtractionError(
            f"unknown method {method!r}; use one of {sorted(EXTRACTORS)}"
        ) from None
    return fn(problem, **kw)
