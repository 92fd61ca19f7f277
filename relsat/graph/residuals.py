"""Layer norms kept apart from the residual add before them, as extraction chose them.

When extraction keeps ``layernorm(ewadd(x, skip))`` rather than ``skiplayernorm`` (the
measured prices said the two kernels are cheaper than the fused one), onnxruntime fuses them
back when it loads the model: its ``SkipLayerNormFusion`` turns an Add of two 3-D tensors of
the same static shape, read by a LayerNormalization alone, into SkipLayerNormalization. On this
project's CPU that kernel is the slower one (onnxruntime 1.32, two threads, an Add and a
LayerNormalization of ``[1, 128, 256]``: 41 us apart, 102 us fused; ``[1, 128, 768]``: 108
against 284 us).

A site is such a layer norm; :func:`apart` writes it over the 2-D view of its input
(``reshape(layernorm(reshape(add, [M, N])), [..., N])``), which the fusion does not match, and
a projection that reads the layer norm then reads its 2-D output directly (the reshapes fold).
The ``tidy`` stage writes every site so (:mod:`relsat.pipeline.tidy`): where the fused kernel
was the cheaper, extraction chose ``skiplayernorm`` and there is no site.

>>> from relsat.graph import GraphBuilder
>>> b = GraphBuilder()
>>> x, skip = b.input([1, 4, 8], name="x"), b.input([1, 4, 8], name="skip")
>>> g = b.build(b.layernorm(b.add(x, skip), b.weight([8]), b.weight([8])))
>>> [graph_site.node for graph_site in sites(g)]
[5]
>>> [n.op for n in apart(g, sites(g)).nodes if n.op not in ("input", "weight")]
['ewadd', 'reshape', 'layernorm', 'reshape']
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Graph, Ref
from relsat.graph.replay import Get, Make, rebuild

__all__ = ["Site", "apart", "sites"]


@dataclass(frozen=True)
class Site:
    """A ``layernorm`` (``node``) of the ``ewadd`` ``add`` of two 3-D tensors of one shape."""

    node: int
    add: int


def sites(graph: Graph) -> list[Site]:
    """Every layer norm whose residual add onnxruntime would fuse into it (see the module
    docstring): the add's two inputs 3-D of the same shape, the add read by the layer norm
    alone and not an output of the graph."""
    readers = graph.consumers()
    outputs = {r.node for r in graph.outputs}
    found = []
    for n in graph.nodes:
        if n.op != "layernorm":
            continue
        add = graph.node(n.inputs[0])
        if add.op != "ewadd" or readers.get(add.id) != [n.id] or add.id in outputs:
            continue
        a, b = (graph.shape(r) for r in add.inputs)
        if len(a) == 3 and a == b:
            found.append(Site(n.id, add.id))
    return found


def apart(graph: Graph, chosen: Iterable[Site]) -> Graph:
    """``graph`` with each ``chosen`` layer norm written over the 2-D view of its input."""
    return rebuild(graph, {s.node: _flat_layernorm(graph, s) for s in chosen})


def _flat_layernorm(graph: Graph, site: Site) -> Make:
    """Makes the site's layer norm over the 2-D view of its input, shaped back."""
    n = graph.node(Ref(site.node, 0))

    def make(b: GraphBuilder, get: Get) -> Tensor:
        x = get(n.inputs[0])
        rows = math.prod(x.shape[:-1])
        flat = b.reshape(x, [rows, x.shape[-1]])
        y = b.layernorm(flat, get(n.inputs[1]), get(n.inputs[2]), float(n.params["epsilon"]))
        return b.reshape(y, list(n.shape))

    return make
