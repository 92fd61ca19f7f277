"""Projections written as one MatMul on their N-D input: the 2-D views around relsat's matmul
undone.

relsat reads a projection of ``x [..., K]`` as a 2-D matmul between a flatten of the leading
dims and their unflatten (``reshape(matmul(reshape(x, [M, K]), w), [..., N])``), where the
rules can see it. onnxruntime's MatMul takes the N-D input itself (one GEMM over the flattened
rows either way), so the two Reshapes are only nodes to run: 3-4 us each on this project's CPU
under profiling, a tenth of a Llama-style decode step's time with seven projections a layer,
and at dynamic dims onnxruntime does not fold them. A site is a plain ``matmul`` (no fused
activation) of a 2-D ``w`` whose left operand flattens the leading dims of ``x`` and whose
output is read by one reshape that keeps those leading dims (and may split ``N``: the heads);
it becomes ``linear(x, w)``, reshaped only where ``N`` is split. :func:`sites` finds them,
:func:`undo` rewrites the chosen ones, :func:`fragment` cuts one out for timing.

>>> from relsat.graph import GraphBuilder
>>> b = GraphBuilder()
>>> x = b.input([2, 4, 8], name="x")
>>> p = b.matmul(b.reshape(x, [8, 8]), b.weight([8, 16]))
>>> g = b.build(b.relu(b.reshape(p, [2, 4, 2, 8])))
>>> [s.out for s in sites(g)] == [g.node(g.outputs[0]).inputs[0].node]
True
>>> sorted(undo(g, sites(g)).op_counts().items())
[('linear', 1), ('relu', 1), ('reshape', 1)]
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial

from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Graph, Ref
from relsat.graph.replay import Get, cut, rebuild, reshape

__all__ = ["Site", "fragment", "sites", "undo"]


@dataclass(frozen=True)
class Site:
    """A ``matmul`` (``node``) of ``x``'s flatten by ``w``, read by the reshape ``out``."""

    node: int
    x: Ref
    w: Ref
    out: int


def sites(graph: Graph) -> list[Site]:
    """Every projection of ``graph`` written between a flatten and an unflatten (see the module
    docstring)."""
    readers = graph.consumers()
    for out in graph.outputs:  # an output is read by the caller
        readers.setdefault(out.node, []).append(-1)
    found = []
    for n in graph.nodes:
        if n.op != "matmul" or n.params.get("activation", "NONE") != "NONE":
            continue
        flat, w = graph.node(n.inputs[0]), n.inputs[1]
        if flat.op != "reshape" or len(graph.shape(w)) != 2:
            continue
        x = flat.inputs[0]
        lead = graph.shape(x)[:-1]
        if len(lead) < 2 or flat.shape != (math.prod(lead), graph.shape(x)[-1]):
            continue
        users = readers.get(n.id, [])
        if len(users) != 1 or users[0] < 0:
            continue
        unflat = graph.node(Ref(users[0], 0))
        if unflat.op != "reshape" or unflat.shape[: len(lead)] != lead:
            continue
        found.append(Site(n.id, x, w, unflat.id))
    return found


def undo(graph: Graph, chosen: Iterable[Site]) -> Graph:
    """``graph`` with each ``chosen`` site's projection a ``linear`` of its unflattened input,
    reshaped only where the reshape after it splits ``N``."""
    return rebuild(graph, {s.out: partial(_linear, site=s, graph=graph) for s in chosen})


def _linear(b: GraphBuilder, get: Get, *, site: Site, graph: Graph) -> Tensor:
    y = b.linear(get(site.x), get(site.w))
    return reshape(b, y, graph.node(Ref(site.out, 0)).shape)


def fragment(graph: Graph, site: Site) -> tuple[Graph, Site]:
    """The flatten, the matmul and the reshape after it as a graph of their own (input ``x``;
    ``w`` as it is), with the site as found in it."""
    inputs = {site.x: "x"}
    if not graph.all_weights()[site.w.node]:
        inputs[site.w] = "w"
    part = cut(graph, Ref(site.out, 0), inputs)
    (found,) = sites(part)
    return part, found
