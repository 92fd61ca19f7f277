"""Tensor graphs: an immutable DAG of operator nodes with inferred shapes (built by
:class:`~relsat.graph.graph.builder.GraphBuilder`).

A node's outputs are addressed by :class:`Ref` ``(node, index)``; ``split`` and opaque ops can have
several outputs, and a graph can have several outputs. Nodes are stored in topological order and
their ids are their positions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from relsat.errors import GraphError
from relsat.graph.ops import Params, TensorType

__all__ = ["Graph", "Node", "Ref", "same_computation"]


@dataclass(frozen=True, order=True)
class Ref:
    """Output ``index`` of node ``node``."""

    node: int
    index: int = 0


@dataclass(frozen=True)
class Node:
    """One operator application. ``name`` is an optional label (input/weight: the tensor name)."""

    id: int
    op: str
    params: Params
    inputs: tuple[Ref, ...]
    outputs: tuple[TensorType, ...]
    name: str | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the first output."""
        return self.outputs[0].shape


class Graph:
    """An immutable, validated tensor graph. Build one with :class:`GraphBuilder`."""

    __slots__ = ("_by_name", "nodes", "outputs", "values")

    def __init__(
        self,
        nodes: Sequence[Node],
        outputs: Sequence[Ref],
        values: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.outputs: tuple[Ref, ...] = tuple(outputs)
        frozen = {}
        for key, arr in (values or {}).items():
            if not (
                isinstance(arr, np.ndarray) and arr.dtype == np.float32 and not arr.flags.writeable
            ):
                arr = np.array(arr, dtype=np.float32)  # a private, read-only copy, once
                arr.setflags(write=False)
            frozen[key] = arr  # already one: graphs derived from a graph share its weights
        #: Weight values by weight name, for weights that have real data (e.g. from ONNX).
        self.values: Mapping[str, np.ndarray] = MappingProxyType(frozen)
        self._by_name = {n.name: n for n in self.nodes if n.op in ("input", "weight")}

    # --- access ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def node(self, ref: Ref | int) -> Node:
        return self.nodes[ref.node if isinstance(ref, Ref) else ref]

    def type(self, ref: Ref) -> TensorType:
        return self.nodes[ref.node].outputs[ref.index]

    def shape(self, ref: Ref) -> tuple[int, ...]:
        return self.type(ref).shape

    def tensor(self, name: str) -> Node:
        """The input or weight node called ``name``."""
        try:
            return self._by_name[name]
        except KeyError:
            raise GraphError(f"no input or weight named {name!r}") from None

    @property
    def inputs(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.op == "input")

    @property
    def weights(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.op == "weight")

    @property
    def output_shapes(self) -> list[tuple[int, ...]]:
        return [self.shape(r) for r in self.outputs]

    def consumers(self) -> dict[int, list[int]]:
        """Node id → ids of the nodes that read one of its outputs."""
        users: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for r in n.inputs:
                users[r.node].append(n.id)
        return users

    def op_counts(self, *, leaves: bool = False) -> Counter[str]:
        """Operator histogram; inputs and weights only with ``leaves=True``."""
        return Counter(n.op for n in self.nodes if leaves or n.op not in ("input", "weight"))

    def all_weights(self) -> list[bool]:
        """Per node: can its value be computed from weights alone (TENSAT's ``all_weights``)?"""
        flags: list[bool] = []
        for n in self.nodes:
            if n.op in ("input", "weight", "scalar"):
                flags.append(n.op != "input")
            elif n.op == "opaque" and n.params["type"] == "Constant":  # a boolean constant
                flags.append(True)
            else:
                flags.append(bool(n.inputs) and all(flags[r.node] for r in n.inputs))
        return flags

    def reachable(self) -> Graph:
        """The graph restricted to nodes the outputs depend on, renumbered (order kept). Every
        input stays, used or not: the inputs are the graph's interface."""
        keep = set()
        stack = [r.node for r in self.outputs] + [n.id for n in self.nodes if n.op == "input"]
        while stack:
            i = stack.pop()
            if i not in keep:
                keep.add(i)
                stack.extend(r.node for r in self.nodes[i].inputs)
        new_id = {old: new for new, old in enumerate(sorted(keep))}
        nodes = [
            Node(
                new_id[n.id],
                n.op,
                n.params,
                tuple(Ref(new_id[r.node], r.index) for r in n.inputs),
                n.outputs,
                n.name,
            )
            for n in self.nodes
            if n.id in keep
        ]
        names = {n.name for n in nodes}
        return Graph(
            nodes,
            [Ref(new_id[r.node], r.index) for r in self.outputs],
            {k: v for k, v in self.values.items() if k in names},
        )

    # --- equality -------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return (
            self.nodes == other.nodes
            and self.outputs == other.outputs
            and self.values.keys() == other.values.keys()
            and all(np.array_equal(v, other.values[k]) for k, v in self.values.items())
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        ops = ", ".join(f"{op} {k}" for op, k in sorted(self.op_counts().items()))
        return f"<Graph {len(self.nodes)} nodes ({ops}); outputs {self.output_shapes}>"


def same_computation(a: Graph, b: Graph) -> bool:
    """Do ``a`` and ``b`` apply the same operators to the same tensors? Node order and the
    labels of inner nodes (which decoding drops) do not count; a merged duplicate does."""
    a, b = a.reachable(), b.reachable()
    if len(a) != len(b) or a.values.keys() != b.values.keys():
        return False
    if not all(np.array_equal(v, b.values[k]) for k, v in a.values.items()):
        return False
    ids: dict[tuple[Any, ...], int] = {}  # one structural key per distinct computation

    def outputs(g: Graph) -> list[tuple[int, int]]:
        node_ids: list[int] = []
        for n in g.nodes:
            label = n.name if n.op in ("input", "weight") else None
            inputs = tuple((node_ids[r.node], r.index) for r in n.inputs)
            key = (n.op, n.params, n.outputs, label, inputs)
            node_ids.append(ids.setdefault(key, len(ids)))
        return [(node_ids[r.node], r.index) for r in g.outputs]

    return outputs(a) == outputs(b)
