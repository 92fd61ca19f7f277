"""What a rewrite changed: the operators of an optimized graph that its original does not have.

:func:`changed_nodes` matches the two graphs tensor by tensor, structurally, and answers the
optimized graph's operators that stay unmatched: the rewritten nodes themselves, not everything
downstream of them. A tensor of the optimized graph *stands for* a tensor of the original (computes
the same value) when

- **from the inputs** (hash-consing): its node has the op and parameters of an original node whose
  inputs its own inputs stand for (inputs and weights matched by name);
- **from the outputs**: it is the graph's output *i* and the original's output *i* is the other;
  or its node's output stands for an original node's with the same op and parameters, and each
  input is the original's or not known yet (then it is taken to be);
- **around a rewrite**: a node that changed but whose output stands for an original tensor (a
  fused conv, bias and activation stands for the original's activation) takes, for an input not
  known yet, the nearest original tensor of its shape such that the original's nodes between it,
  the known inputs and the output read exactly those inputs (no other input or weight).

A node is *changed* when its output stands for nothing in the original, or for an original
tensor made by another op, other parameters, or other direct inputs.

>>> from relsat.graph import GraphBuilder
>>> def g(fused):
...     b = GraphBuilder(); x = b.input([1, 2, 4, 4], name="x")
...     w, bias = b.weight([2, 2, 1, 1], name="w"), b.weight([1, 2, 1, 1], name="b")
...     y = b.conv2d_bias(x, w, bias) if fused else b.add(b.conv2d(x, w), bias)
...     return b.build(b.tanh(b.relu(y)))
>>> [g(True).nodes[i].op for i in changed_nodes(g(True), g(False))]
['conv2d_bias']
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from relsat.graph.graph import Graph, Node, Ref

__all__ = ["changed_nodes"]

LEAVES = ("input", "weight")
Tensor = tuple[int, int]  # (class, output index): one value, in either graph
_NEAR = 64  # original tensors looked at around a rewrite, nearest first


def changed_nodes(graph: Graph, against: Graph) -> set[int]:
    """The ids of ``graph``'s operators (leaves never) that a rewrite of ``against`` made."""
    return _Match(graph, against).run()


