"""The extraction problem and its answer: :class:`Problem` (an e-graph as NumPy arrays),
:class:`Extraction`, and the checks every extractor's choice must pass (reachability, DAG cost,
cycles)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, NamedTuple

import numpy as np

from relsat.errors import ExtractionError

Status = Literal["optimal", "input_optimal", "gap", "time_limit", "work_limit", "heuristic"]
I64 = np.int64


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

    ``cost`` is the DAG cost (distinct chosen nodes paid once); ``status`` is ``optimal``,
    ``input_optimal`` (the answer is the extractor's ``start``, the input graph, and a proven bound
    shows that nothing in the e-graph is cheaper, within the gap tolerance), ``gap``
    (stopped at the gap tolerance), ``time_limit`` (best answer found when the time ran out),
    ``work_limit`` (best answer when a node or round limit stopped the solver) or ``heuristic``;
    ``bound`` is a proven lower bound on the optimum (0 when nothing was proven) and ``gap`` the
    relative gap ``(cost - bound) / cost`` when a solver ran; ``found_by`` names the step that
    produced the answer (``greedy``, ``greedy-dag``, ``start``, ``search``, ``ilp``, …) and
    ``found_at`` the seconds from the start of the extraction when it was found; ``seconds`` is
    the whole extraction's wall time (reduction, heuristics and solves); ``iterations`` the
    solver runs, ``cuts`` the cycle cuts added.
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
    found_by: str = ""
    found_at: float = 0.0


# ---------------------------------------------------------------------------------------------
# Checks on a choice


class Reachable(NamedTuple):
    """Boolean masks of the classes and nodes reachable from the roots."""

    classes: np.ndarray
    nodes: np.ndarray


def reachable(problem: Problem) -> Reachable:
    """Classes and nodes reachable from the roots through non-forbidden nodes."""
    return Reachable(*reachable_masks(problem, ~problem.forbidden))


def reachable_masks(p: Problem, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Classes and ``keep`` nodes reachable from the roots through ``keep`` nodes (a frontier
    sweep: one CSR gather per level)."""
    cptr, cnodes = p.class_nodes
    seen_c = np.zeros(p.n_classes, dtype=bool)
    seen_n = np.zeros(p.n_nodes, dtype=bool)
    front = unique(p.roots)
    while len(front):
        seen_c[front] = True
        nodes = gather(cptr, cnodes, front)
        nodes = nodes[keep[nodes]]
        seen_n[nodes] = True
        kids = unique(gather(p.child_ptr, p.child_idx, nodes))
        front = kids[~seen_c[kids]]
    return seen_c, seen_n


def unique(a: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``a``. A sort and a mask: NumPy 2's ``np.unique`` without
    ``return_inverse`` hashes, measured 160x slower on 3M int64 values."""
    a = np.sort(a)
    if len(a) > 1:
        a = a[np.concatenate([[True], a[1:] != a[:-1]])]
    return a


def gather(ptr: np.ndarray, items: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``items[ptr[k]:ptr[k+1]]`` for every ``k`` in ``keys``, concatenated (one CSR gather)."""
    sizes = ptr[keys + 1] - ptr[keys]
    total = int(sizes.sum())
    if total == 0:
        return np.zeros(0, dtype=items.dtype)
    starts = np.repeat(ptr[keys] - (np.cumsum(sizes) - sizes), sizes)
    return items[starts + np.arange(total)]


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


def _with_forbidden(p: Problem, forbidden: np.ndarray) -> Problem:
    return Problem(p.node_class, p.node_cost, p.child_ptr, p.child_idx, p.roots, forbidden)
