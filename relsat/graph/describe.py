"""Human-readable descriptions of graphs (the ``relsat summary`` output)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relsat.graph.graph import Graph

__all__ = ["summary"]


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def summary(graph: Graph, title: str | None = None) -> str:
    """Operators, inputs, outputs and parameter count of ``graph``, as plain text.

    >>> from relsat.graph import GraphBuilder
    >>> b = GraphBuilder(); x = b.input([2, 3], name="x")
    >>> print(summary(b.build(b.relu(x)), "tiny"))  # doctest: +NORMALIZE_WHITESPACE
    tiny
      operators  1 (relu 1)
      inputs     x [2,3]
      weights    0 (0 parameters)
      outputs    [2,3]
    """
    ops = graph.op_counts()
    weights = graph.weights
    params = sum(w.outputs[0].size for w in weights)
    lines = [title] if title else []
    histogram = ", ".join(
        f"{op} {k}" for op, k in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    lines.append(f"  operators  {sum(ops.values())} ({histogram})")
    lines.append("  inputs     " + ", ".join(f"{n.name} {_shape(n.shape)}" for n in graph.inputs))
    lines.append(f"  weights    {len(weights)} ({params:,} parameters)")
    lines.append("  outputs    " + ", ".join(_shape(s) for s in graph.output_shapes))
    return "\n".join(lines)
