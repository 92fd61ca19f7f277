"""The whole pipeline, ``relsat.optimize``: explore, price, extract, decode and verify.

>>> from relsat import Limits, models, optimize
>>> result = optimize(models.load("nasrnn"), limits=Limits(iterations=2))
>>> result.cost_after < result.cost_before and result.verified
True
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from relsat.cost import DEVICES, AnalyticModel, CostModel, CostTable, TableModel, price_egraph
from relsat.cost.ort import OrtModel
from relsat.engine.cycles import MODES
from relsat.engine.db import Database
from relsat.engine.decode import decode
from relsat.engine.egraph import EGraph
from relsat.engine.explore import (
    Backoff,
    Exploration,
    IterationStats,
    Limits,
    StopReason,
    backoff_for,
    explore,
)
from relsat.engine.problem import egraph_problem
from relsat.errors import (
    DatabaseError,
    RelsatError,
    SettingsError,
    check_choice,
    check_int,
    check_number,
)
from relsat.extract import EXTRACTORS, Extraction, Problem, dag_cost, extract
from relsat.graph.execute import Comparison, compare
from relsat.graph.graph import Graph
from relsat.graph.kernels import has_kernel
from relsat.pipeline.blocks import Folding, fold
from relsat.rewrite.rules import Rule

__all__ = ["Limits", "Result", "VerificationError", "optimize"]


#: Added to every e-node's cost during extraction only, so that among equally cheap graphs the
#: one with the fewest operators wins; reported costs never include it.
TIE_BREAK_MS = 1e-7
#: Added (during extraction only) to every e-node a rule created: among equally priced choices the
#: input graph's own e-nodes win, so nothing is reshuffled (re-associated adds, a ReLU moved
#: through a concat) that changes no price but can break a runtime's pattern fusion.
TIE_BREAK_NEW_MS = 1e-6


class VerificationError(RelsatError):
    """The optimized graph does not compute what the original computes (``comparison`` says how)."""

    def __init__(self, comparison: Comparison) -> None:
        self.comparison = comparison
        super().__init__("the optimized graph differs from the original: " + comparison.report())


@dataclass(frozen=True)
class Result:
    """What :func:`optimize` returns. ``egraph`` keeps the DuckDB e-graph for SQL inspection."""

    original: Graph
    graph: Graph
    cost_before: float
    cost_after: float
    stop: StopReason
    iterations: tuple[IterationStats, ...]
    extraction: Extraction
    verified: bool
    seconds: dict[str, float]
    egraph: EGraph = field(repr=False)
    choice: dict[int, int] = field(default_factory=dict, repr=False)  # e-class id -> e-node id
    settings: dict[str, Any] = field(default_factory=dict)
    priced: _Priced | None = field(default=None, repr=False, compare=False)

    @property
    def reduction(self) -> float:
        """Relative cost reduction, ``1 - after / before``."""
        return 1.0 - self.cost_after / self.cost_before if self.cost_before else 0.0

    @property
    def db(self) -> Database:
        """The DuckDB database holding the e-graph (``result.db.con`` for raw SQL)."""
        return self.egraph.db

    def rewrites(self) -> dict[str, int]:
        """The rules that built the extracted graph's new e-nodes: rule name → e-nodes."""
        ids = ",".join(str(i) for i in sorted(self.choice.values())) or "-1"
        rows = self.egraph.db.execute(
            f"SELECT rule, count(*) FROM enode WHERE id IN ({ids}) AND rule IS NOT NULL "
            "GROUP BY rule ORDER BY 2 DESC, 1"
        )
        return {str(r[0]): int(r[1]) for r in rows}

    def attribution(self, *, limit: int = 6, time_limit: float = 10.0) -> dict[str, float]:
        """Which rewrite bought what: for each rule behind the chosen e-nodes (the ``limit`` that
        built most of them), the priced milliseconds the result would lose without it — the
        extraction run again with that rule's e-nodes priced out, minus :attr:`cost_after`.

        A rule's gain is marginal (what the others cannot make up for), so gains need not add up
        to ``cost_before - cost_after``; a rule whose e-nodes only enable another's shows 0.
        """
        if self.priced is None:
            return {}
        p = self.priced
        rules = _enode_rules(self.egraph, p.enode_ids)
        gains: dict[str, float] = {}
        penalty = 10.0 * max(self.cost_before, 1e-9)  # dearer than the whole input graph
        for rule in list(self.rewrites())[:limit]:
            cost = p.node_cost + np.where(rules == rule, penalty, 0.0)
            kw = dict(p.kw, time_limit=min(time_limit, p.kw["time_limit"])) if p.kw else {}
            without = extract(replace(p.problem, node_cost=cost), method=p.extractor, **kw)
            gains[rule] = max(dag_cost(p.problem, without.choice) - self.cost_after, 0.0)
        return gains

    def gains_text(self) -> str:
        """:meth:`attribution` as one line: ``rule -0.0123 ms (-4.1 %), …`` (or ``none``)."""
        before = self.cost_before or 1.0
        return (
            ", ".join(
                f"{r} -{ms:.4g} ms (-{100 * ms / before:.1f} %)"
                for r, ms in sorted(self.attribution().items(), key=lambda kv: -kv[1])
            )
            or "none"
        )

    def to_dot(self) -> str:
        """Graphviz DOT of the optimized graph, what the rewrites changed highlighted."""
        from relsat.graph.dot import graph_dot

        return graph_dot(self.graph, self.original, title="optimized (changed: orange)")

    def report(self, *, gains: bool = False) -> str:
        """A few lines: costs, exploration, extraction, verification, rewrites, op counts; with
        ``gains`` also each top rule's marginal priced gain (:meth:`attribution`, re-extracts)."""
        ops_before, ops_after = self.original.op_counts(), self.graph.op_counts()
        changed = sorted(set(ops_before) | set(ops_after))
        enodes, eclasses = self.egraph.counts()
        lines = [
            f"cost     {self.cost_before:.4f} -> {self.cost_after:.4f} ms "
            f"({100 * self.reduction:.1f} % less, {self.settings.get('cost_model', '')}"
            + (
                f", {self.settings['cost_fallbacks']} signatures priced by the fallback model"
                if self.settings.get("cost_fallbacks") is not None
                else ""
            )
            + ")",
            f"explore  {self.stop.value} after {len({s.iteration for s in self.iterations})} "
            f"iterations, {enodes} e-nodes, {eclasses} e-classes, {self.seconds['explore']:.3f} s",
            f"extract  {self.extraction.method}: {self.extraction.status}"
            + (f", gap {self.extraction.gap:.2%}" if self.extraction.gap else "")
            + (
                f", bound {self.extraction.bound:.4f} ms"
                if self.extraction.bound is not None
                else ""
            )
            + (
                f", best by {self.extraction.found_by} at {self.extraction.found_at:.2f} s"
                if self.extraction.found_by
                else ""
            )
            + f", {self.seconds['extract']:.3f} s",
            f"verify   {self.settings.get('verify', 'passed' if self.verified else 'skipped')}",
            "rewrites "
            + (", ".join(f"{r} {n}" for r, n in list(self.rewrites().items())[:6]) or "none"),
            *(["gains    " + self.gains_text()] if gains else []),
            "ops      "
            + ", ".join(
                f"{op} {ops_before.get(op, 0)}->{ops_after.get(op, 0)}"
                for op in changed
                if ops_before.get(op) != ops_after.get(op)
            ),
        ]
        return "\n".join(lines)


