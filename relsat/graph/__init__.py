"""Stage 1, the graph: tensor operators and their shape rules (``ops``), the immutable
:class:`Graph` and its :class:`GraphBuilder`, the stable JSON form (``serial``), NumPy kernels and
the reference executor (``kernels``, ``execute``), descriptions and pictures (``describe``,
``dot``), what a rewrite changed (``diff``).

>>> from relsat.graph import GraphBuilder, to_json, from_json
>>> b = GraphBuilder(); x = b.input([2, 3], name="x")
>>> g = b.build(b.relu(x))
>>> from_json(to_json(g)) == g
True
"""

from __future__ import annotations

from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.describe import summary
from relsat.graph.graph import Graph, Node, Ref
from relsat.graph.ops import TensorType
from relsat.graph.serial import from_json, to_json

__all__ = [
    "Graph",
    "GraphBuilder",
    "Node",
    "Ref",
    "Tensor",
    "TensorType",
    "from_json",
    "summary",
    "to_json",
]
