"""The stable, versioned JSON form of a :class:`~relsat.graph.graph.Graph`.

```
{"format": "relsat-graph", "version": 1,
 "nodes":   [{"id": 0, "op": "input", "name": "x", "params": {"shape": [1, 512]},
              "inputs": [], "outputs": [[1, 512]]}, ...],
 "outputs": [[node, index], ...],
 "values":  {"w0": {"dtype": "float32", "shape": [...], "data": "<base64, little endian>"}}}
```

Keys are sorted and node ids are positions, so equal graphs give byte-identical text. Reading
replays every node through :class:`~relsat.graph.graph.GraphBuilder`, so a file gets the same
checks as a
builder call; stored output shapes must agree with the inferred ones.
"""

from __future__ import annotations

import base64
import heapq
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from relsat.errors import GraphError, GraphFormatError
from relsat.graph.builder import GraphBuilder, canonical_attrs

if TYPE_CHECKING:
    from relsat.graph.builder import Tensor
    from relsat.graph.graph import Graph

FORMAT = "relsat-graph"
VERSION = 1

__all__ = ["FORMAT", "VERSION", "from_json", "to_json"]


def _params_to_json(op: str, params: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(params)
    if op == "opaque":
        out["attrs"] = json.loads(out["attrs"])
    return out


def to_json(graph: Graph, *, indent: int | None = None) -> str:
    nodes = [
        {
            "id": n.id,
            "op": n.op,
            "name": n.name,
            "params": _params_to_json(n.op, n.params),
            "inputs": [[r.node, r.index] for r in n.inputs],
            "outputs": [list(t.shape) for t in n.outputs],
        }
        for n in graph.nodes
    ]
    values = {
        k: {
            "dtype": "float32",
            "shape": list(v.shape),
            "data": base64.b64encode(np.ascontiguousarray(v, dtype="<f4").tobytes()).decode(),
        }
        for k, v in sorted(graph.values.items())
    }
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "nodes": nodes,
        "outputs": [[r.node, r.index] for r in graph.outputs],
        "values": values,
    }
    return json.dumps(doc, sort_keys=True, indent=indent)


def from_json(text: str | bytes, *, path: str | None = None) -> Graph:
    """Read :func:`to_json` output back. Every node is replayed through :class:`GraphBuilder`
    (the same checks as a builder call) and stored output shapes must agree with the inferred
    ones; anything else is a :class:`GraphFormatError` naming ``path`` and the node."""

    def fail(message: str, **fields: Any) -> GraphFormatError:
        return GraphFormatError(message, path=path, **fields)

    doc = _document(text, path)
    by_id = _nodes_by_id(doc, fail)
    values = _read_values(doc.get("values", {}), fail)
    builder = GraphBuilder()
    handles: dict[int, tuple[Tensor, ...]] = {}
    for nid in _topological(by_id, fail):
        handles[nid] = _replay(builder, by_id[nid], handles, values, fail)
    if values:
        raise fail(f"values given for unknown weights: {sorted(values)}")
    outputs = doc.get("outputs")
    if not isinstance(outputs, list) or not outputs:
        raise fail('"outputs" must be a non-empty list of [node, index]')
    result = []
    for ref in outputs:
        ok = isinstance(ref, list) and len(ref) == 2 and ref[0] in handles
        if not ok or not 0 <= ref[1] < len(handles[ref[0]]):
            raise fail(f"graph output {ref!r} does not name an existing node output")
        result.append(handles[ref[0]][ref[1]])
    try:
        return builder.build(result)
    except GraphError as exc:
        raise fail(exc.reason, node=exc.node, op=exc.op, name=exc.name) from None