def _cost_model(cost_model: str | CostModel) -> CostModel:
    """``"analytic"`` (the H100 roofline), a device name (its shipped measured table from
    ``relsat/data/costs/<device>.parquet`` with the roofline as fallback, or the roofline alone
    when no table is shipped), ``"analytic-<device>"``, ``"ort-cpu"`` (times measured in
    onnxruntime on this CPU, cached per machine: :class:`~relsat.cost.OrtModel`), or a
    CostModel."""
    if isinstance(cost_model, CostModel):
        return cost_model
    name = cost_model.lower()
    if name == "analytic":
        return AnalyticModel("h100")
    if name.startswith("analytic-") and name[9:] in DEVICES:
        return AnalyticModel(name[9:])
    if name == "ort-cpu":
        return OrtModel()
    if name in DEVICES:
        table = shipped_costs(name)
        if table is None:
            return AnalyticModel(name)
        return TableModel(table, name, fallback=AnalyticModel(name))
    raise SettingsError(
        "cost_model",
        cost_model,
        f"'analytic', a device ({', '.join(sorted(DEVICES))}), 'analytic-<device>', 'ort-cpu' "
        "or a CostModel",
    )


def shipped_costs(device: str) -> CostTable | None:
    """The measured cost table shipped for ``device``, if any."""
    from importlib import resources

    ref = resources.files("relsat") / "data" / "costs" / f"{device}.parquet"
    if not ref.is_file():
        return None
    with resources.as_file(ref) as path:
        return CostTable.from_parquet(path)


