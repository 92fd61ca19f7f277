"""A graph at other sizes: every integer of its shapes and parameters mapped by one function.

A graph read with symbolic dims holds a marker (a prime) wherever a dim occurs
(:mod:`relsat.onnx.symbolic`); :func:`specialize` rebuilds it with each marker replaced by a
value, so that it can run (NumPy verification never runs at marker sizes), and
:func:`substitute` maps the integers of a parameter value (the pricing of an operator
signature). Every node is replayed through :class:`~relsat.graph.builder.GraphBuilder`, so the
rebuilt graph passes the same shape checks as any other.

Integers inside a tensor of more than :data:`SHAPE_LIKE` elements (an opaque node's constant
input: position ids, a lookup table) are data, not sizes, and are left as they are; so are
booleans and floats.

>>> from relsat.graph import GraphBuilder
>>> b = GraphBuilder()
>>> x = b.input([61, 8], name="x")
>>> g = b.build(b.reshape(x, [61 * 2, 4]))
>>> [n.shape for n in specialize(g, lambda d: 3 * d // 61 if d % 61 == 0 else d).nodes]
[(3, 8), (6, 4)]
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from relsat.graph.builder import GraphBuilder, Tensor, canonical_attrs
from relsat.graph.graph import Graph

__all__ = ["SHAPE_LIKE", "specialize", "substitute"]

#: An integer tensor with at most this many elements is a shape-like value (a Reshape target,
#: Slice bounds, a Range limit): its values can stand for dims.
SHAPE_LIKE = 8

Size = Callable[[int], int]


def substitute(value: Any, size: Size) -> Any:
    """``value`` (ints, floats, strings, lists, tuples, dicts) with every int mapped by
    ``size``, except in tensors (``{"dtype", "dims", "data"}``) of more than
    :data:`SHAPE_LIKE` elements."""
    if isinstance(value, bool) or not isinstance(value, int | list | tuple | dict):
        return value
    if isinstance(value, int):
        return size(value)
    if isinstance(value, dict):
        if {"dtype", "dims", "data"} <= set(value) and math.prod(value["dims"]) > SHAPE_LIKE:
            return value
        return {k: substitute(v, size) for k, v in value.items()}
    return type(value)(substitute(v, size) for v in value)


def specialize(graph: Graph, size: Size) -> Graph:
    """``graph`` rebuilt with every dim and integer parameter mapped by ``size`` (weights keep
    their values; a weight whose shape changes is a :class:`~relsat.errors.GraphError`)."""
    b = GraphBuilder()
    handles: dict[int, tuple[Tensor, ...]] = {}
    for n in graph.nodes:
        if n.op == "input":
            made: tuple[Tensor, ...] = (b.input([size(d) for d in n.shape], name=n.name),)
        elif n.op == "weight":
            value = graph.values.get(n.name or "")
            made = (b.weight([size(d) for d in n.shape], name=n.name, value=value),)
        else:
            params = dict(n.params)
            if n.op == "opaque":
                params["attrs"] = canonical_attrs(substitute(json.loads(params["attrs"]), size))
                params["shapes"] = substitute(params["shapes"], size)
            else:
                params = {k: substitute(v, size) for k, v in params.items()}
            inputs = [handles[r.node][r.index] for r in n.inputs]
            made = b.add_node(n.op, inputs, params, name=n.name)
        handles[n.id] = made
    return b.build([handles[r.node][r.index] for r in graph.outputs])
