"""The ``pack`` stage: kernels of the optimized graph packed the way onnxruntime's encoder
kernels take them, where that measures faster — attention with its Q, K and V projections into
one com.microsoft Attention (:mod:`relsat.graph.packing`); layer norms written so that
onnxruntime does not fuse their residual add into them (:mod:`relsat.graph.residuals`: its
SkipLayerNormalization is the slower kernel on some CPUs); then a projection's bias into the
BiasGelu or SkipLayerNormalization after it, the projection one MatMul on its 3-D input
(:mod:`relsat.graph.projections`); last, the projections none of these took written as one
MatMul on their N-D input, without the 2-D views around them (:mod:`relsat.graph.views`).
Before them, consecutive reshapes and transposes are folded (always: fewer nodes, the same
values; onnxruntime folds such chains itself only at static dims).

Rules cannot see the reshapes and transposes around these (heads split and merged, leading dims
flattened for a 2-D GEMM), so these choices are made on the extracted graph, priced the way the
e-graph's operators are: by timing in onnxruntime. Each kind of site (shapes, heads, the mask
it reads, the kernel after a projection) is cut out (its ``fragment``) and timed against its
rewritten form with :func:`relsat.onnx.latency.compare_latency` (interleaved rounds, an A/A
control, a :data:`FRAGMENT_TIMING` budget); sites of that kind are rewritten only when the
rewritten form is faster beyond noise. Kinds whose fragment ran faster by the median but not
beyond its noise (a 4-8 % gain on a fragment of a third of a millisecond, on a shared machine)
are then decided together on the whole model (:data:`FOLD_TIMING`; undecided there, by the
median: :func:`chosen`). Verification, the
onnxruntime check and the whole-model timing that follow see the rewritten graph.

The stage runs for an ONNX input priced for the CPU (``ort-cpu``, or the analytic CPU
roofline: these are operators of onnxruntime's CPU provider), unless ``Options.packing`` is
False.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from relsat.graph import packing, projections, replay, residuals, views
from relsat.graph.graph import Graph, Ref
from relsat.graph.specialize import specialize
from relsat.onnx.latency import Timing
from relsat.onnx.runtime import OrtSettings
from relsat.pipeline.run import Run

__all__ = [
    "FOLD_TIMING",
    "FRAGMENT_TIMING",
    "LOWERINGS",
    "Lowering",
    "chosen",
    "pack",
    "time_fragment",
]

#: How one site's two forms are timed against each other (a fragment runs in about a
#: millisecond: a budget of a few seconds gives hundreds of rounds): a packed attention must be
#: 2 % faster.
FRAGMENT_TIMING = Timing(max_seconds=2.0, min_gain=0.02)
#: A folded projection saves a reshape pair and a bias add: 1-3 % of its fragment (a GEMM
#: dominates it), too little to see alone, but repeated in every layer: the whole model is timed
#: with all of them folded against none, and faster beyond the A/A control is enough (undecided
#: at the budget: the lower median, see :func:`_time_models`).
FOLD_TIMING = Timing(max_seconds=4.0, min_gain=0.0)


@dataclass(frozen=True)
class Lowering:
    """One rewrite of the extracted graph: what it does (``what``, for the note), how to find
    its ``sites``, what a site's price depends on (``kind``, given which nodes are constant),
    the ``fragment`` a site is timed on (with the site as found in it), how to ``apply`` it to
    chosen sites, and the ``timing`` a fragment's two forms are compared with; ``whole``: the
    whole model is timed with every site rewritten against none instead (for rewrites that each
    save too little to measure alone)."""

    what: str
    sites: Callable[[Graph], Sequence[Any]]
    kind: Callable[[Graph, list[bool], Any], Hashable]
    fragment: Callable[[Graph, Any], tuple[Graph, Any]]
    apply: Callable[[Graph, Sequence[Any]], Graph]
    timing: Timing = FRAGMENT_TIMING
    whole: bool = False


def _attention_kind(graph: Graph, constant: list[bool], site: packing.Site) -> Hashable:
    mask = (graph.shape(site.mask), constant[site.mask.node]) if site.mask else None
    shapes = tuple(graph.shape(r) for r in (site.x, site.q.w))
    return shapes, mask, site.heads, site.q.bias is None, graph.node(site.node).op


def _projection_kind(graph: Graph, constant: list[bool], site: projections.Site) -> Hashable:
    skip = site.skip is not None and constant[site.skip.node]
    return site.kind, graph.shape(site.x), graph.shape(site.w), skip


def _residual_kind(graph: Graph, constant: list[bool], site: residuals.Site) -> Hashable:
    return graph.shape(Ref(site.node, 0))


def _view_kind(graph: Graph, constant: list[bool], site: views.Site) -> Hashable:
    return graph.shape(site.x), graph.shape(site.w), graph.shape(Ref(site.out, 0))


#: The rewrites, in the order they are tried (packing an attention takes its projections; a
#: layer norm kept apart from its residual add is no SkipLayerNormalization site for the
#: projection fold after it; what neither took loses its 2-D views last).
LOWERINGS = (
    Lowering(
        "attentions packed with their projections (com.microsoft Attention)",
        packing.sites,
        _attention_kind,
        packing.fragment,
        packing.pack,
    ),
    Lowering(
        "layer norms kept apart from their residual add (no SkipLayerNormalization)",
        residuals.sites,
        _residual_kind,
        residuals.fragment,
        residuals.apart,
        FOLD_TIMING,
        whole=True,
    ),
    Lowering(
        "projection biases folded into BiasGelu / SkipLayerNormalization",
        projections.sites,
        _projection_kind,
        projections.fragment,
        projections.fold,
        FOLD_TIMING,
        whole=True,
    ),
    Lowering(
        "projections written as one MatMul on their N-D input (no 2-D view reshapes)",
        views.sites,
        _view_kind,
        views.fragment,
        views.undo,
        FOLD_TIMING,
        whole=True,
    ),
)


def pack(run: Run) -> Run:
    """``run`` with the sites of each of :data:`LOWERINGS` that measure faster rewritten; the
    same run when the stage does not apply or finds nothing."""
    graph = run.optimized
    model = run.cost_model
    cpu = model is not None and (model.name == "ort-cpu" or model.device == "cpu")
    if graph is None or run.source is None or not run.options.packing or not cpu:
        return run
    size = run.shapes.dims.value if run.shapes is not None and run.shapes.dims else None
    notes, count = [], 0
    folded = replay.rebuild(graph, {})  # layout chains folded: fewer nodes, the same values
    saved = _layout_ops(graph) - _layout_ops(folded)
    if saved > 0:
        notes.append(f"{saved} consecutive reshapes and transposes folded")
        graph = folded
    for lowering in LOWERINGS:
        found = lowering.sites(graph)
        if not found:
            continue
        if lowering.whole:
            faster, ratio = _time_models(run, graph, lowering.apply(graph, found), lowering)
            chosen, ratios = (list(found) if faster else []), [f"whole model {ratio:.3f}"]
        else:
            chosen, ratios = _by_fragments(run, graph, found, lowering, size)
        notes.append(
            f"{len(chosen)} of {len(found)} {lowering.what} "
            f"(timed rewritten/as extracted: {', '.join(ratios)})"
        )
        if chosen:
            graph = lowering.apply(graph, chosen)
            count += len(chosen)
    if not notes:
        return run
    return replace(run, optimized=graph, packing="; ".join(notes), packed=count)


def _layout_ops(graph: Graph) -> int:
    counts = graph.op_counts()
    return counts.get("reshape", 0) + counts.get("transpose", 0)


def _by_fragments(
    run: Run, graph: Graph, found: Sequence[Any], lowering: Lowering, size: Any
) -> tuple[list[Any], list[str]]:
    """The sites of the kinds whose fragment times faster rewritten, and each kind's ratio."""
    kinds: dict[Hashable, list[Any]] = {}
    constant = graph.all_weights()
    for site in found:  # sites alike in all a price depends on are timed once
        kinds.setdefault(lowering.kind(graph, constant, site), []).append(site)
    chosen: list[Any] = []
    unsure: list[Any] = []
    ratios = []
    for group in kinds.values():
        part, site = lowering.fragment(graph, group[0])
        rewritten = lowering.apply(part, [site])
        if size is not None:  # timed at the pricing shape, not at the markers
            part, rewritten = specialize(part, size), specialize(rewritten, size)
        faster, ratio = time_fragment(part, rewritten, run.options.ort, lowering.timing)
        ratios.append(f"{ratio:.2f}")
        if faster:
            chosen += group
        elif ratio < 1.0 - lowering.timing.min_gain:
            unsure += group
    if unsure:  # faster by the median, not beyond the fragment's noise: the whole model decides
        before = lowering.apply(graph, chosen) if chosen else graph
        after = lowering.apply(graph, chosen + unsure)
        whole = replace(lowering, timing=FOLD_TIMING)
        faster, ratio = _time_models(run, before, after, whole)
        ratios.append(f"the undecided on the whole model {ratio:.3f}")
        if faster:
            chosen += unsure
    return chosen, ratios