class _Match:
    """The two graphs' tensors matched; ``ident`` maps an optimized tensor to the original's."""

    def __init__(self, graph: Graph, against: Graph) -> None:
        self.graph, self.against = graph, against
        self.table: dict[str, int] = {}  # hash-cons key -> class
        self.rep: list[Node] = []  # class -> an original node of it
        self.cls: dict[int, int] = {}  # original node id -> class
        for m in against.nodes:
            c = self.table.setdefault(_key(m, [self.of(r) for r in m.inputs]), len(self.rep))
            self.cls[m.id] = c
            if c == len(self.rep):
                self.rep.append(m)
        self.ident: dict[Tensor, Tensor] = {}  # our (node id, index) -> original (class, index)
        self.same: set[int] = set()  # our nodes that are the original's
        self.tried: set[tuple[int, frozenset[Tensor]]] = set()  # rewrites looked around

    def of(self, r: Ref) -> Tensor:
        """An original tensor, by class."""
        return (self.cls[r.node], r.index)

    def run(self) -> set[int]:
        for r, o in zip(self.graph.outputs, self.against.outputs, strict=False):
            self.ident.setdefault((r.node, r.index), self.of(o))
        while self._forward() | self._backward() or self._onward():
            pass
        return {n.id for n in self.graph.nodes if n.op not in LEAVES and n.id not in self.same}

    def _forward(self) -> bool:
        """Hash-cons our nodes whose inputs are all known into the original's classes."""
        grew = False
        for n in self.graph.nodes:
            args = [self.ident.get((r.node, r.index)) for r in n.inputs]
            if n.id in self.same or None in args:
                continue
            c = self.table.get(_key(n, args))  # type: ignore[arg-type]  # no None left
            if c is None or any(self.ident.get((n.id, k), (c, k)) != (c, k) for k in _outs(n)):
                continue
            self.same.add(n.id)
            self.ident.update({(n.id, k): (c, k) for k in _outs(n)})
            grew = True
        return grew

    def _backward(self) -> bool:
        """From known outputs to inputs, consumers first."""
        grew = False
        for n in reversed(self.graph.nodes):
            known = [(k, self.ident[(n.id, k)]) for k in _outs(n) if (n.id, k) in self.ident]
            if n.op in LEAVES or not known:
                continue
            k, (c, index) = known[0]
            m = self.rep[c]
            if n.id not in self.same and k == index and self._same_step(n, m):
                self.same.add(n.id)
                grew = True
            if n.id in self.same:
                pairs = [(r, self.of(s)) for r, s in zip(n.inputs, m.inputs, strict=True)]
            else:
                pairs = self._around(n, (c, index))
            for r, t in pairs:
                if (r.node, r.index) not in self.ident:
                    self.ident[(r.node, r.index)] = t
                    grew = True
        return grew

    def _onward(self) -> bool:
        """A changed node whose output is not known yet, but whose rewritten region reads known
        tensors only: its output is the first original tensor of its shape computed from exactly
        those tensors (an added pair of matmuls, rewritten as one matmul of concatenations)."""
        for n in self.graph.nodes:
            if (
                n.op in LEAVES
                or len(n.outputs) != 1
                or n.id in self.same
                or (n.id, 0) in self.ident
            ):
                continue
            cut = self._frontier(n)
            if not cut or (n.id, frozenset(cut)) in self.tried:
                continue
            self.tried.add((n.id, frozenset(cut)))
            shape = n.outputs[0].shape
            for t in itertools.islice(self._descendants(cut), _NEAR):
                if self._shape(t) == shape and self._closes(t, cut):
                    self.ident[(n.id, 0)] = t
                    return True
        return False

    def _frontier(self, n: Node) -> set[Tensor] | None:
        """The known tensors ``n`` is computed from through unknown ones; None when that reaches
        a leaf the original lacks or more than a region's worth of nodes."""
        cut: set[Tensor] = set()
        seen, stack = {n.id}, [n]
        while stack:
            for r in stack.pop().inputs:
                if (r.node, r.index) in self.ident:
                    cut.add(self.ident[(r.node, r.index)])
                elif self.graph.node(r).op in LEAVES or len(seen) > _NEAR:
                    return None
                elif r.node not in seen:
                    seen.add(r.node)
                    stack.append(self.graph.node(r))
        return cut

    def _descendants(self, cut: set[Tensor]) -> Iterator[Tensor]:
        """The original tensors computed from ``cut``, in the original's order."""
        reads = {c for c, _ in cut}
        for m in self.against.nodes[min(self.rep[c].id for c in reads) + 1 :]:
            if self.rep[self.cls[m.id]] is not m:
                continue
            if any(self.cls[r.node] in reads for r in m.inputs):
                reads.add(self.cls[m.id])
                yield from ((self.cls[m.id], k) for k in _outs(m))

    def _same_step(self, n: Node, m: Node) -> bool:
        """Does ``n`` apply ``m``'s op to ``m``'s inputs, so far as they are known?"""
        if _key(n, []) != _key(m, []) or len(n.inputs) != len(m.inputs):
            return False
        return all(
            self.ident.get((r.node, r.index), self.of(s)) == self.of(s)
            for r, s in zip(n.inputs, m.inputs, strict=True)
        )

    def _around(self, n: Node, out: Tensor) -> list[tuple[Ref, Tensor]]:
        """For a changed node that stands for ``out``: its unknown inputs, each the nearest
        original tensor of its shape that closes the rewritten region (or none when no choice
        does)."""
        known = {self.ident[(r.node, r.index)] for r in n.inputs if (r.node, r.index) in self.ident}
        unknown = [r for r in n.inputs if (r.node, r.index) not in self.ident]
        if not unknown or any(self.graph.node(r).op in LEAVES for r in unknown):
            return []
        if (n.id, frozenset(known)) in self.tried:
            return []
        self.tried.add((n.id, frozenset(known)))
        chosen: list[Tensor] = []
        for r in unknown:
            shape = self.graph.shape(r)
            for t in itertools.islice(self._ancestors(out, known), _NEAR):
                fits = t not in chosen and t not in known and self._shape(t) == shape
                if fits and self._closes(out, known | {*chosen, t}):
                    chosen.append(t)
                    break
            else:
                return []
        return list(zip(unknown, chosen, strict=True))

    def _shape(self, t: Tensor) -> tuple[int, ...]:
        return self.rep[t[0]].outputs[t[1]].shape

    def _ancestors(self, out: Tensor, stop: set[Tensor]) -> Iterator[Tensor]:
        """The original tensors ``out`` is computed from, nearest first, not past ``stop``."""
        seen, queue = {out}, [out]
        while queue:
            t = queue.pop(0)
            for r in self.rep[t[0]].inputs:
                s = self.of(r)
                if s not in seen:
                    seen.add(s)
                    yield s
                    if s not in stop:
                        queue.append(s)

    def _closes(self, out: Tensor, cut: set[Tensor]) -> bool:
        """Is ``out`` computed from exactly the tensors ``cut`` (each read, no other leaf)?"""
        reached: set[Tensor] = set()
        seen, stack = {out}, [out]
        while stack:
            m = self.rep[stack.pop()[0]]
            if m.op in LEAVES:
                return False
            for r in m.inputs:
                s = self.of(r)
                if s in cut:
                    reached.add(s)
                elif s not in seen:
                    seen.add(s)
                    stack.append(s)
        return reached == cut


def _key(n: Node, args: list[Tensor]) -> str:
    """A node's hash-cons key: leaves by name, others by op, parameters and input tensors."""
    if n.op in LEAVES:
        return f"{n.op}:{n.name}"
    return f"{n.op}{sorted(n.params.items())}{args}"


def _outs(n: Node) -> range:
    return range(len(n.outputs))
