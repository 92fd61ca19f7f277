"""relsat: tensor-graph superoptimization by equality saturation on a relational e-graph.

The public surface is chosen here; everything else is internal.
"""

from __future__ import annotations

from relsat.errors import (
    ExecutionError,
    GraphError,
    GraphFormatError,
    ModelFormatError,
    RelsatError,
    UnknownModelError,
)
from relsat.execute import allclose, run
from relsat.graph import Graph, GraphBuilder, Node, Ref, Tensor
from relsat.ops import TensorType

__all__ = [
    "ExecutionError",
    "Graph",
    "GraphBuilder",
    "GraphError",
    "GraphFormatError",
    "ModelFormatError",
    "Node",
    "Ref",
    "RelsatError",
    "Tensor",
    "TensorType",
    "UnknownModelError",
    "allclose",
    "run",
]

__version__ = "0.1.0"