def optimize(
    graph: Graph,
    *,
    rules: Iterable[Rule] | None = None,
    k_multi: int = 1,
    limits: Limits | None = None,
    cost_model: str | CostModel = "analytic",
    extractor: str = "ilp",
    db: str | Path | None = None,
    verify: bool = True,
    guards: bool = True,
    cycle_filter: str = "efficient",
    time_limit: float = 60.0,
    mip_gap: float = 0.0,
    order: str | None = None,
    concat: str = "copy",
    precompute_weights: bool | None = None,
    on_phase: Callable[[IterationStats], None] | None = None,
    resume: bool = False,
    blocks: bool | str = False,
    scheduler: str | Backoff = "simple",
) -> Result:
    """Optimize ``graph``: equality saturation with TASO's rules on a DuckDB e-graph (``db``: keep
    it in that file), prices from ``cost_model``, extraction (``"ilp"`` with HiGHS, ``"greedy"``,
    ``"greedy-dag"``), and — with ``verify`` — a NumPy check that the optimized graph computes
    what ``graph`` computes (:class:`VerificationError` otherwise).

    Valid settings: ``k_multi`` an integer >= 0; ``limits`` a :class:`Limits`; ``extractor`` one
    of ``"ilp"``, ``"greedy"``, ``"greedy-dag"``; ``cycle_filter`` ``"efficient"``,
    ``"vanilla"`` or ``"off"``; ``time_limit`` (ILP seconds) a number > 0; ``mip_gap`` a number
    in [0, 1]; ``order`` None, ``"real"`` or ``"int"``; ``concat`` ``"copy"`` or ``"free"``;
    ``precompute_weights`` None, False or True. Anything else raises
    :class:`~relsat.errors.SettingsError` (a ``ValueError``) naming the argument, before any work.

    ``resume``: an e-graph of ``graph`` already stored in ``db`` is explored further (iteration
    numbers and the limits go on from where it stopped) instead of refused; one of another graph
    is refused (:class:`~relsat.errors.DatabaseError`).

    ``blocks``: explore each distinct repeated block once (:mod:`relsat.pipeline.blocks`): identical
    layers are folded into one copy whose prices count once per occurrence, and the optimized
    copy is put back into every layer; the e-graph kept is the folded graph's. A graph without
    repeated blocks is optimized whole. ``"auto"`` folds only a chain of layers (one tensor made
    inside the repeat crosses each cut: a transformer's hidden state, a ResNet's activation),
    not cells wired to the cell before the last (NasNet-A), whose rewrites across cuts the
    whole graph finds.

    ``scheduler``: ``"simple"`` (every match applied) or ``"backoff"`` / a :class:`Backoff`
    (egg's backoff scheduler, as TENSAT ran: see :func:`relsat.engine.explore.explore`).
    """
    _check_settings(
        k_multi,
        limits,
        extractor,
        cycle_filter,
        time_limit,
        mip_gap,
        order,
        concat,
        precompute_weights,
    )
    check_choice("blocks", blocks, (False, True, "auto"))
    backoff_for(scheduler)
    model = _cost_model(cost_model)
    seconds: dict[str, float] = {}
    t = time.perf_counter()
    folding: Folding | None = fold(graph) if blocks else None
    unfolded = ""
    if blocks == "auto" and folding is not None and folding.streams != 1:
        unfolded = f"not folded ({folding.streams} tensors cross a cut between copies)"
        folding = None
    explored = folding.graph if folding else graph  # the graph put in the e-graph
    egraph = _stored_egraph(explored, db) if resume and db is not None else None
    egraph = egraph or EGraph.from_graph(explored, db)
    exploration: Exploration = explore(
        egraph,
        rules,
        k_multi=k_multi,
        limits=limits,
        guards=guards,
        cycle_filter=cycle_filter,
        on_phase=on_phase,
        scheduler=scheduler,
    )
    seconds["explore"] = time.perf_counter() - t
    t = time.perf_counter()
    price_egraph(
        egraph,
        model,
        concat=concat,  # type: ignore[arg-type]
        # None: as the runtime the model prices does (an ONNX export folds weight-only work)
        precompute_weights=(
            model.precomputes_weights if precompute_weights is None else precompute_weights
        ),
    )
    problem, enode_ids, class_ids = egraph_problem(egraph)
    if folding:  # a copy's prices count once per occurrence: costs are the whole graph's
        times, crossing = folding.restrict(problem, _leaf_names(egraph, enode_ids))
        problem = replace(
            problem, node_cost=problem.node_cost * times, forbidden=problem.forbidden | crossing
        )
    seconds["price"] = time.perf_counter() - t
    kw: dict[str, Any] = (
        {"time_limit": time_limit, "mip_gap": mip_gap, "order": order} if extractor == "ilp" else {}
    )
    # Ties between equal-cost alternatives go to the input graph's e-nodes, then to fewer e-nodes.
    born0 = _input_enodes(egraph, enode_ids)
    tie = np.where(born0, TIE_BREAK_MS, TIE_BREAK_MS + TIE_BREAK_NEW_MS)
    # A measured model's new e-nodes also pay its price noise: rewrites must beat the noise.
    margin = np.where(born0, 1.0, 1.0 + model.rewrite_margin)
    tied = replace(problem, node_cost=problem.node_cost * margin + tie)
    original = _original_choice(problem, born0)
    # The input graph is one more warm start: the ILP's answer is never dearer than it.
    run_kw = dict(kw, start=original) if extractor == "ilp" else kw
    extraction = extract(tied, method=extractor, **run_kw)
    cost_after = dag_cost(problem, extraction.choice)
    # The solver's bound is on the tie-broken prices, a hair above the true ones: clamp it.
    bound = None if extraction.bound is None else min(extraction.bound, cost_after)
    extraction = replace(extraction, cost=cost_after, bound=bound)
    seconds["extract"] = extraction.seconds or 0.0
    t = time.perf_counter()
    cost_before = dag_cost(problem, original)
    if extraction.cost >= cost_before and extraction.choice != original:
        # Nothing cheaper was found (ties, or a priced-out margin): keep the input graph.
        extraction = replace(
            extraction, choice=original, cost=cost_before, method="input", found_by="input"
        )
    choice = {int(class_ids[c]): int(enode_ids[n]) for c, n in extraction.choice.items()}
    optimized = decode(egraph, choice, values=explored.values)
    if folding:
        optimized = folding.unfold(optimized)
    seconds["decode"] = time.perf_counter() - t
    verified = False
    unrunnable = sorted(
        {
            n.params["type"]
            for n in graph.nodes
            if n.op == "opaque" and not has_kernel(n.params["type"])
        }
    )
    if verify and unrunnable:  # no NumPy kernel: say so instead of failing deep in the executor
        verify = False
        verify_note = f"skipped: no NumPy kernel for {', '.join(unrunnable)} (check in onnxruntime)"
    else:
        verify_note = "passed" if verify else "skipped"
    if verify:
        t = time.perf_counter()
        comparison = compare(graph, optimized)
        if not comparison.ok:
            raise VerificationError(comparison)
        verified = True
        seconds["verify"] = time.perf_counter() - t
    fallbacks = getattr(model, "fallbacks", None)
    settings = {
        "verify": verify_note,
        "cost_fallbacks": fallbacks,
        "k_multi": k_multi,
        "cost_model": f"{model.name}",
        "extractor": extractor,
        "guards": guards,
        "cycle_filter": cycle_filter,
        "scheduler": scheduler if isinstance(scheduler, str) else "backoff",
        "blocks": (
            folding.describe() if folding else unfolded or ("none repeated" if blocks else "off")
        ),
    }
    return Result(
        graph,
        optimized,
        cost_before,
        extraction.cost,
        exploration.stop,
        exploration.iterations,
        extraction,
        verified,
        seconds,
        egraph,
        choice,
        settings,
        _Priced(problem, tied.node_cost, enode_ids, extractor, kw),
    )


