"""Stage ``extract``: the cheapest graph in the e-graph, by ``Options.extractor``.

Extraction sees the tie-broken prices (:mod:`relsat.pipeline.price`) and, for the ILP, the input
graph as one more warm start, so its answer is never dearer than the input. Costs are then
reported on the true prices; when nothing cheaper than the input was found (ties, or a
measured model's margin), the input graph itself is the answer (method ``"input"``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from relsat.extract import Problem, dag_cost
from relsat.extract import extract as solve
from relsat.pipeline.run import Run

__all__ = ["extract", "original_choice"]


def extract(run: Run) -> Run:
    """Extract, and keep the input graph unless the answer is cheaper."""
    o, p = run.options, run.priced
    assert p is not None, "extract runs after price"
    original = original_choice(p.problem, p.born0)
    extraction = solve(p.tied, o.extractor, o.ilp, start=original)
    cost_after = dag_cost(p.problem, extraction.choice)
    # The solver's bound is on the tie-broken prices, a hair above the true ones: clamp it.
    bound = None if extraction.bound is None else min(extraction.bound, cost_after)
    extraction = replace(extraction, cost=cost_after, bound=bound)
    cost_before = dag_cost(p.problem, original)
    if extraction.cost >= cost_before and extraction.choice != original:
        # Nothing cheaper was found (ties, or a priced-out margin): keep the input graph.
        extraction = replace(
            extraction, choice=original, cost=cost_before, method="input", found_by="input"
        )
    return replace(run, extraction=extraction, cost_before=cost_before, original=original)


def original_choice(problem: Problem, born0: np.ndarray) -> dict[int, int]:
    """The input graph as a choice: every class's input-graph e-node (born 0)."""
    choice: dict[int, int] = {}
    for i in np.flatnonzero(born0).tolist():
        choice.setdefault(int(problem.node_class[i]), i)
    return choice
