"""The ILP extractor :func:`ilp`, anytime: reduce, warm-start from the greedy extractors, run the
order-restricted search on a cyclic e-graph, then solve the full HiGHS model with lazy cycle
cuts for the rest of the time; every step hands its answers to one :class:`Incumbent`."""

from __future__ import annotations

import time
from dataclasses import dataclass

from relsat.errors import ExtractionError, SettingsError, check_choice, check_int, check_number
from relsat.extract.budget import time_budget
from relsat.extract.greedy import OutOfTime, greedy_dag, greedy_tree
from relsat.extract.highs import ABANDON_AFTER, SolverLimits, run_model
from relsat.extract.incumbent import Frame, Incumbent
from relsat.extract.model import Order
from relsat.extract.problem import Extraction, Problem, Status
from relsat.extract.reduction import reduce
from relsat.extract.search import is_cyclic, order_search

__all__ = ["IlpOptions", "ilp"]

#: Share of the time limit greedy-DAG may take (it is quadratic on deep e-graphs).
GREEDY_DAG_SHARE = 0.25
#: Seconds without a better solution after which a search round ends, at the least (see
#: :class:`~relsat.extract.highs.SolverLimits`). No limit of branch-and-bound nodes: on BERT's
#: e-graph the best answer of the first round came 500 nodes after the one before it.
SEARCH_STALL_SECONDS = 2.0
#: After the order search, the full model of a cyclic e-graph runs only with at least this many
#: seconds per node left: its presolve and root LP alone take a good part of that (extraction-
#: gym's NasRNN e-graph, 57,710 nodes: root bound at 6.2 s on an idle 2-core machine, at 15 s to
#: 38 s on a loaded one, where its root node then ran past a 60 s limit and was abandoned; the
#: NasNet-A one, 43,060 nodes, proved its optimum with the time the search left, 25.5 s in all).
FULL_MODEL_SECONDS_PER_NODE = 1e-3


@dataclass(frozen=True, kw_only=True)
class IlpOptions:
    """The ILP extractor's settings, one value (see :func:`ilp` for what each does).

    ``time_limit``: seconds for everything (reduction, heuristics, solves), a number > 0, or
    None: :func:`~relsat.extract.budget.time_budget` of the reduced model's size;
    ``mip_gap``: the relative gap to stop at, in [0, 1]; ``order``: None (lazy cycle cuts),
    ``"real"`` or ``"int"`` (TENSAT's big-M order constraints); ``warm_start``: start from the
    greedy extractors' answers; ``threads``: HiGHS's threads (None: its default);
    ``cycle_len``: the longest class cycles cut statically (0: none), an integer >= 0;
    ``search``: the share of the time the order search may take on a cyclic e-graph, in [0, 1];
    ``seed``: of the order search; ``log``: HiGHS's log on stdout; ``rounds``, ``runs``,
    ``node_limit``: limits of work instead of time (search rounds, HiGHS runs of the full
    model, branch-and-bound nodes per run), so that the work done does not depend on the
    machine. A value out of its range raises :class:`~relsat.errors.SettingsError` naming it.

    >>> IlpOptions(time_limit=5).mip_gap
    0.0
    """

    time_limit: float | None = None
    mip_gap: float = 0.0
    order: Order = None
    warm_start: bool = True
    threads: int | None = None
    cycle_len: int = 6
    search: float = 0.8
    seed: int = 0
    log: bool = False
    rounds: int | None = None
    runs: int | None = None
    node_limit: int | None = None

    def __post_init__(self) -> None:
        if self.time_limit is not None:
            check_number("time_limit", self.time_limit, 0, strict=True)
        for name in ("mip_gap", "search"):  # shares
            value = getattr(self, name)
            check_number(name, value, 0)
            if not value <= 1:
                raise SettingsError(name, value, "a number in [0, 1]")
        check_choice("order", self.order, (None, "real", "int"))
        check_int("cycle_len", self.cycle_len, 0)


