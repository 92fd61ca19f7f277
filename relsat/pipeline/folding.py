"""Stages ``fold`` and ``unfold``: repeated blocks explored once (:mod:`relsat.pipeline.blocks`).

``fold`` replaces the graph put in the e-graph by its folded graph (one copy per distinct
block); the price stage counts each copy's prices once per occurrence
(:meth:`~relsat.pipeline.blocks.Folding.restrict`), and ``unfold`` puts the optimized copy back
into every occurrence. The e-graph kept is the folded graph's.
"""

from __future__ import annotations

from dataclasses import replace

from relsat.pipeline.blocks import fold
from relsat.pipeline.run import Run

__all__ = ["fold_blocks", "unfold_blocks"]


def fold_blocks(run: Run) -> Run:
    """Fold ``run.graph`` as ``Options.blocks`` says (None: ``"auto"`` for an ONNX input, else
    ``"off"``). ``"auto"`` folds only a chain of layers (one tensor made inside the repeat
    crosses each cut: a transformer's hidden state, a ResNet's activation), not cells wired to
    the cell before the last (NasNet-A), whose rewrites across cuts the whole graph finds. A
    graph without repeated blocks is explored whole."""
    mode = run.options.blocks or ("auto" if run.source is not None else "off")
    if mode == "off":
        return run
    folding = fold(run.graph)
    if folding is None:
        return replace(run, blocks="none repeated")
    if mode == "auto" and folding.streams != 1:
        return replace(
            run, blocks=f"not folded ({folding.streams} tensors cross a cut between copies)"
        )
    return replace(run, folding=folding, blocks=folding.describe())


def unfold_blocks(run: Run) -> Run:
    """Put the optimized copies back into every occurrence: the whole optimized graph."""
    if run.folding is None or run.optimized is None:
        return run
    return replace(run, optimized=run.folding.unfold(run.optimized))
