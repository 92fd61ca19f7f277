"""Graphviz DOT of a stored e-graph: an e-class and its neighbourhood (``relsat show --db``)."""

from __future__ import annotations

from relsat.engine.egraph import EGraph
from relsat.errors import RelsatError

__all__ = ["eclass_dot"]


def eclass_dot(egraph: EGraph, eclass: int, depth: int = 1) -> str:
    """DOT text for e-class ``eclass`` of a stored e-graph and the classes within ``depth``
    steps below it (its e-nodes' children) — each class a cluster of its e-nodes."""
    classes = {eclass}
    frontier = {eclass}
    for _ in range(depth):
        if not frontier:
            break
        ids = ",".join(map(str, sorted(frontier)))
        rows = egraph.db.execute(
            "SELECT DISTINCT t.child FROM enode e, unnest([e.c0, e.c1, e.c2, e.c3, e.c4, e.c5, "
            f"e.c6, e.c7]) AS t(child) WHERE e.class IN ({ids}) AND t.child >= 0"
        )
        frontier = {int(r[0]) for r in rows} - classes
        classes |= frontier
    ids = ",".join(map(str, sorted(classes)))
    nodes = egraph.sql(
        f"SELECT e.*, c.shape FROM enode e JOIN eclass c ON c.id = e.class "
        f"WHERE e.class IN ({ids}) ORDER BY e.class, e.id"
    ).to_pylist()
    if not nodes:
        raise RelsatError(f"no e-class {eclass} in the e-graph")
    lines = [
        "digraph eclasses {",
        "  compound=true; rankdir=TB;",
        '  node [shape=box, fontname="Helvetica", fontsize=10];',
    ]
    by_class: dict[int, list[dict]] = {}
    for n in nodes:
        by_class.setdefault(n["class"], []).append(n)
    anchor = {}
    for cls, members in by_class.items():
        lines.append(f"  subgraph cluster_{cls} {{")
        lines.append(
            f'    label="e-class {cls} {members[0]["shape"]}"; '
            f"style={'bold' if cls == eclass else 'dashed'};"
        )
        for n in members:
            skip = 0 if n["op"] == "opaque" else -1  # an opaque p0: its type's key (in s)
            params = [str(n[f"p{i}"]) for i in range(6) if n[f"p{i}"] >= 0 and i != skip]
            text = (
                n["op"]
                + (f"[{','.join(params)}]" if params else "")
                + (f" {n['s']}" if n["s"] else "")
            )
            style = ", style=dotted" if n["filtered"] else ""
            rule = f"\\n({n['rule']})" if n["rule"] else ""
            lines.append(f'    e{n["id"]} [label="{text}{rule}"{style}];')
        lines.append("  }")
        anchor[cls] = members[0]["id"]
    for n in nodes:
        for i in range(n["arity"]):
            child = n[f"c{i}"]
            if child in anchor:
                lines.append(f"  e{n['id']} -> e{anchor[child]} [lhead=cluster_{child}];")
    lines.append("}")
    return "\n".join(lines)
