"""Pictures: graphs and e-class neighbourhoods as Graphviz DOT, rendered when ``dot`` exists.

:func:`graph_dot` draws a graph and highlights what a rewrite changed: the rewritten nodes
themselves, not everything downstream of them (:func:`relsat.graph.diff.changed_nodes`).
:func:`relsat.engine.dot.eclass_dot` draws the e-nodes of one e-class and of the classes around
it in a stored e-graph, one cluster per class.

>>> from relsat.graph import GraphBuilder
>>> b = GraphBuilder(); x = b.input([2, 2], name="x")
>>> print(graph_dot(b.build(b.relu(x))).splitlines()[0])
digraph relsat {
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from relsat.errors import RelsatError
from relsat.graph.diff import LEAVES, changed_nodes
from relsat.graph.graph import Graph, Node

__all__ = ["graph_dot", "render"]

_CHANGED = 'style=filled, fillcolor="#ffd8a8", color="#e8590c"'
_LEAF = 'shape=box, style=rounded, color="#868e96", fontcolor="#495057"'


def _label(n: Node) -> str:
    if n.op in ("input", "weight"):
        return f"{n.name}\\n{list(n.shape)}"
    params = ", ".join(
        f"{k}={v}" for k, v in sorted(n.params.items()) if k not in ("attrs", "shapes")
    )
    shape = " ".join(str(list(t.shape)) for t in n.outputs)
    return f"{n.op}\\n{params}\\n{shape}" if params else f"{n.op}\\n{shape}"


def graph_dot(graph: Graph, against: Graph | None = None, *, title: str = "relsat") -> str:
    """DOT text for ``graph``; with ``against``, what differs from it is highlighted."""
    changed = changed_nodes(graph, against) if against is not None else set()
    lines = [
        "digraph relsat {",
        f'  label="{title}"; rankdir=TB;',
        '  node [shape=box, fontname="Helvetica", fontsize=10];',
    ]
    for n in graph.nodes:
        style = _LEAF if n.op in LEAVES else _CHANGED if n.id in changed else ""
        lines.append(f'  n{n.id} [label="{_label(n)}"{", " + style if style else ""}];')
    for n in graph.nodes:
        for r in n.inputs:
            lines.append(f"  n{r.node} -> n{n.id};")
    for i, r in enumerate(graph.outputs):
        lines.append(f'  out{i} [label="output {i}", shape=plaintext]; n{r.node} -> out{i};')
    lines.append("}")
    return "\n".join(lines)


def render(dot_text: str, path: str | Path) -> Path:
    """Write ``dot_text`` to ``path``: as DOT for ``.dot``, else rendered by Graphviz (``.svg``,
    ``.png``, ``.pdf``); RelsatError when ``dot`` is not installed."""
    path = Path(path)
    if path.suffix in ("", ".dot", ".gv"):
        path.write_text(dot_text)
        return path
    exe = shutil.which("dot")
    if exe is None:
        raise RelsatError(f"{path}: Graphviz 'dot' is not installed; write a .dot file instead")
    done = subprocess.run(
        [exe, f"-T{path.suffix[1:]}", "-o", str(path)],
        input=dot_text,
        text=True,
        capture_output=True,
        check=False,
    )
    if done.returncode:
        raise RelsatError(f"{path}: dot failed: {done.stderr.strip()}")
    return path
