"""Stage ``decode``: the extraction's choice of e-nodes back to a graph
(:func:`relsat.engine.decode.decode`), with the input graph's weight values."""

from __future__ import annotations

from dataclasses import replace

from relsat.engine.decode import decode as to_graph
from relsat.pipeline.run import Run

__all__ = ["decode"]


def decode(run: Run) -> Run:
    """The optimized graph (of the folded graph, with folded blocks: ``unfold`` follows)."""
    p, extraction = run.priced, run.extraction
    assert run.egraph is not None and p is not None and extraction is not None
    choice = {int(p.class_ids[c]): int(p.enode_ids[n]) for c, n in extraction.choice.items()}
    optimized = to_graph(run.egraph, choice, values=run.explored.values)
    return replace(run, choice=choice, optimized=optimized)
