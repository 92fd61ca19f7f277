"""Stage ``explore``: the graph into a DuckDB e-graph (``Options.db``: in that file), saturated
with the rules (:func:`relsat.engine.explore.explore`) within ``Options.limits``.

With ``Options.resume`` an e-graph of the same graph already stored in ``db`` is explored further
(iteration numbers and the limits go on from where it stopped); one of another graph is refused
(:class:`~relsat.errors.DatabaseError`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from relsat.engine import explore as engine
from relsat.engine.egraph import EGraph
from relsat.errors import DatabaseError
from relsat.graph.graph import Graph
from relsat.pipeline.run import Run

__all__ = ["explore", "stored_egraph"]


def explore(run: Run) -> Run:
    """Build (or resume) the e-graph of ``run.explored`` and explore it."""
    o = run.options
    egraph = stored_egraph(run.explored, o.db) if o.resume and o.db is not None else None
    egraph = egraph or EGraph.from_graph(run.explored, o.db)
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
        ),
    )
    return replace(run, egraph=egraph, exploration=exploration)


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