def _stored_egraph(graph: Graph, db: str | Path) -> EGraph | None:
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


def _check_settings(
    k_multi: object,
    limits: object,
    extractor: object,
    cycle_filter: object,
    time_limit: object,
    mip_gap: object,
    order: object,
    concat: object,
    precompute_weights: object,
) -> None:
    """:func:`optimize`'s argument checks (:class:`SettingsError` naming the first bad one)."""
    check_int("k_multi", k_multi, 0)
    if limits is not None and not isinstance(limits, Limits):
        raise SettingsError("limits", limits, "a relsat.Limits or None")
    check_choice("extractor", extractor, tuple(EXTRACTORS))
    check_choice("cycle_filter", cycle_filter, MODES)
    check_number("time_limit", time_limit, 0, strict=True)
    check_number("mip_gap", mip_gap, 0)
    if not mip_gap <= 1:  # type: ignore[operator]
        raise SettingsError("mip_gap", mip_gap, "a number in [0, 1]")
    check_choice("order", order, (None, "real", "int"))
    check_choice("concat", concat, ("copy", "free"))
    check_choice("precompute_weights", precompute_weights, (None, False, True))


@dataclass(frozen=True)
class _Priced:
    """The priced extraction problem of a run, kept for :meth:`Result.attribution`."""

    problem: Problem  # with the true prices
    node_cost: np.ndarray  # the prices extraction saw (tie-breaks included)
    enode_ids: np.ndarray
    extractor: str
    kw: dict[str, Any]


