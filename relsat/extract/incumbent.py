"""The best extraction found so far (:class:`Incumbent`), which every step of the ILP extractor
offers its answers to, and :class:`Frame`, the map between a sub-problem (a reduction, an
order restriction) and the caller's problem.

Keeping the incumbent in the caller's problem, checked on arrival, is what makes the extractor
anytime: whatever step runs out of time, the best checked answer is already in hand.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from relsat.errors import ExtractionError
from relsat.extract.problem import I64, Problem, _closure, dag_cost, find_cycle
from relsat.extract.reduction import Reduced

Choice = dict[int, int]


@dataclass
class Incumbent:
    """The cheapest valid choice of ``problem`` offered so far: ``cost``, ``by`` (the step that
    found it) and ``at`` (seconds after ``t0``); ``history`` one ``(at, cost, by)`` per
    improvement."""

    problem: Problem
    t0: float
    choice: Choice | None = None
    cost: float = float("inf")
    by: str = ""
    at: float = 0.0
    history: list[tuple[float, float, str]] = field(default_factory=list)

    def offer(self, choice: Choice, by: str) -> bool:
        """Keep ``choice`` if it is a valid extraction cheaper than the incumbent."""
        p = self.problem
        try:
            choice = _closure(p, choice)
        except ExtractionError:
            return False
        nodes = np.fromiter(choice.values(), dtype=I64, count=len(choice))
        classes = np.fromiter(choice.keys(), dtype=I64, count=len(choice))
        if len(nodes) and (p.forbidden[nodes].any() or (p.node_class[nodes] != classes).any()):
            return False
        cost = dag_cost(p, choice)
        if cost >= self.cost - 1e-9 * max(1.0, abs(self.cost)) or find_cycle(p, choice):
            return False
        self.choice, self.cost, self.by = choice, cost, by
        self.at = time.perf_counter() - self.t0
        self.history.append((round(self.at, 3), cost, by))
        return True


@dataclass
class Frame:
    """A sub-problem of the caller's problem: its node ``k`` is the caller's ``nodes[k]``, its
    class ``k`` the caller's ``classes[k]``."""

    problem: Problem
    nodes: np.ndarray
    classes: np.ndarray
    n_nodes: int  # of the caller's problem
    n_classes: int

    @classmethod
    def of(cls, red: Reduced, parent: Frame | None = None, size: Problem | None = None) -> Frame:
        """The frame of a reduction of ``parent`` (or of the caller's problem ``size``)."""
        if parent is None:
            assert size is not None
            return cls(red.problem, red.nodes, red.classes, size.n_nodes, size.n_classes)
        return cls(
            red.problem,
            parent.nodes[red.nodes],
            parent.classes[red.classes],
            parent.n_nodes,
            parent.n_classes,
        )

    def lift(self, choice: Choice) -> Choice:
        """A choice of the sub-problem in the caller's numbering."""
        return {int(self.classes[c]): int(self.nodes[i]) for c, i in choice.items()}

    def lower(self, choice: Choice | None) -> Choice | None:
        """A caller's choice in the sub-problem's numbering, None unless all of it is there."""
        if choice is None:
            return None
        cmap = np.full(self.n_classes, -1, dtype=I64)
        cmap[self.classes] = np.arange(len(self.classes))
        nmap = np.full(self.n_nodes, -1, dtype=I64)
        nmap[self.nodes] = np.arange(len(self.nodes))
        c = cmap[np.fromiter(choice.keys(), dtype=I64, count=len(choice))]
        n = nmap[np.fromiter(choice.values(), dtype=I64, count=len(choice))]
        if (c < 0).any() or (n < 0).any():
            return None
        return dict(zip(c.tolist(), n.tolist(), strict=True))
