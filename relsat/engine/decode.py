"""From the e-graph back to a Graph: build the term that a choice of one e-node per class denotes.

The inverse of :func:`relsat.engine.egraph.encode_node`. Extraction chooses the e-nodes; this
module only
reads them (one query) and rebuilds the graph with :class:`~relsat.graph.graph.GraphBuilder`, so the
result is validated like any other graph. Weight values stored in the e-graph's source graph are
carried over by name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from relsat.engine.egraph import EGraph
from relsat.errors import GraphError
from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Graph
from relsat.graph.ops import ACTIVATIONS, PADDINGS, int_params, opaque_parts

__all__ = ["decode", "random_choice"]


def decode(
    egraph: EGraph, choice: Mapping[int, int], values: Mapping[str, np.ndarray] | None = None
) -> Graph:
    """The graph computing the e-graph's outputs with e-node ``choice[class]`` for each class.

    Raises GraphError when a needed class has no choice or the choice is cyclic.
    """
    rows = {
        r["id"]: r
        for r in egraph.sql(
            "SELECT e.*, c.shape FROM enode e JOIN eclass c ON c.id = e.class"
        ).to_pylist()
    }
    outputs = [r[0] for r in egraph.db.execute("SELECT class FROM output ORDER BY pos")]
    b = GraphBuilder()
    built: dict[int, tuple[Tensor, ...]] = {}
    visiting: set[int] = set()

    def build(root: int) -> tuple[Tensor, ...]:
        # depth-first with an explicit stack: a 48-layer model is deeper than Python's stack
        stack = [(root, False)]
        while stack:
            cls, ready = stack.pop()
            if cls in built:
                continue
            if ready:  # its children are built
                row = rows[choice[cls]]
                kids = [built[row[f"c{i}"]] for i in range(row["arity"])]
                visiting.discard(cls)
                built[cls] = _node(b, row, kids, values or {})
                continue
            if cls in visiting:  # on the path from the root to here
                raise GraphError(f"the chosen e-nodes form a cycle through class {cls}")
            if cls not in choice:
                raise GraphError(f"no e-node chosen for class {cls}")
            visiting.add(cls)
            stack.append((cls, True))
            row = rows[choice[cls]]
            stack.extend((row[f"c{i}"], False) for i in reversed(range(row["arity"])))
        return built[root]

    # The interface first: every input of the source graph, in its order, used or not.
    for row in sorted(rows.values(), key=lambda r: r["id"]):
        cls = row["class"]
        if row["op"] == "input" and row["born"] == 0 and choice.get(cls, row["id"]) == row["id"]:
            built[cls] = _node(b, row, [], values or {})
    return b.build([build(c)[0] for c in outputs])


def _node(
    b: GraphBuilder,
    r: dict[str, Any],
    kids: list[tuple[Tensor, ...]],
    values: Mapping[str, np.ndarray],
) -> tuple[Tensor, ...]:
    op, p, s = r["op"], [r[f"p{i}"] for i in range(6)], r["s"]
    xs = [k[0] for k in kids]
    if op == "input":
        return (b.input(r["shape"], name=s),)
    if op == "weight":
        return (b.weight(r["shape"], name=s, value=values.get(s)),)
    if op == "split":  # a pair: both pieces, cut at p1
        return b.split(xs[0], p[0], [p[1], xs[0].shape[p[0]] - p[1]])
    if op in ("split_0", "split_1"):
        return (kids[0][int(op[-1])],)
    if op == "matmul":
        return (b.matmul(xs[0], xs[1], activation=ACTIVATIONS[p[0]]),)
    if op == "matmul_bias":
        return (b.matmul_bias(xs[0], xs[1], xs[2], activation=ACTIVATIONS[p[0]]),)
    if op == "conv2d_bias":
        return (
            b.conv2d_bias(
                xs[0],
                xs[1],
                xs[2],
                stride=(p[0], p[1]),
                padding=PADDINGS[p[2]],
                activation=ACTIVATIONS[p[3]],
            ),
        )
    if op == "conv2d":
        return (
            b.conv2d(
                xs[0],
                xs[1],
                stride=(p[0], p[1]),
                padding=PADDINGS[p[2]],
                activation=ACTIVATIONS[p[3]],
            ),
        )
    if op in ("poolmax", "poolavg"):
        pool = b.maxpool2d if op == "poolmax" else b.avgpool2d
        return (pool(xs[0], (p[0], p[1]), (p[2], p[3]), PADDINGS[p[4]], ACTIVATIONS[p[5]]),)
    if op == "concat":
        return (b.concat(p[0], xs),)
    if op == "merge":
        return (b.merge(xs[0], p[0]),)
    if op == "transpose":
        return (b.transpose(xs[0], [int(d) for d in s.split("_")], shuffle=bool(p[0])),)
    if op == "reshape":
        return (b.reshape(xs[0], [int(d) for d in s.split("_")]),)
    if op == "expand":
        return (b.expand(xs[0], [int(d) for d in s.split("_")]),)
    if op == "opaque":
        kind, attrs, shapes = opaque_parts(s)
        return b.opaque(kind, xs, json.loads(shapes), json.loads(attrs))
    if op == "noop":
        return (b.noop(*xs),)
    floats = int_params(op, p)  # scalar, layernorm, skiplayernorm: float32 bits in p0
    if floats is not None:
        return b.add_node(op, xs, floats)
    return b.add_node(op, xs)  # ewadd, ewmul, relu, relu6, tanh, sigmoid, dropout, enlarge


def random_choice(egraph: EGraph, seed: int = 0, tries: int = 50) -> dict[int, int]:
    """A random acyclic choice of one e-node per class reachable from the outputs.

    For tests: any such choice must compute the same function as the input graph.
    """
    rng = np.random.default_rng(seed)
    rows = egraph.sql(
        "SELECT id, class, arity, c0, c1, c2, c3, c4, c5, c6, c7 FROM enode ORDER BY id"
    ).to_pylist()
    by_class: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_class.setdefault(r["class"], []).append(r)
    outputs = [r[0] for r in egraph.db.execute("SELECT class FROM output ORDER BY pos")]
    for _ in range(tries):
        choice: dict[int, int] = {}
        done: set[int] = set()
        if all(_pick(c, by_class, rng, choice, done, set()) for c in outputs):
            return choice
    raise GraphError("no acyclic choice found")


def _pick(
    cls: int,
    by_class: dict[int, list[dict[str, Any]]],
    rng: np.random.Generator,
    choice: dict[int, int],
    done: set[int],
    path: set[int],
) -> bool:
    if cls in done:
        return True
    if cls in path:
        return False
    path.add(cls)
    options = list(by_class[cls])
    rng.shuffle(options)
    for r in options:
        if all(_pick(r[f"c{i}"], by_class, rng, choice, done, path) for i in range(r["arity"])):
            choice[cls] = r["id"]
            done.add(cls)
            path.discard(cls)
            return True
    path.discard(cls)
    return False
