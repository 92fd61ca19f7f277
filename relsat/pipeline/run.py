"""The run record that :func:`relsat.optimize`'s stages pass along, and the progress event.

A :class:`Run` is a frozen value: each stage (a function ``Run -> Run``) returns a new one with
its own fields filled in (``dataclasses.replace``), or the same object when it has nothing to
do, so the driver (:func:`relsat.pipeline.optimize.optimize`) times only the stages that
worked. The fields are grouped by the stage that sets them, in the order they run.
:class:`Source` and :class:`Shapes` (what the ONNX package read: :func:`relsat.onnx.read`) are
re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from relsat.engine.egraph import EGraph
from relsat.engine.explore import Exploration, IterationStats
from relsat.extract import Extraction, Problem
from relsat.graph.graph import Graph
from relsat.onnx.loading import Shapes, Source
from relsat.pipeline.blocks import Folding
from relsat.pipeline.options import Options

if TYPE_CHECKING:
    import numpy as np

    from relsat.cost import CostModel
    from relsat.onnx.latency import LatencyComparison

__all__ = ["Priced", "Run", "Shapes", "Source", "Stage"]


@dataclass(frozen=True)
class Priced:
    """The priced extraction problem: ``problem`` with the true prices (each folded copy's
    counted once per occurrence), ``tied`` with the prices extraction sees (tie-breaks and a
    measured model's margin added), ``enode_ids`` / ``class_ids`` the e-graph ids of its nodes
    and classes, ``born0`` which nodes are the input graph's."""

    problem: Problem
    tied: Problem
    enode_ids: np.ndarray
    class_ids: np.ndarray
    born0: np.ndarray


@dataclass(frozen=True)
class Stage:
    """What ``on_phase`` gets after each stage that worked: its ``name``, the ``seconds`` it
    took and the ``run`` so far (e.g. ``stage.run.graph`` after ``"load"``)."""

    name: str
    seconds: float
    run: Run = field(repr=False)


#: ``on_phase``: called with every exploration phase's stats and after every stage that worked.
OnPhase = Callable[[IterationStats | Stage], None]


@dataclass(frozen=True)
class Run:
    """One optimization run so far (see the module docstring)."""

    options: Options
    graph: Graph  # load: the input graph
    source: Source | None = None  # load: the ONNX input, if any
    shapes: Shapes | None = None  # load: an ONNX input's dynamic dims (None: all static)
    on_phase: OnPhase | None = field(default=None, repr=False, compare=False)
    seconds: tuple[tuple[str, float], ...] = ()  # the driver: per stage that worked
    # fold
    folding: Folding | None = None
    blocks: str = "off"  # what folding did, in words
    # explore
    egraph: EGraph | None = field(default=None, repr=False)
    exploration: Exploration | None = None
    # price
    cost_model: CostModel | None = None
    priced: Priced | None = field(default=None, repr=False)
    # extract
    extraction: Extraction | None = None
    cost_before: float = 0.0
    original: dict[int, int] = field(default_factory=dict, repr=False)  # the input as a choice
    # decode, unfold
    choice: dict[int, int] = field(default_factory=dict, repr=False)  # e-class id -> e-node id
    optimized: Graph | None = None
    # tidy
    tidying: str = "off"  # what the tidy stage wrote, in words
    tidied: int = 0  # the nodes it changed
    # verify
    verified: bool = False
    verification: str = "skipped"
    # ONNX: export, check in onnxruntime, time, choose
    exported: Any = field(default=None, repr=False)  # the optimized onnx.ModelProto
    ort_check: str | None = None  # "passed", "skipped" or "not needed (unchanged)"
    checked_at: tuple[str, ...] = ()  # the dim values onnxruntime checked at, in words
    latency: LatencyComparison | None = None  # at the pricing shape
    latencies: tuple[tuple[str, LatencyComparison], ...] = ()  # every shape timed, in words
    kept: str = "optimized"
    why: str = "a Graph input"

    @property
    def explored(self) -> Graph:
        """The graph put in the e-graph: the folded graph, or the input graph."""
        return self.folding.graph if self.folding else self.graph
