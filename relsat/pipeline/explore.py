"""Stage ``explore``: the graph into a DuckDB e-graph (``Options.db``: in that file), saturated
with the rules (:func:`relsat.engine.explore.explore`) within ``Options.limits``; for an ONNX
input (unless ``Options.runtime_first`` says otherwise) the rules marked ``runtime`` run first, so
that the multi-pattern rules see its convs fused with their bias, batch norm and activation.

With ``Options.resume`` an e-graph of the same graph already stored in ``db`` is explored further
(iteration numbers and the limits go on from where it stopped); one of another graph is refused
(:class:`~relsat.errors.DatabaseError`).

The e-graph starts with the facts of values of the graph's tensors (:mod:`relsat.graph.facts`:
what guards such as ``finite(?m)`` read), ONNX's opaque operators bounded by
:func:`relsat.onnx.masks.opaque_facts` (integer tensors' affine forms over the model's symbolic
dims included); a folded block's inputs get what holds at every one of its occurrences.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path

from relsat.engine import explore as engine
from relsat.engine.egraph import EGraph
from relsat.errors import DatabaseError
from relsat.graph.facts import Facts, analyse, weakest
from relsat.graph.graph import Graph, Ref
from relsat.pipeline.run import Run

__all__ = ["explore", "graph_facts", "stored_egraph"]


def explore(run: Run) -> Run:
    """Build (or resume) the e-graph of ``run.explored`` and explore it."""
    o = run.options
    egraph = stored_egraph(run.explored, o.db) if o.resume and o.db is not None else None
    egraph = egraph or EGraph.from_graph(run.explored, o.db, graph_facts(run))
    exploration = engine.explore(
        egraph,
        o.rules,
        limits=o.limits,
        on_phase=run.on_phase,
        schedule=engine.Schedule(
            k_multi=o.k_multi,
            k_neutral=o.k_neutral,
            guards=o.guards,
            cycle_filter=o.cycle_filter,
            scheduler=o.scheduler,
            runtime_first=o.runtime_first
            if o.runtime_first is not None
            else run.source is not None,
        ),
    )
    return replace(run, egraph=egraph, exploration=exploration)


def graph_facts(run: Run) -> dict[Ref, Facts]:
    """The facts of values of ``run.explored``'s tensors (of the original graph, read at each
    occurrence, for a folded block's inputs)."""
    from relsat.onnx.masks import opaque_facts  # (onnx is imported only where it is used)

    dims = run.shapes.dims if run.shapes is not None else None
    opaque = partial(opaque_facts, dims=dims)  # affine forms over the model's symbolic dims
    inputs: dict[str, Facts] = {}
    folding = run.folding
    if folding is not None:
        outer = analyse(folding.original, opaque=opaque)
        for k, first in enumerate(folding.first):
            occurrences = [p for p in folding.pieces if p.copy == k]
            for j in range(len(folding.pieces[first].inputs)):
                f = weakest([outer.get(p.inputs[j]) for p in occurrences])
                if f is not None:
                    inputs[folding.input_name(k, j)] = f
    return analyse(run.explored, inputs, opaque)


def stored_egraph(graph: Graph, db: str | Path) -> EGraph | None:
    """The e-graph of ``graph`` stored in ``db``, to explore further; None when none is stored.
    One whose inputs, weights or output shapes are not ``graph``'s is refused."""
    if not Path(db).exists():
        return None
    egraph = EGraph(db)
    if not egraph.counts()[0]:
        egraph.close()
        return None
    stored, outputs = egraph.interface()
    leaves = {(n.op, n.name or "", tuple(n.shape)) for n in (*graph.inputs, *graph.weights)}
    if stored != leaves or outputs != [tuple(graph.shape(r)) for r in graph.outputs]:
        egraph.close()
        raise DatabaseError(
            "the stored e-graph was built from another graph (its inputs, weights or outputs "
            "differ): cannot resume it",
            path=str(db),
        )
    return egraph
