"""What :func:`relsat.optimize` returns: a frozen :class:`Result`, with the report, the rules'
gains and the writing of the model it kept (:meth:`Result.save`)."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from relsat.engine.db import Database
from relsat.engine.explore import Exploration, IterationStats, StopReason
from relsat.extract import dag_cost
from relsat.extract import extract as solve
from relsat.graph.graph import Graph
from relsat.graph.serial import to_json
from relsat.pipeline.price import enode_columns
from relsat.pipeline.run import Run
from relsat.pipeline.save import has_external_data, write_atomic
from relsat.pipeline.verify import VerificationError, rewrites

__all__ = ["OP_NAMES", "Result", "op_counts", "result", "rewrites"]

#: relsat's operators by the names users know them by: the ONNX (or com.microsoft) operator
#: where there is one, else a few words. An opaque operator is its own ONNX type.
OP_NAMES = {
    "attention": "Attention",
    "batchnorm": "BatchNormalization",
    "biasgelu": "BiasGelu",
    "biasgelu_tanh": "FastGelu (with bias)",
    "concat": "Concat",
    "conv2d": "Conv",
    "conv2d_bias": "Conv (with bias)",
    "cos": "Cos",
    "dropout": "Dropout",
    "enlarge": "kernel enlarge (TASO)",
    "erf": "Erf",
    "ewadd": "Add",
    "ewdiv": "Div",
    "ewmul": "Mul",
    "ewpow": "Pow",
    "ewsub": "Sub",
    "same": "the same tensor (no computation)",
    "gelu": "Gelu",
    "gelu_tanh": "FastGelu",
    "gqa": "GroupQueryAttention",
    "groupnorm": "GroupNormalization",
    "instancenorm": "InstanceNormalization",
    "layernorm": "LayerNormalization",
    "linear": "MatMul",
    "matmul": "MatMul",
    "matmul_bias": "MatMul (with bias)",
    "merge": "grouped-conv merge (TASO)",
    "mha": "Attention (with Q, K, V projections)",
    "nanzero": "NaN guard",
    "neg": "Neg",
    "poolavg": "AveragePool",
    "poolmax": "MaxPool",
    "quickgelu": "QuickGelu",
    "reciprocal": "Reciprocal",
    "reducemean": "ReduceMean",
    "relu": "Relu",
    "relu6": "Clip (ReLU6)",
    "repeat2": "repeat_interleave",
    "repeatkv": "repeat_kv",
    "reshape": "Reshape",
    "expand": "Expand",
    "rmsnorm": "RMSNormalization",
    "rotary": "RotaryEmbedding",
    "scalar": "constant",
    "sigmoid": "Sigmoid",
    "sin": "Sin",
    "skiplayernorm": "SkipLayerNormalization",
    "slice": "Slice",
    "softmax": "Softmax",
    "split": "Split",
    "sqrt": "Sqrt",
    "tanh": "Tanh",
    "transpose": "Transpose",
    "turnpairs": "rotate_every_two",
}


def op_counts(graph: Graph) -> Counter[str]:
    """``graph``'s operators counted by the names users know (:data:`OP_NAMES`; an opaque
    operator by its ONNX type), inputs, weights and the node joining outputs left out."""
    return Counter(
        str(n.params["type"]) if n.op == "opaque" else OP_NAMES.get(n.op, n.op)
        for n in graph.nodes
        if n.op not in ("input", "weight", "noop")
    )


#: The run's fields a Result reads as its own (those it names otherwise are its properties).
_FROM_RUN = frozenset(f.name for f in fields(Run)) - {"on_phase"}


@dataclass(frozen=True, kw_only=True)
class Result:
    """One optimization: the input (``original``) and optimized ``graph``, their priced costs
    (ms, by the ``cost_model`` named; ``cost_fallbacks`` signatures it priced by its fallback,
    None for a model without one), the exploration's ``stop`` reason and per-phase
    ``iterations``, the ``extraction``, whether NumPy verification passed (``verified``;
    ``verification`` in words), what repeated-block folding did (``blocks``), what the ``tidy``
    stage wrote (``tidying``, :mod:`relsat.pipeline.tidy`), seconds per
    stage that worked, the ``options`` it ran with, and the DuckDB ``egraph`` for SQL
    inspection (``choice``: e-class id → chosen e-node id).

    For an ONNX input also: ``exported`` (the optimized ``onnx.ModelProto``, None when no
    rewrite was chosen), ``ort_check`` (the onnxruntime check: ``"passed"``, ``"skipped"`` or
    ``"not needed (unchanged)"``), ``latency`` (the timing, None when not timed), and which
    model is kept: ``kept`` (``"original"`` or ``"optimized"``) and ``why`` (``"faster"``,
    ``"slower"``, ``"too noisy to tell"``, ``"not faster"``: the timing's word,
    :data:`relsat.onnx.latency.WORDS`; ``"no rewrite"``, ``"not timed"``, or a word with
    ``", keep_slower"``). A Graph input keeps the optimized graph (``why``:
    ``"a Graph input"``). :meth:`save` writes the kept model.

    For an ONNX input with dynamic dims, ``shapes`` says what became of them
    (:class:`~relsat.pipeline.run.Shapes`: kept symbolic or fixed, and why; the pricing shape
    the rewrites were chosen for), ``checked_at`` the dim values onnxruntime checked at, and
    ``latencies`` each timing with its shape (``latency`` is the pricing shape's).

    A Result is a view of the finished :class:`~relsat.pipeline.run.Run` (``run``): the run's
    fields are its attributes under their own names, and the few it names otherwise are
    properties here (``original`` is the run's ``graph``, ``graph`` its ``optimized``,
    ``cost_after``, ``stop``, ``stopped`` and ``iterations`` come from its extraction and
    exploration, ``cost_model`` is the model's name).
    """

    run: Run

    def __getattr__(self, name: str) -> Any:
        # The run's fields Result does not name otherwise (verified, kept, why, latency, shapes,
        # egraph, choice, source, priced, …) are read from the run, not copied into the Result.
        if name in _FROM_RUN:
            return getattr(self.__dict__["run"], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | _FROM_RUN)

    @property
    def original(self) -> Graph:
        """The input graph."""
        return self.run.graph

    @property
    def graph(self) -> Graph:
        """The optimized graph (decoded from the extraction, tidied)."""
        assert self.run.optimized is not None
        return self.run.optimized

    @property
    def cost_after(self) -> float:
        """The optimized graph's priced cost (ms)."""
        assert self.run.extraction is not None
        return self.run.extraction.cost

    @property
    def stop(self) -> StopReason:
        """Why the exploration stopped."""
        return self._exploration.stop

    @property
    def stopped(self) -> str:
        """The stop in words; at a limit, the rules that filled the e-graph."""
        return self._exploration.why

    @property
    def iterations(self) -> tuple[IterationStats, ...]:
        """The exploration's stats, one per phase of each iteration."""
        return self._exploration.iterations

    @property
    def seconds(self) -> dict[str, float]:
        """Seconds per stage that worked."""
        return dict(self.run.seconds)

    @property
    def cost_model(self) -> str:
        """The name of the cost model that priced the e-graph."""
        assert self.run.cost_model is not None
        return self.run.cost_model.name

    @property
    def cost_fallbacks(self) -> int | None:
        """Signatures the cost model priced by its fallback; None for a model without one."""
        return getattr(self.run.cost_model, "fallbacks", None)

    @property
    def _exploration(self) -> Exploration:
        assert self.run.exploration is not None
        return self.run.exploration

    @property
    def reduction(self) -> float:
        """Relative cost reduction, ``1 - after / before``."""
        return 1.0 - self.cost_after / self.cost_before if self.cost_before else 0.0

    @property
    def db(self) -> Database:
        """The DuckDB database holding the e-graph (``result.db.con`` for raw SQL)."""
        return self.egraph.db

    @property
    def kept_graph(self) -> Graph:
        """The graph of the model kept: ``original`` or ``graph``."""
        return self.original if self.kept == "original" else self.graph

    @property
    def model(self) -> Any:
        """For an ONNX input, the kept model as an ``onnx.ModelProto`` (the input's tensors in
        external files stay references); None for a Graph input."""
        if self.source is None:
            return None
        return self.source.proto() if self.kept == "original" else self.exported

    def rewrites(self) -> dict[str, int]:
        """The rules that built the extracted graph's new e-nodes: rule name → e-nodes."""
        return rewrites(self.egraph, self.choice)

    def attribution(self, *, limit: int = 6, time_limit: float = 10.0) -> dict[str, float]:
        """Which rewrite bought what: for each rule behind the chosen e-nodes (the ``limit`` that
        built most of them), the priced milliseconds the result would lose without it — the
        extraction run again with that rule's e-nodes priced out, minus :attr:`cost_after`.

        A rule's gain is marginal (what the others cannot make up for), so gains need not add up
        to ``cost_before - cost_after``; a rule whose e-nodes only enable another's shows 0.
        """
        if self.priced is None:
            return {}
        p, o = self.priced, self.options
        (rules,) = enode_columns(self.egraph, p.enode_ids, "rule")
        budget = o.ilp.time_limit
        ilp = replace(o.ilp, time_limit=time_limit if budget is None else min(time_limit, budget))
        gains: dict[str, float] = {}
        penalty = 10.0 * max(self.cost_before, 1e-9)  # dearer than the whole input graph
        for rule in list(self.rewrites())[:limit]:
            cost = p.tied.node_cost + np.where(rules == rule, penalty, 0.0)
            without = solve(replace(p.problem, node_cost=cost), o.extractor, ilp)
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
        """A few lines: costs, exploration, extraction, the tidy stage, verification, for an ONNX
        input the timing and the model kept, rewrites, op counts, options; with ``gains`` also
        each top rule's marginal priced gain (:meth:`attribution`, re-extracts)."""
        ops_before, ops_after = op_counts(self.original), op_counts(self.graph)
        changed = sorted(set(ops_before) | set(ops_after))
        unwritten = " (the optimized graph's, not written: the original is kept)"
        lines = [
            *([f"shapes   {self.shapes.note}"] if self.shapes else []),
            self._cost_line(),
            self._explore_line(),
            self._extract_line(),
            *([f"tidy     {self.tidying}"] if self.tidying != "off" else []),
            f"verify   {self.verification}"
            + (f"; onnxruntime {self.ort_check}" if self.ort_check else "")
            + (f" at {' | '.join(self.checked_at)}" if self.checked_at else ""),
            *self._latency_lines(),
            *([f"kept     {self.kept} ({self.why})"] if self.source else []),
            "rewrites " + self._rewrites_text(changed=bool(changed)),
            *(["gains    " + self.gains_text()] if gains else []),
            "ops      "
            + ", ".join(
                f"{op} {ops_before.get(op, 0)}->{ops_after.get(op, 0)}"
                for op in changed
                if ops_before.get(op) != ops_after.get(op)
            )
            + (unwritten if self._unkept else ""),
            f"options  {self.options.describe()}",
        ]
        return "\n".join(lines)

    def _rewrites_text(self, *, changed: bool) -> str:
        """The rules that built the chosen e-nodes; where none did and the graph changed all the
        same, the rules that merged classes without building one (``and-true``)."""
        built = list(self.rewrites().items())[:6]
        if built or not changed:
            return ", ".join(f"{r} {n}" for r, n in built) or "none"
        merged = [(str(r), int(n)) for r, n in self.egraph.db.run("stats/merging_rules")][:6]
        if not merged:
            return "none"
        return "none built; classes merged by " + ", ".join(f"{r} {n}" for r, n in merged)

    @property
    def _unkept(self) -> bool:
        """Was the original written, although the optimized graph (which the op counts describe)
        differs from it?"""
        return self.source is not None and self.kept == "original" and self.why != "no rewrite"

    def _latency_lines(self) -> list[str]:
        if len(self.latencies) > 1 or (self.latencies and self.latencies[0][0]):
            return [f"latency  at {label}: {c.report()}" for label, c in self.latencies]
        return [f"latency  {self.latency.report()}"] if self.latency else []

    def _cost_line(self) -> str:
        fallbacks = (
            f", {self.cost_fallbacks} signatures priced by the fallback model"
            if self.cost_fallbacks is not None
            else ""
        )
        return (
            f"cost     {self.cost_before:.4f} -> {self.cost_after:.4f} ms "
            f"({100 * self.reduction:.1f} % less, {self.cost_model}{fallbacks})"
        )

    def _explore_line(self) -> str:
        enodes, eclasses = self.egraph.counts()
        return (
            f"explore  {self.stop.value} after {len({s.iteration for s in self.iterations})} "
            f"iterations, {enodes} e-nodes, {eclasses} e-classes, {self.seconds['explore']:.3f} s"
            + self.stopped.removeprefix(self.stop.value)  # at a limit: the busiest rules
        )

    def _extract_line(self) -> str:
        e = self.extraction
        return (
            f"extract  {e.method}: {e.status}"
            + (f", gap {e.gap:.2%}" if e.gap else "")
            + (f", bound {e.bound:.4f} ms" if e.bound is not None else "")
            + (
                f" (at most {e.cost - e.bound:.4g} ms left on the table)"
                if e.bound is not None and e.status not in ("optimal", "input_optimal")
                else ""
            )
            + (f", best by {e.found_by} at {e.found_at:.2f} s" if e.found_by else "")
            + f", {self.seconds.get('extract', 0.0):.3f} s"
        )

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the kept model to ``path`` atomically and return the path: ONNX for a
        ``.onnx`` path, else relsat JSON (:func:`relsat.graph.serial.to_json`).

        For an ONNX input, a kept original is written as it was read, byte for byte, except that
        tensors it keeps in external files are written with it (beside the output when too big
        for one file), so that the output does not depend on the input's data files. A Graph
        input is exported (:func:`relsat.onnx.to_model`) and, unless ``Options.verify`` is
        False, checked against the input's export in onnxruntime first
        (:class:`~relsat.pipeline.verify.VerificationError`: nothing written).
        """
        target = Path(path)
        if target.suffix != ".onnx":
            write_atomic(target, to_json(self.kept_graph, indent=1).encode())
            return target
        from relsat.onnx.exporter import write_model

        if self.source is None:
            write_model(self._exported_graph(), target)
        elif self.kept == "optimized":
            write_model(self.exported, target)
        elif self.source.path is not None and has_external_data(self.source.data):
            import onnx

            write_model(onnx.load(str(self.source.path)), target)  # data read beside the input
        else:
            write_atomic(target, self.source.data)
        return target

    def _exported_graph(self) -> Any:
        """A Graph input's optimized graph as ONNX, checked in onnxruntime unless not to."""
        from relsat import onnx as ronnx

        model = ronnx.to_model(self.graph)
        if self.options.verify:
            comparison = ronnx.verify(ronnx.to_model(self.original), model)
            if not comparison.ok:
                raise VerificationError(comparison, check="onnxruntime")
        return model


def result(run: Run) -> Result:
    """The :class:`Result` of a finished run."""
    assert run.egraph is not None and run.exploration is not None
    assert run.extraction is not None and run.optimized is not None and run.cost_model is not None
    return Result(run=replace(run, on_phase=None))