def _enode_column(egraph: EGraph, enode_ids: np.ndarray, column: str) -> np.ndarray:
    """Per problem node, ``column`` (``"born"`` or ``"rule"``, '' for none) of its e-node: one
    Arrow query, looked up with a vectorized search."""
    table = egraph.db.arrow("SELECT id, born, coalesce(rule, '') AS rule FROM enode ORDER BY id")
    ids = table["id"].to_numpy()
    values = table[column].to_numpy(zero_copy_only=False)
    return values[np.searchsorted(ids, enode_ids)]


def _enode_rules(egraph: EGraph, enode_ids: np.ndarray) -> np.ndarray:
    """Per problem node: the rule that created its e-node ('' for the input graph's)."""
    return _enode_column(egraph, enode_ids, "rule")


def _leaf_names(egraph: EGraph, enode_ids: np.ndarray) -> dict[int, str]:
    """Problem node → tensor name, for the input and weight e-nodes."""
    rows = egraph.db.execute("SELECT id, s FROM enode WHERE op IN ('input', 'weight') ORDER BY id")
    at = np.searchsorted(enode_ids, [r[0] for r in rows])
    return {int(i): str(r[1]) for i, r in zip(at.tolist(), rows, strict=True)}


def _input_enodes(egraph: EGraph, enode_ids: np.ndarray) -> np.ndarray:
    """Per problem node: whether it is an e-node of the input graph (born 0)."""
    return np.asarray(_enode_column(egraph, enode_ids, "born") == 0)


def _original_choice(problem: Problem, born0: np.ndarray) -> dict[int, int]:
    """The input graph as a choice: every class's input-graph e-node (born 0)."""
    choice: dict[int, int] = {}
    for i in np.flatnonzero(born0).tolist():
        choice.setdefault(int(problem.node_class[i]), i)
    return choice
