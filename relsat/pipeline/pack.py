"""The ``pack`` stage: attentions of the optimized graph packed with their projections into one
com.microsoft Attention (:mod:`relsat.graph.packing`) where that measures faster.

Rules cannot see the reshapes and transposes that split heads, so this choice is made on the
extracted graph, priced the way the e-graph's operators are: by timing in onnxruntime. Each
kind of site (shapes, heads, the mask it reads) is cut out with its projections and head merge
(:func:`relsat.graph.packing.fragment`) and timed against its packed form with
:func:`relsat.onnx.latency.compare_latency` (interleaved rounds, an A/A control, a
:data:`FRAGMENT_TIMING` budget); it is packed only when the packed form is faster beyond noise.
Verification, the onnxruntime check and the whole-model timing that follow see the packed graph.

Packing runs for an ONNX input priced for the CPU (``ort-cpu``, or the analytic CPU roofline:
com.microsoft Attention is an operator of onnxruntime's CPU provider), unless
``Options.packing`` is False.
"""

from __future__ import annotations

from dataclasses import replace

from relsat.graph import packing
from relsat.graph.graph import Graph
from relsat.graph.specialize import specialize
from relsat.onnx.latency import Timing
from relsat.onnx.runtime import OrtSettings
from relsat.pipeline.run import Run

__all__ = ["FRAGMENT_TIMING", "pack", "time_fragment"]

#: How one site's two forms are timed against each other (a fragment runs in about a
#: millisecond: a budget of a few seconds gives hundreds of rounds).
FRAGMENT_TIMING = Timing(max_seconds=2.0, min_gain=0.02)


def pack(run: Run) -> Run:
    """``run`` with the attentions of ``run.optimized`` that measure faster packed, packed; the
    same run when packing does not apply or nothing was found."""
    graph = run.optimized
    model = run.cost_model
    cpu = model is not None and (model.name == "ort-cpu" or model.device == "cpu")
    if graph is None or run.source is None or not run.options.packing or not cpu:
        return run
    found = packing.sites(graph)
    if not found:
        return run
    size = run.shapes.dims.value if run.shapes is not None and run.shapes.dims else None
    constant = graph.all_weights()
    kinds: dict[tuple[object, ...], list[packing.Site]] = {}
    for site in found:  # sites alike in all a price depends on are timed once
        mask = (graph.shape(site.mask), constant[site.mask.node]) if site.mask else None
        shapes = tuple(graph.shape(r) for r in (site.x, site.q.w))
        kind = (shapes, mask, site.heads, site.q.bias is None, graph.node(site.node).op)
        kinds.setdefault(kind, []).append(site)
    chosen: list[packing.Site] = []
    ratios = []
    for group in kinds.values():
        part, site = packing.fragment(graph, group[0])
        packed = packing.pack(part, [site])
        if size is not None:  # timed at the pricing shape, not at the markers
            part, packed = specialize(part, size), specialize(packed, size)
        faster, ratio = time_fragment(part, packed, run.options.ort)
        ratios.append(f"{ratio:.2f}")
        if faster:
            chosen += group
    note = (
        f"{len(chosen)} of {len(found)} attentions packed with their projections "
        f"(com.microsoft Attention; timed packed/unpacked {', '.join(ratios)})"
    )
    if not chosen:
        return replace(run, packing=note)
    return replace(run, optimized=packing.pack(graph, chosen), packing=note)


def time_fragment(part: Graph, packed: Graph, settings: OrtSettings) -> tuple[bool, float]:
    """Whether ``packed`` runs faster than ``part`` beyond noise in onnxruntime (``settings``,
    :data:`FRAGMENT_TIMING`), and the ratio of their medians (packed / unpacked)."""
    from relsat.onnx import to_model
    from relsat.onnx.latency import compare_latency

    timed = compare_latency(
        to_model(part), to_model(packed), settings=settings, timing=FRAGMENT_TIMING
    )
    return timed.verdict == "faster", timed.ratio
