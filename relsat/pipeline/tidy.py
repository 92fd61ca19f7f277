"""The ``tidy`` stage: the extracted graph written the way the runtime should see it, with the
operators extraction chose and no others.

Two rewrites, neither a fusion and neither a choice (every choice of kernel is extraction's, made
on the rules' e-graph by measured prices):

* consecutive reshapes and transposes folded (:func:`relsat.graph.replay.rebuild`: fewer nodes,
  the same values; the rules fold such chains too, but a chain that composes into the identity
  cannot be unioned with its own input in the e-graph);
* a layer norm that extraction kept apart from the residual add before it written over the 2-D
  view of its input (:mod:`relsat.graph.residuals`), so that onnxruntime does not fuse the two
  back into SkipLayerNormalization when it loads the model: where that kernel was cheaper,
  extraction would have chosen ``skiplayernorm`` (rules/transformer.rules).

It runs for an ONNX input (the runtime's fusions are what it guards against); verification, the
onnxruntime check and the timing that follow see the tidied graph.
"""

from __future__ import annotations

from dataclasses import replace

from relsat.graph import replay, residuals
from relsat.graph.graph import Graph
from relsat.pipeline.run import Run

__all__ = ["tidy"]


def tidy(run: Run) -> Run:
    """``run`` with its optimized graph tidied (see the module docstring); the same run when
    there is nothing to tidy."""
    graph = run.optimized
    if graph is None or run.source is None:
        return run
    notes, count = [], 0
    folded = replay.rebuild(graph, {})
    saved = _layout_ops(graph) - _layout_ops(folded)
    if saved > 0:
        notes.append(f"{saved} consecutive reshapes and transposes folded")
        graph, count = folded, count + saved
    apart = residuals.sites(graph)
    if apart:
        notes.append(f"{len(apart)} layer norms written apart from their residual add")
        graph, count = residuals.apart(graph, apart), count + len(apart)
    if not notes:
        return run
    return replace(run, optimized=graph, tidying="; ".join(notes), tidied=count)


def _layout_ops(graph: Graph) -> int:
    counts = graph.op_counts()
    return counts.get("reshape", 0) + counts.get("transpose", 0)
