"""TENSAT's ILP model on HiGHS: one binary per node, root and child-cover rows, optional
big-M topological-order constraints, acyclicity cuts for cyclic class sets, and reading a
solution back into a choice."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import highspy
import numpy as np

from relsat.extract.problem import I64, Problem, _closure, unique

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
    key = unique(owner * p.n_classes + p.child_idx)
    return key // p.n_classes, key % p.n_classes


def _build(
    p: Problem, order: Order, *, at_most_one: bool = True
) -> tuple[highspy.HighsLp, np.ndarray, np.ndarray]:
    """TENSAT's model: x binary per node (then t per class with order constraints).

    ``at_most_one`` adds a row per class allowing at most one of its nodes, which only the lazy
    cycle cuts need (:class:`_Cuts` is valid for answers without extra nodes). Without cycles to
    cut the rows are left out: they change nothing of the optimum (a second node of a class is
    never needed and costs >= 0) but slow HiGHS down (the order search's first sub-e-graph of
    the NasNet-A e-graph: its optimum in 4.3 s without them, 17.3 s with them)."""
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
    if at_most_one:
        allc = np.arange(m, dtype=I64)
        r, c = _class_sum_rows(p, allc)
        model.add(r, c, 1.0, -np.inf, 1.0, m)  # at most one node per class (cycle cuts' validity)
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
        self.cptr, self.cnodes = p.class_nodes
        self.kids: dict[int, set[int]] = {}  # filled on demand: a cut touches few nodes

    def _kids(self, j: int) -> set[int]:
        if j not in self.kids:
            self.kids[j] = set(self.p.children(j).tolist())
        return self.kids[j]

    def rows(
        self, sets: Iterable[Sequence[int]], *, budget: int | None = None
    ) -> tuple[list[int], list[int], list[float]]:
        """CSR ``(starts, index, value)`` of the cuts for the sets not cut before, stopping once
        ``budget`` nonzeros are written (a cut spans every node of its classes)."""
        starts: list[int] = []
        idx: list[int] = []
        val: list[float] = []
        for s in sets:
            key = frozenset(s)
            if key in self.seen:
                continue
            if budget is not None and len(idx) >= budget:
                break
            self.seen.add(key)
            members = [
                j for c in key for j in self.cnodes[self.cptr[c] : self.cptr[c + 1]].tolist()
            ]
            exits = [j for j in members if not (self._kids(j) & key)]
            for c in key:
                own = self.cnodes[self.cptr[c] : self.cptr[c + 1]].tolist()
                starts.append(len(idx))
                coef = dict.fromkeys(exits, 1.0)
                for j in own:
                    coef[j] = coef.get(j, 0.0) - 1.0
                for j, v in coef.items():
                    if v != 0.0:
                        idx.append(j)
                        val.append(v)
        return starts, idx, val


def _short_cycles(
    p: Problem, max_len: int, limit: int, *, work: int = 500_000, deadline: float = np.inf
) -> list[list[int]]:
    """Elementary cycles of the class graph with at most ``max_len`` classes (each once, from
    its smallest class), at most ``limit`` of them, found within ``work`` path extensions and
    before ``deadline`` (a ``time.perf_counter()`` value)."""
    owner = np.repeat(p.node_class, np.diff(p.child_ptr))
    edges = unique(owner * max(p.n_classes, 1) + p.child_idx)
    src, dst = edges // max(p.n_classes, 1), edges % max(p.n_classes, 1)
    ptr = np.zeros(p.n_classes + 1, dtype=I64)
    np.cumsum(np.bincount(src, minlength=p.n_classes), out=ptr[1:])
    adj, bounds = dst.tolist(), ptr.tolist()
    out: list[list[int]] = []
    for s in range(p.n_classes):
        stack = [(s, [s])]
        while stack:
            work -= 1
            if work < 0 or (work % 4096 == 0 and time.perf_counter() > deadline):
                return out
            v, path = stack.pop()
            for w in adj[bounds[v] : bounds[v + 1]]:
                if w == s:
                    out.append(path)
                    if len(out) >= limit:
                        return out
                elif w > s and len(path) < max_len and w not in path:
                    stack.append((w, [*path, w]))
    return out


def _read_choice(p: Problem, x: np.ndarray) -> dict[int, int]:
    return _closure(p, {int(p.node_class[i]): int(i) for i in np.flatnonzero(x[: p.n_nodes] > 0.5)})