def ilp(
    problem: Problem,
    options: IlpOptions | None = None,
    *,
    start: dict[int, int] | None = None,
) -> Extraction:
    """TENSAT's ILP on HiGHS after :func:`reduce`, warm-started from the greedy solutions, with
    ``options`` (:class:`IlpOptions`; None: the defaults); anytime: when ``time_limit`` (seconds
    for everything: reduction, heuristics, solves) runs out, the answer is the best found so
    far, never worse than the greedy extractors or ``start`` (a class → node choice of
    ``problem``, e.g. the input graph).

    Without ``order`` acyclicity is enforced lazily: when HiGHS finds a cyclic incumbent, the
    solve is interrupted, a cut is added for every cyclic component and cycle of it (see
    :class:`~relsat.extract.model._Cuts`), and the model is solved again within the same time.
    ``order="real"``/``"int"`` adds TENSAT's big-M topological-order constraints instead.
    ``mip_gap`` is the relative gap at which to stop.

    On a cyclic e-graph, up to ``search`` × ``time_limit`` seconds (or ``rounds`` rounds) go
    first to the order search (:func:`~relsat.extract.search.order_search`): a class order
    makes an acyclic sub-e-graph holding the incumbent, whose ILP has no cycles to cut and
    solves fast. The LP relaxation of the full model is very weak on cyclic e-graphs (on vgg.json
    0.22 against 4.85: zero-cost split/concat cycles stand in for every conv), so this is where
    better answers come from; the full model then runs with what time is left, for the bound,
    if that is at least :data:`FULL_MODEL_SECONDS_PER_NODE` a node (else ``stats["solver"]``
    says so and the search's answer stands, status ``time_limit``). The full model's deadline
    is a little before the limit (``ABANDON_AFTER``, at most 5 % of it): a HiGHS run that
    ignores every interrupt is abandoned that long after its deadline, still within the limit.
    ``runs`` caps the HiGHS runs of the full model (1 + rounds of lazy cuts) and ``node_limit``
    the branch-and-bound nodes of each HiGHS run: with them and ``rounds`` the work done no
    longer depends on the machine's speed (status ``work_limit``), which is what tests use.

    It stops as soon as it cannot improve: when the reduction leaves one node per class (the
    only extraction: no solver runs, ``stats["solver"]`` says so), and when the solver's bound
    reaches the incumbent (``optimal``; ``input_optimal`` when the incumbent is ``start``: nothing
    in the e-graph beats the input graph). ``time_limit=None`` gives a budget that grows with the
    reduced model (:func:`~relsat.extract.budget.time_budget`).

    (Long: one driver that threads one deadline and one incumbent through reduction, the greedy
    starts, the order search and the HiGHS runs; each step is its own module.)
    """
    o = options or IlpOptions()
    mip_gap, order, search = o.mip_gap, o.order, o.search
    t0 = time.perf_counter()
    best = Incumbent(problem, t0)
    method = "ilp" if order is None else f"ilp-order-{order}"
    if len(problem.roots) == 0:
        return Extraction({}, 0.0, method, "optimal", gap=0.0, bound=0.0, found_by="empty")
    red = reduce(problem)
    time_limit = time_budget(red.problem.n_nodes) if o.time_limit is None else o.time_limit
    deadline = t0 + time_limit
    frame = Frame.of(red, size=problem)
    stats: dict[str, object] = dict(red.stats, time_limit=time_limit)
    if start is not None:
        best.offer(start, "start")
    tree: dict[int, int] | None = None
    if o.warm_start:
        tree = frame.lift(greedy_tree(frame.problem).choice)
        best.offer(tree, "greedy")
        try:
            dag_deadline = t0 + GREEDY_DAG_SHARE * time_limit
            best.offer(frame.lift(greedy_dag(frame.problem, deadline=dag_deadline).choice),
                       "greedy-dag")  # fmt: skip
        except OutOfTime:
            stats["greedy_dag"] = "out of time"
    if best.choice is not None and frame.problem.node_cost.max(initial=0.0) > best.cost:
        red = reduce(frame.problem, upper=best.cost)  # no node dearer than a known answer
        stats["too_dear"] = red.stats["too_dear"]
        frame = Frame.of(red, frame)
    stats["model_nodes"], stats["model_classes"] = frame.problem.n_nodes, frame.problem.n_classes
    p = frame.problem
    cyclic = is_cyclic(p)
    fallback = frame.lower(tree)  # warm start when the incumbent uses nodes reduced away
    # A HiGHS run that ignores every interrupt is abandoned ABANDON_AFTER seconds past its
    # deadline: the full model's deadline comes that much earlier, so the answer is in time.
    margin = min(ABANDON_AFTER, 0.05 * time_limit)
    limits = SolverLimits(
        deadline - margin,
        runs=o.runs,
        nodes=o.node_limit,
        mip_gap=mip_gap,
        threads=o.threads,
        log=o.log,
    )
    searched = order is None and cyclic and search > 0
    if searched:
        inner = SolverLimits(
            min(deadline, t0 + search * time_limit),
            nodes=o.node_limit,
            stall_seconds=max(SEARCH_STALL_SECONDS, 0.5 * search * time_limit),
            mip_gap=mip_gap,
            threads=o.threads,
        )
        stats.update(order_search(frame, best, inner, rounds=o.rounds, seed=o.seed))
    status: Status = "time_limit"
    bound = 0.0
    iterations = cuts = 0
    if p.n_nodes == p.n_classes:  # one node per class left: the only extraction, no solver
        only = {int(c): i for i, c in enumerate(p.node_class.tolist())}
        best.offer(frame.lift(only), "reduction")
        status = "optimal"
        stats["solver"] = "none: one extraction left after reduction"
    elif (
        searched and limits.deadline - time.perf_counter() < FULL_MODEL_SECONDS_PER_NODE * p.n_nodes
    ):
        stats["solver"] = "none: too little time left for the full model after the search"
    elif limits.deadline > time.perf_counter():
        run = run_model(
            p,
            limits,
            incumbent=lambda: frame.lower(best.choice) or fallback,
            offer=lambda c: best.offer(frame.lift(c), "ilp"),
            order=order,
            cyclic=cyclic,
            cycle_len=o.cycle_len,
        )
        status, bound, iterations, cuts = run.status, run.bound, run.iterations, run.cuts
        stats["abandoned"] = run.abandoned
    if best.choice is None:
        raise ExtractionError(
            "no acyclic extraction within the time limit", solver_status=status.replace("_", " ")
        )
    bound = min(bound, best.cost)
    if status == "optimal":
        bound = best.cost
    if status in ("optimal", "gap") and best.by == "start":
        status = "input_optimal"  # proven: nothing in the e-graph beats the input (by the gap)
    stats.update(history=best.history, best_found_at=best.at)
    seconds = time.perf_counter() - t0
    stats["total_seconds"] = seconds
    return Extraction(
        best.choice,
        best.cost,
        method,
        status,
        gap=(best.cost - bound) / best.cost if best.cost > 0 else 0.0,
        seconds=seconds,
        bound=bound,
        iterations=iterations,
        cuts=cuts,
        stats=stats,
        found_by=best.by,
        found_at=best.at,
    )
