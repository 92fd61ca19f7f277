"""The ONNX stages, for an ONNX input: ``export`` the optimized graph with the input's
interface, ``check`` it against the input in onnxruntime, ``time`` the two, and ``choose``
which to keep — never a slower model.

When no rewrite was chosen (:func:`unchanged`) the input is kept as it is, neither checked nor
timed. Otherwise the optimized model is timed against the input with
:func:`relsat.onnx.latency.compare_latency` (``Options.ort``, ``Options.timing``) and kept only
when it is faster beyond noise, or when ``Options.keep_slower`` says so (or ``timing`` is None:
not timed).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from relsat.graph.graph import Graph
from relsat.pipeline.run import Run
from relsat.pipeline.verify import VerificationError

__all__ = ["VERDICT_WORDS", "check", "choose", "export", "same_graph", "time", "unchanged"]

#: A latency verdict in words, as :attr:`relsat.Result.why` gives it.
VERDICT_WORDS = {"faster": "faster", "slower": "slower", "same": "not faster beyond noise"}


def export(run: Run) -> Run:
    """The optimized graph as an ONNX model keeping the input's interface (its inputs, unused
    ones too, and outputs, in its order, with its names and element types); when no rewrite was
    chosen, the input is kept instead."""
    if run.source is None:
        return run
    if unchanged(run):
        return replace(run, kept="original", why="no rewrite", ort_check="not needed (unchanged)")
    from relsat import onnx as ronnx

    assert run.optimized is not None, "export runs after decode"
    model = ronnx.to_model(run.optimized, like=run.source.proto())
    return replace(run, exported=model)


def check(run: Run) -> Run:
    """Run both models in onnxruntime on the same random inputs (:func:`relsat.onnx.verify`);
    :class:`~relsat.pipeline.verify.VerificationError` when their outputs differ."""
    if run.source is None or run.exported is None:
        return run
    if not run.options.verify:
        return replace(run, ort_check="skipped")
    from relsat import onnx as ronnx

    comparison = ronnx.verify(run.source.given, run.exported)
    if not comparison.ok:
        raise VerificationError(comparison, check="onnxruntime")
    return replace(run, ort_check="passed")


def time(run: Run) -> Run:
    """Time the optimized model against the input (unless ``Options.timing`` is None)."""
    o = run.options
    if run.source is None or run.exported is None or o.timing is None:
        return run
    from relsat.onnx import latency

    comparison = latency.compare_latency(
        run.source.given, run.exported, settings=o.ort, timing=o.timing
    )
    return replace(run, latency=comparison)


def choose(run: Run) -> Run:
    """Keep the optimized model when it is faster beyond noise, or untimed, or
    ``Options.keep_slower``; else the input."""
    if run.source is None or run.exported is None:
        return run
    if run.latency is None:
        return replace(run, kept="optimized", why="not timed")
    why = VERDICT_WORDS[run.latency.verdict]
    if run.latency.verdict == "faster":
        return replace(run, kept="optimized", why=why)
    if run.options.keep_slower:
        return replace(run, kept="optimized", why=f"{why}, keep_slower")
    return replace(run, kept="original", why=why)


def unchanged(run: Run) -> bool:
    """No rewrite was chosen: every chosen e-node is the input's (duplicates that hash-consing
    merged aside), or the graphs are the same computation."""
    from relsat.pipeline.result import rewrites

    assert run.egraph is not None and run.optimized is not None
    return not rewrites(run.egraph, run.choice) or same_graph(run.graph, run.optimized)


def same_graph(a: Graph, b: Graph) -> bool:
    """Do ``a`` and ``b`` apply the same operators to the same tensors? Node order and the
    labels of inner nodes (which decoding drops) do not count; a merged duplicate does."""
    a, b = a.reachable(), b.reachable()
    if len(a) != len(b) or a.values.keys() != b.values.keys():
        return False
    if not all(np.array_equal(v, b.values[k]) for k, v in a.values.items()):
        return False
    ids: dict[tuple[Any, ...], int] = {}  # one structural key per distinct computation

    def outputs(g: Graph) -> list[tuple[int, int]]:
        node_ids: list[int] = []
        for n in g.nodes:
            label = n.name if n.op in ("input", "weight") else None
            inputs = tuple((node_ids[r.node], r.index) for r in n.inputs)
            key = (n.op, n.params, n.outputs, label, inputs)
            node_ids.append(ids.setdefault(key, len(ids)))
        return [(node_ids[r.node], r.index) for r in g.outputs]

    return outputs(a) == outputs(b)
