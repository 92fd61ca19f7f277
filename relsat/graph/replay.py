"""Graphs rebuilt node by node: what the ``tidy`` stage writes of an extracted graph
(:mod:`relsat.pipeline.tidy`, :mod:`relsat.graph.residuals`), and fragments of a graph.

:func:`rebuild` replays a graph through :class:`~relsat.graph.builder.GraphBuilder` (so every
node passes the shape checks again) with some nodes' outputs made by a function instead, folding
consecutive reshapes and consecutive transposes as it goes, and keeps what the outputs still
read.

>>> from relsat.graph import GraphBuilder
>>> b = GraphBuilder()
>>> x = b.input([2, 3], name="x")
>>> g = b.build(b.transpose(b.transpose(b.relu(x), [1, 0]), [1, 0]))
>>> sorted(rebuild(g, {}).op_counts())
['relu']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Graph, Ref

__all__ = ["Get", "Make", "rebuild"]

#: The rebuilt tensor of a ref of the graph being rebuilt.
Get = Callable[[Ref], Tensor]
#: Makes a node's (first) output in the rebuilt graph.
Make = Callable[[GraphBuilder, Get], Tensor]


def rebuild(graph: Graph, made_by: Mapping[int, Make]) -> Graph:
    """``graph`` replayed, node ``i``'s output made by ``made_by[i]`` where given (those nodes
    have one output), consecutive reshapes and transposes folded; what no output reads is left
    out."""
    b = GraphBuilder()
    made: dict[int, tuple[Tensor, ...]] = {}

    def get(ref: Ref) -> Tensor:
        return made[ref.node][ref.index]

    for n in graph.nodes:
        if n.id in made_by:
            made[n.id] = (made_by[n.id](b, get),)
        elif n.op == "input":
            made[n.id] = (b.input(n.shape, name=n.name),)
        elif n.op == "weight":
            made[n.id] = (b.weight(n.shape, name=n.name, value=graph.values.get(n.name or "")),)
        elif n.op == "reshape":
            made[n.id] = (_reshape(b, get(n.inputs[0]), n.params["shape"]),)
        elif n.op == "transpose":
            perm = tuple(n.params["perm"])
            made[n.id] = (_transpose(b, get(n.inputs[0]), perm, shuffle=n.params["shuffle"]),)
        else:
            made[n.id] = b.add_node(n.op, [get(r) for r in n.inputs], n.params, name=n.name)
    return b.build([get(r) for r in graph.outputs]).reachable()


def _reshape(b: GraphBuilder, x: Tensor, shape: Sequence[int]) -> Tensor:
    """``x`` reshaped, a reshape of a reshape read from the first's input, none when the shape
    is ``x``'s own."""
    producer, inputs = b.producer(x)
    if producer.op == "reshape":
        x = inputs[0]
    return x if tuple(shape) == x.shape else b.reshape(x, list(shape))


def _transpose(b: GraphBuilder, x: Tensor, perm: Sequence[int], *, shuffle: bool) -> Tensor:
    """``x`` transposed, a transpose of a transpose composed into one, none for the identity."""
    producer, inputs = b.producer(x)
    if producer.op == "transpose":
        inner = producer.params["perm"]
        perm = tuple(inner[p] for p in perm)
        x = inputs[0]
    if tuple(perm) == tuple(range(len(perm))):
        return x
    return b.transpose(x, list(perm), shuffle=bool(shuffle))
