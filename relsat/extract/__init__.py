"""Extraction: choose one e-node per needed e-class so that the term graph is cheapest.

The e-graph arrives as a solver-neutral :class:`Problem` of NumPy arrays (CSR child classes per
node). Three extractors: :func:`greedy_tree` (egg's bottom-up tree cost), :func:`greedy_dag`
(extraction-gym's faster-greedy-dag: shared sub-terms paid once) and :func:`ilp` (TENSAT's ILP on
HiGHS, with lazy cycle cuts instead of big-M order constraints by default). Every extractor returns
an :class:`Extraction` whose choice is acyclic and covers every child class of every chosen node;
it says which step found the answer (``found_by``), when (``found_at``) and, for the ILP, the
proven lower bound (``bound``). The ILP is anytime: at its time limit it returns the best answer
found, never one dearer than the greedy extractors' or its ``start``.

Modules: ``problem`` (Problem, Extraction, checks on a choice), ``greedy`` (the greedy
extractors), ``reduction`` (what the ILP never needs to see, sort-based), ``model`` (the HiGHS
model and its cycle cuts), ``highs`` (one anytime HiGHS solve), ``incumbent`` (the best answer
so far, and sub-problem numbering), ``search`` (the order-restricted primal search) and
``solve`` (:func:`ilp`).

>>> p = Problem.from_lists([(0, 1.0, []), (1, 1.0, [0]), (2, 1.0, [0, 1])], roots=[2])
>>> e = extract(p, "ilp")
>>> dict(sorted(e.choice.items())), e.cost, e.status, e.bound
({0: 0, 1: 1, 2: 2}, 3.0, 'optimal', 3.0)
"""

from __future__ import annotations

from collections.abc import Callable

from relsat.errors import ExtractionError
from relsat.extract.greedy import greedy_dag, greedy_tree
from relsat.extract.model import Order as Order
from relsat.extract.problem import (
    Extraction,
    Problem,
    Reachable,
    check,
    dag_cost,
    find_cycle,
    is_acyclic,
    reachable,
)
from relsat.extract.problem import Status as Status
from relsat.extract.reduction import Reduced as Reduced
from relsat.extract.reduction import reduce
from relsat.extract.search import _dfs_order as _dfs_order
from relsat.extract.search import _order_restriction as _order_restriction
from relsat.extract.search import _sweep_order as _sweep_order
from relsat.extract.solve import IlpOptions, ilp

__all__ = [
    "Extraction",
    "ExtractionError",
    "IlpOptions",
    "Problem",
    "Reachable",
    "check",
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


EXTRACTORS: dict[str, Callable[..., Extraction]] = {
    "greedy": greedy_tree,
    "greedy-dag": greedy_dag,
    "ilp": ilp,
}


def extract(
    problem: Problem,
    method: str = "ilp",
    options: IlpOptions | None = None,
    *,
    start: dict[int, int] | None = None,
) -> Extraction:
    """Run the extractor named ``method`` (``greedy``, ``greedy-dag`` or ``ilp``); the ILP with
    ``options`` and the warm start ``start`` (a class → node choice), which the greedy
    extractors do not use."""
    try:
        fn = EXTRACTORS[method]
    except KeyError:
        raise ExtractionError(
            f"unknown method {method!r}; use one of {sorted(EXTRACTORS)}"
        ) from None
    if fn is ilp:
        return ilp(problem, options, start=start)
    return fn(problem)
