"""Stage ``price``: every e-node priced by the cost model, and the e-graph as an extraction
problem, with the tie-breaks extraction sees.

The cost model is ``Options.cost_model`` (:func:`cost_model`). With folded blocks, each copy's
prices count once per occurrence, so the problem's costs are the whole graph's, and e-nodes that
mix copies are forbidden (:meth:`~relsat.pipeline.blocks.Folding.restrict`). An e-graph with
symbolic dims is priced at the pricing shape (every marker replaced by its dim's value in the
signatures the cost model sees: :func:`~relsat.cost.price.resize_signature`).
"""

from __future__ import annotations

from dataclasses import replace
from importlib import resources

import numpy as np

from relsat.cost import DEVICES, AnalyticModel, CostModel, CostTable, TableModel, price_egraph
from relsat.engine.egraph import EGraph
from relsat.engine.problem import egraph_problem
from relsat.extract import Problem
from relsat.onnx.exportable import exportable_only
from relsat.pipeline.options import Options
from relsat.pipeline.run import Priced, Run

__all__ = ["TIE_BREAK_MS", "TIE_BREAK_NEW_MS", "cost_model", "price", "refolded", "shipped_costs"]

#: Added to every e-node's cost during extraction only, so that among equally cheap graphs the
#: one with the fewest operators wins; reported costs never include it.
TIE_BREAK_MS = 1e-7
#: Added (during extraction only) to every e-node a rule created: among equally priced choices the
#: input graph's own e-nodes win, so nothing is reshuffled (re-associated adds, a ReLU moved
#: through a concat) that changes no price but can break a runtime's pattern fusion.
TIE_BREAK_NEW_MS = 1e-6


def price(run: Run) -> Run:
    """Price the e-graph and build the extraction problem (:class:`~relsat.pipeline.run.Priced`)."""
    o, egraph = run.options, run.egraph
    assert egraph is not None, "price runs after explore"
    model = cost_model(o, onnx=run.source is not None)
    priced_rows = price_egraph(
        egraph,
        model,
        concat=o.concat,  # type: ignore[arg-type]
        # None: as the runtime the model prices does (an ONNX export folds weight-only work)
        precompute_weights=(
            model.precomputes_weights if o.precompute_weights is None else o.precompute_weights
        ),
        size=run.shapes.dims.value if run.shapes and run.shapes.dims else None,
    )
    problem, enode_ids, class_ids = egraph_problem(egraph)
    ops, born = enode_columns(egraph, enode_ids, "op", "born")
    exportable = o.exportable if o.exportable is not None else run.source is not None
    if exportable:  # what the ONNX exporter cannot write, or writes spelled out, is never offered
        from relsat.onnx.exporter import spelled_out  # (onnx is imported only where it is used)

        problem = exportable_only(problem, ops, spelled_out(run.explored))
    if run.folding:  # a copy's prices count once per occurrence: costs are the whole graph's
        times, crossing = run.folding.restrict(problem, leaf_names(egraph, enode_ids))
        problem = replace(
            problem, node_cost=problem.node_cost * times, forbidden=problem.forbidden | crossing
        )
    # Ties between equal-cost alternatives go to the input graph's e-nodes, then to fewer e-nodes.
    born0 = np.asarray(born == 0)
    tie = np.where(born0, TIE_BREAK_MS, TIE_BREAK_MS + TIE_BREAK_NEW_MS)
    # A measured model's new e-nodes also pay its price noise: rewrites must beat the noise
    # (not those that fold a unit into the operators after it: see refolded).
    priced_ids = priced_rows["enode"].to_numpy()
    order = np.argsort(priced_ids)
    at = order[np.searchsorted(priced_ids, enode_ids, sorter=order)]
    unit = priced_rows["unit"].to_numpy()[at]  # each e-node's priced unit, in problem order
    margin = np.where(born0 | refolded(problem, unit, born0), 1.0, 1.0 + model.rewrite_margin)
    tied = replace(problem, node_cost=problem.node_cost * margin + tie)
    priced = Priced(problem, tied, enode_ids, class_ids, born0)
    return replace(run, cost_model=model, priced=priced)


