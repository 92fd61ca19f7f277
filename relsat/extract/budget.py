"""The ILP extractor's default time budget: it grows with the model HiGHS solves, instead of one
flat limit that a small e-graph never needs and a large one always runs out.

Measured on a 2-core VM (HiGHS 1.16, the extraction models after :func:`~relsat.extract.reduce`):
models of 100-1,700 nodes (the TENSAT benchmarks, transformer exports with the neutral rules
bounded) solve to optimality in 0.02-1.8 s, models of 5,000 nodes in about 3 s, the 43,000-node
model of a Llama export whose e-graph filled the 50,000 e-node limit in 14-25 s, and a
49,000-node GPT-2 one proves no bound in 60 s. The budget leaves each about three times what it
took; an extraction stops earlier whenever its answer is proven optimal (status ``optimal``, or
``input_optimal`` when the input graph is the answer).

>>> time_budget(0), time_budget(1_500), time_budget(10**6)
(5.0, 6.5, 60.0)
"""

from __future__ import annotations

__all__ = ["BASE_SECONDS", "MAX_SECONDS", "SECONDS_PER_NODE", "time_budget"]

#: Seconds every extraction may take (reduction, greedy warm starts, a first HiGHS run).
BASE_SECONDS = 5.0
#: ... plus this much per node of the reduced extraction model.
SECONDS_PER_NODE = 1e-3
#: ... and never more than this.
MAX_SECONDS = 60.0


def time_budget(n_nodes: int) -> float:
    """Seconds for the ILP extractor on a reduced model of ``n_nodes`` nodes."""
    return min(MAX_SECONDS, BASE_SECONDS + SECONDS_PER_NODE * max(n_nodes, 0))