def _document(text: str | bytes, path: str | None) -> dict[str, Any]:
    """The parsed JSON document, checked to be a relsat graph of this version."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GraphFormatError(
            f"invalid JSON: {exc.msg}", path=path, line=exc.lineno, column=exc.colno
        ) from None
    except UnicodeDecodeError as exc:
        raise GraphFormatError(f"not UTF-8 text: {exc.reason}", path=path) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise GraphFormatError(f'not a relsat graph (expected "format": "{FORMAT}")', path=path)
    if doc.get("version") != VERSION:
        raise GraphFormatError(
            f"unsupported graph format version {doc.get('version')!r} "
            f"(this relsat reads version {VERSION})",
            path=path,
        )
    return doc


def _nodes_by_id(doc: dict[str, Any], fail: Any) -> dict[int, dict[str, Any]]:
    """The raw nodes by id, each checked for its fields and the form of its input refs."""
    raw_nodes = doc.get("nodes")
    if not isinstance(raw_nodes, list):
        raise fail('"nodes" must be a list')
    by_id: dict[int, dict[str, Any]] = {}
    for pos, raw in enumerate(raw_nodes):
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), int):
            raise fail(f'nodes[{pos}] must be an object with an integer "id"')
        if raw["id"] in by_id:
            raise fail("duplicate node id", node=raw["id"])
        for key, kind in (("op", str), ("inputs", list), ("params", dict), ("outputs", list)):
            if not isinstance(raw.get(key), kind):
                raise fail(f"field {key!r} missing or not a {kind.__name__}", node=raw["id"])
        for ref in raw["inputs"]:
            if not (
                isinstance(ref, list) and len(ref) == 2 and all(isinstance(v, int) for v in ref)
            ):
                raise fail(f"input {ref!r} must be [node, index]", node=raw["id"], op=raw["op"])
        by_id[raw["id"]] = raw
    return by_id


def _replay(
    builder: GraphBuilder,
    raw: dict[str, Any],
    handles: dict[int, tuple[Tensor, ...]],
    values: dict[str, np.ndarray],
    fail: Any,
) -> tuple[Tensor, ...]:
    """Add one raw node to ``builder`` (a weight takes its value out of ``values``) and check
    its stored output shapes against the inferred ones."""
    nid, op, params, name = raw["id"], raw["op"], dict(raw["params"]), raw.get("name")
    inputs = []
    for src, idx in raw["inputs"]:
        if not 0 <= idx < len(handles[src]):
            raise fail(
                f"input [{src}, {idx}]: node {src} has {len(handles[src])} outputs",
                node=nid,
                op=op,
            )
        inputs.append(handles[src][idx])
    try:
        if op in ("input", "weight"):
            leaf = builder.input if op == "input" else builder.weight
            shape = params.pop("shape", None)
            if params or not isinstance(shape, list):
                raise GraphError(f"{op} takes exactly one parameter, shape", op=op)
            extra = {"value": values.pop(name)} if op == "weight" and name in values else {}
            made: tuple[Tensor, ...] = (leaf(shape, name=name, **extra),)
        else:
            if op == "opaque" and isinstance(params.get("attrs"), dict):
                params["attrs"] = canonical_attrs(params["attrs"])
            made = builder.add_node(op, inputs, params, name=name)
    except GraphError as exc:
        raise fail(exc.reason, node=nid, op=op, name=name, shapes=exc.shapes) from None
    declared = [tuple(s) if isinstance(s, list) else s for s in raw["outputs"]]
    inferred = [t.shape for t in made]
    if declared != inferred:
        raise fail(
            f"stored output shapes {raw['outputs']} disagree with inferred "
            f"{[list(s) for s in inferred]}",
            node=nid,
            op=op,
            name=name,
        )
    return made


def _topological(by_id: dict[int, dict[str, Any]], fail: Any) -> list[int]:
    """Ids in ascending order where that is topological; dangling inputs and cycles refused."""
    pending = {}
    users: dict[int, list[int]] = {i: [] for i in by_id}
    for nid, raw in by_id.items():
        deps = {src for src, _ in raw["inputs"]}
        for src in deps:
            if src not in by_id:
                raise fail(f"dangling input: node {src} does not exist", node=nid, op=raw["op"])
            users[src].append(nid)
        pending[nid] = len(deps)
    ready = [nid for nid in by_id if pending[nid] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        nid = heapq.heappop(ready)
        order.append(nid)
        for user in users[nid]:
            pending[user] -= 1
            if pending[user] == 0:
                heapq.heappush(ready, user)
    if len(order) != len(by_id):
        cyclic = _on_cycles({nid for nid, k in pending.items() if k > 0}, by_id)
        raise fail(f"cycle among nodes {cyclic[:20]}", node=cyclic[0], op=by_id[cyclic[0]]["op"])
    return order


def _on_cycles(stuck: set[int], by_id: dict[int, dict[str, Any]]) -> list[int]:
    """Of the nodes Kahn's algorithm could not order, drop those merely downstream of a cycle."""
    while True:
        used = {src for nid in stuck for src, _ in by_id[nid]["inputs"] if src in stuck}
        if used == stuck:
            return sorted(stuck)
        stuck = used


def _read_values(raw: Any, fail: Any) -> dict[str, np.ndarray]:
    if not isinstance(raw, dict):
        raise fail('"values" must be an object')
    values = {}
    for name, spec in raw.items():
        try:
            if spec["dtype"] != "float32":
                raise ValueError(f"dtype {spec['dtype']!r} (only float32)")
            data = base64.b64decode(spec["data"], validate=True)
            values[name] = np.frombuffer(data, dtype="<f4").reshape(spec["shape"]).copy()
        except (KeyError, TypeError, ValueError) as exc:
            raise fail(f"bad value for weight {name!r}: {exc}") from None
    return values