def refolded(problem: Problem, unit: np.ndarray, born0: np.ndarray) -> np.ndarray:
    """Per node: a new e-node priced as the same unit (one measured key, ``unit``) as an e-node
    it takes the place of: an input e-node of its class, or of a class an input e-node of its
    class reads, where that e-node may itself be a new one refolded (a conv, the batchnorm and
    the ReLU after it: one conv kernel, bias and activation in its epilogue). Its price is
    then one the input's cost already holds: it brings no noise of its own, and folding the
    operators after it saves exactly their prices."""
    n = len(unit)
    parent = np.repeat(np.arange(n), np.diff(problem.child_ptr))
    reads: dict[int, set[int]] = {}  # class -> classes its input e-nodes read
    read = born0[parent]
    for p, child in zip(parent[read].tolist(), problem.child_idx[read].tolist(), strict=True):
        reads.setdefault(int(problem.node_class[p]), set()).add(child)
    units: dict[int, set[int]] = {}  # class -> units of its input and refolded e-nodes
    for i in np.flatnonzero(born0).tolist():
        units.setdefault(int(problem.node_class[i]), set()).add(int(unit[i]))
    found = np.zeros(n, dtype=bool)
    todo = np.flatnonzero(~born0).tolist()
    while todo:  # a fixpoint: each round refolds at least one more e-node, or ends
        later = []
        for i in todo:
            c, u = int(problem.node_class[i]), int(unit[i])
            if u in units.get(c, ()) or any(u in units.get(d, ()) for d in reads.get(c, ())):
                found[i] = True
                units.setdefault(c, set()).add(u)
            else:
                later.append(i)
        if len(later) == len(todo):
            break
        todo = later
    return found


def cost_model(options: Options, *, onnx: bool) -> CostModel:
    """The model ``options.cost_model`` names: None is ``"ort-cpu"`` for an ONNX input
    (``onnx``) and ``"analytic"`` otherwise; ``"analytic"`` is the H100 roofline, a device name
    its shipped measured table from ``relsat/data/costs/<device>.parquet`` with the roofline as
    fallback (or the roofline alone when no table is shipped), ``"analytic-<device>"`` that
    device's roofline, ``"ort-cpu"`` times measured in onnxruntime on this CPU with
    ``options.ort`` (cached per machine: :class:`~relsat.cost.OrtModel`); a CostModel is used
    as it is."""
    given = options.cost_model or ("ort-cpu" if onnx else "analytic")
    if isinstance(given, CostModel):
        return given
    name = given.lower()
    if name == "ort-cpu":
        from relsat.cost.ort import OrtModel

        return OrtModel(options.ort)
    if name == "analytic":
        return AnalyticModel("h100")
    if name not in DEVICES:  # "analytic-<device>" (Options checked the name)
        return AnalyticModel(name.removeprefix("analytic-"))
    table = shipped_costs(name)
    if table is None:
        return AnalyticModel(name)
    return TableModel(table, name, fallback=AnalyticModel(name))


def shipped_costs(device: str) -> CostTable | None:
    """The measured cost table shipped for ``device``, if any."""
    ref = resources.files("relsat") / "data" / "costs" / f"{device}.parquet"
    if not ref.is_file():
        return None
    with resources.as_file(ref) as path:
        return CostTable.from_parquet(path)


def enode_columns(egraph: EGraph, enode_ids: np.ndarray, *columns: str) -> list[np.ndarray]:
    """Per problem node, each of ``columns`` (``"born"``, ``"op"`` or ``"rule"``, '' for none)
    of its e-node: one Arrow query, looked up with a vectorized search."""
    table = egraph.db.arrow(
        "SELECT id, born, op, coalesce(rule, '') AS rule FROM enode ORDER BY id"
    )
    at = np.searchsorted(table["id"].to_numpy(), enode_ids)
    return [table[c].to_numpy(zero_copy_only=False)[at] for c in columns]


def leaf_names(egraph: EGraph, enode_ids: np.ndarray) -> dict[int, str]:
    """Problem node → tensor name, for the input and weight e-nodes."""
    rows = egraph.db.execute("SELECT id, s FROM enode WHERE op IN ('input', 'weight') ORDER BY id")
    at = np.searchsorted(enode_ids, [r[0] for r in rows])
    return {int(i): str(r[1]) for i, r in zip(at.tolist(), rows, strict=True)}