def _time_models(run: Run, before: Graph, after: Graph, lowering: Lowering) -> tuple[bool, float]:
    """``after`` against ``before``, both written as the run writes its output (the input's
    interface, dynamic dims symbolic: onnxruntime's own fusions differ between static and
    symbolic dims) and timed whole in onnxruntime at the pricing shape (``lowering.timing``):
    is ``after`` faster?, the ratio.

    Faster beyond noise decides; where the budget ends undecided, the lower median does. Both
    are the optimized model, equal in value, and the timing against the original that follows
    still guards the never-slower promise: a gain of a few percent that this machine's noise
    hides (three to five for a decode step's views) is then kept more often than not, where
    waiting for certainty would drop it every time."""
    from relsat.onnx.latency import compare_latency
    from relsat.pipeline.ort import at_shapes, written

    models = [written(run, g)[0] for g in (before, after)]
    shapes = at_shapes(run, checking=False)[0][1]
    o = run.options
    timed = compare_latency(
        *models, settings=o.ort, timing=lowering.timing, shapes=shapes, given=o.inputs
    )
    return chosen(timed.verdict, timed.stopped, timed.ratio), timed.ratio


def chosen(verdict: str, stopped: str, ratio: float) -> bool:
    """Whether a whole-model timing's ``verdict``, ended as ``stopped`` with the median
    ``ratio``, keeps the rewritten model (see :func:`_time_models`)."""
    return verdict == "faster" or (stopped != "decided" and ratio < 1.0)


def time_fragment(
    part: Graph, rewritten: Graph, settings: OrtSettings, timing: Timing = FRAGMENT_TIMING
) -> tuple[bool, float]:
    """Whether ``rewritten`` runs faster than ``part`` beyond noise in onnxruntime
    (``settings``, ``timing``), and the ratio of their medians."""
    from relsat.onnx import to_model
    from relsat.onnx.latency import compare_latency

    timed = compare_latency(to_model(part), to_model(rewritten), settings=settings, timing=timing)
    return timed.verdict == "faster", timed.ratio
