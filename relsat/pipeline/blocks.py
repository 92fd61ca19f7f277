"""Repeated blocks, explored once: fold a graph made of identical layers into one copy per
distinct block, and unfold the optimized copy back into every layer.

BERT-24 is one layer 24 times with different weights; exploring all 24 copies repeats the same
rewrites 24 times, and under a node limit spreads the e-graph thin over them. :func:`fold`
cuts the graph into *pieces* — contiguous runs of its operators in topological order — finds
the runs of consecutive pieces that compute the same function of their boundary tensors and
weights (the same operators, parameters, types and wiring; the weights' values may differ), and
builds a **folded graph** holding each distinct piece once, its boundary tensors as inputs and
the tensors later pieces read as outputs. The pipeline explores, prices and extracts the folded
graph with each distinct piece's prices counted as many times as it occurs, so the extraction's
cost is the whole graph's cost; :meth:`Folding.unfold` then instantiates the optimized piece once
per occurrence, on that occurrence's own boundary tensors and weights.

How the pieces are found: every operator (not the leaves: inputs, weights, constants) gets a
*key* — op, parameters, output types and, per input, what kind of tensor it reads — and the
longest tandem repeat in the key sequence (the period ``p`` and start that cover the most
operators more than once) is taken, recursively on what is left before and after it. Among the
``p`` rotations of a repeat, the cut is made where the fewest tensors cross it, and among
those where the fewest single-reader tensors do (after a transformer layer's last LayerNorm,
whose output fans out, not between the residual add and the LayerNorm a fusion joins). The
keys only propose: each occurrence's full *signature* (every operator with its inputs numbered
inside the piece) is compared, and only occurrences whose signatures are equal share one copy —
so a fold is exact by construction, and the whole optimized graph is still verified against
the original.

The first and last copies of a repeat (of three or more) are explored with their neighbours,
not as copies, so what joins a repeat to the rest (GPT-2's last residual add and final
LayerNorm) is seen whole. What is given up: a rewrite across a cut inside a repeat, and common
subexpressions of two occurrences (the folded graph computes each occurrence's own). A graph
whose pieces share a matrix or filter (tied weights: an unrolled RNN such as NasRNN, whose
steps TASO's rules batch into one matmul across the cuts) is not folded. The e-graph kept for
SQL is the folded graph's.

>>> from relsat import GraphBuilder
>>> b = GraphBuilder()
>>> t = b.input([4, 8])
>>> for _ in range(10):
...     t = b.relu(b.matmul(t, b.weight([8, 8])))
>>> folding = fold(b.build(t))
>>> folding.describe()
'10 pieces, 1 distinct (2 ops ×10): 18 of 20 operators folded away'
>>> len(folding.graph), folding.graph.outputs == folding.graph.outputs[:1]
(4, True)
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from relsat.errors import GraphError
from relsat.extract.problem import Problem
from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Graph, Node, Ref

__all__ = ["MIN_SAVED", "Folding", "Piece", "fold"]

#: A fold is made only when it removes at least this many operators from what is explored
#: (fewer is not worth losing the rewrites across its cuts).
MIN_SAVED = 16


@dataclass(frozen=True)
class Piece:
    """A contiguous run of the original graph's operators (node ids in topological order):
    ``inputs`` the tensors it reads that are made elsewhere (order of first read), ``weights``
    the weight nodes it reads (order of first read), ``outputs`` the tensors it makes that are
    read after it or are graph outputs (order made); ``copy`` its distinct piece."""

    nodes: tuple[int, ...]
    inputs: tuple[Ref, ...]
    weights: tuple[int, ...]
    outputs: tuple[Ref, ...]
    copy: int


@dataclass(frozen=True)
class Folding:
    """The folded graph (one copy per distinct piece, side by side: copy ``k``'s inputs are
    named ``blk<k>.in<j>`` (``blk_`` … when the original has a tensor named so), its weights
    keep their names, its outputs are consecutive
    outputs of the folded graph), the original's pieces in order, and how often each copy
    occurs (``count[k]``)."""

    original: Graph
    graph: Graph
    pieces: tuple[Piece, ...]
    count: tuple[int, ...]
    first: tuple[int, ...]  # per copy: the index of the piece it was built from
    out_start: tuple[int, ...]  # per copy: its first output's position in graph.outputs
    prefix: str = "blk"  # of the copies' input names; no tensor of the original starts with it
    #: The most tensors made inside a repeat that cross a cut between two of its copies (1: a
    #: chain of layers; ``optimize(blocks="auto")`` folds only such graphs).
    streams: int = 1

    def input_name(self, k: int, j: int) -> str:
        """The name of copy ``k``'s ``j``-th boundary input in the folded graph."""
        return f"{self.prefix}{k}.in{j}"

    @property
    def saved(self) -> int:
        """Operators of the original that the folded graph does not repeat."""
        ops = sum(len(p.nodes) for p in self.pieces)
        return ops - sum(len(self.pieces[i].nodes) for i in self.first)

    def describe(self) -> str:
        """One line: the distinct pieces, their sizes and counts."""
        parts = [
            f"{len(self.pieces[i].nodes)} ops ×{self.count[k]}" for k, i in enumerate(self.first)
        ]
        return (
            f"{len(self.pieces)} pieces, {len(self.first)} distinct ({', '.join(parts)}): "
            f"{self.saved} of {sum(len(p.nodes) for p in self.pieces)} operators folded away"
        )

    def restrict(
        self, problem: Problem, leaves: Mapping[int, str]
    ) -> tuple[np.ndarray, np.ndarray]:
        """How the whole graph runs the folded graph's e-graph: per problem node, how many times
        (the counts of the copies that use its class), and whether it is forbidden.

        ``leaves``: problem node → name, for the input and weight e-nodes. The copies sit side
        by side in one e-graph, and a rule without shared variables (two ReLUs batched into one)
        links two of them; an e-node is allowed only when every copy that uses its class can
        compute it from its own inputs, its weights and constants — the input graph's e-nodes
        always can, so extraction stays feasible.
        """
        nc, ptr, idx = problem.node_class, problem.child_ptr, problem.child_idx
        n_nodes, n_classes = len(nc), int(nc.max(initial=-1)) + 1
        arity = np.diff(ptr)
        owner: dict[str | None, set[int]] = {}  # weight name -> the copies that read it
        for k, i in enumerate(self.first):
            for w in self.pieces[i].weights:
                owner.setdefault(self.original.nodes[w].name, set()).add(k)
        inner = arity > 0
        starts = ptr[:-1][inner]
        valid = []
        for k in range(len(self.count)):
            ok = ~inner  # constants; then the inputs and weights copy k may read
            for i, name in leaves.items():
                ok[i] = name.startswith(f"{self.prefix}{k}.in") or k in owner.get(name, ())
            have = np.zeros(n_classes, dtype=bool)
            while True:  # the classes copy k can compute, to a fixpoint
                have_now = np.zeros(n_classes, dtype=bool)
                have_now[nc[ok]] = True
                if (have_now == have).all():
                    break
                have = have_now
                if len(starts):
                    ok[inner] = np.logical_and.reduceat(have[idx], starts)
            valid.append((ok, self._reached(problem, k, ok)))
        used = np.zeros(n_nodes, dtype=bool)
        times = np.zeros(n_nodes, dtype=np.float64)
        for k, (_, reached) in enumerate(valid):
            in_k = reached[nc]
            used |= in_k
            times += np.where(in_k, self.count[k], 0.0)
        usable = used.copy()
        for ok, reached in valid:
            usable &= ~reached[nc] | ok
        return np.maximum(times, 1.0), ~usable & used

    def _reached(self, problem: Problem, k: int, ok: np.ndarray) -> np.ndarray:
        """The classes copy ``k``'s outputs reach through the e-nodes it can compute."""
        nc, ptr, idx = problem.node_class, problem.child_ptr, problem.child_idx
        n_classes = int(nc.max(initial=-1)) + 1
        members = np.argsort(nc, kind="stable")
        bounds = np.searchsorted(nc[members], np.arange(n_classes + 1))
        ends = [*self.out_start[1:], len(self.graph.outputs)]
        seen = np.zeros(n_classes, dtype=bool)
        stack = [int(c) for c in problem.roots[self.out_start[k] : ends[k]]]
        while stack:
            c = stack.pop()
            if seen[c]:
                continue
            seen[c] = True
            for i in members[bounds[c] : bounds[c + 1]].tolist():
                if ok[i]:
                    stack.extend(int(x) for x in idx[ptr[i] : ptr[i + 1]] if not seen[x])
        return seen

    def unfold(self, folded: Graph) -> Graph:
        """The whole graph from an optimized folded graph (same inputs, weights and outputs as
        :attr:`graph`): each piece is the optimized copy of its distinct piece, on its own
        boundary tensors and weights. The original's inputs and weights keep their order."""
        orig = self.original
        b = GraphBuilder()
        made: dict[Ref, Tensor] = {}
        for n in orig.nodes:  # the interface first, as the original has it
            if n.op == "input":
                made[Ref(n.id)] = b.input(n.shape, name=n.name)
            elif n.op == "weight":
                made[Ref(n.id)] = b.weight(
                    n.shape, name=n.name, value=orig.values.get(n.name or "")
                )
        names = {n.name: n.id for n in folded.nodes if n.op in ("input", "weight")}
        for piece in self.pieces:
            rep = self.pieces[self.first[piece.copy]]
            leaf: dict[int, Tensor] = {}  # folded node id -> this piece's tensor
            for j, ref in enumerate(piece.inputs):
                fid = names.get(self.input_name(piece.copy, j))
                if fid is not None:
                    leaf[fid] = made[ref]
            for wr, wi in zip(rep.weights, piece.weights, strict=True):
                fid = names.get(orig.nodes[wr].name)
                if fid is not None:
                    leaf[fid] = made[Ref(wi)]
            start = self.out_start[piece.copy]
            built = _Copier(folded, b, leaf)
            for j, ref in enumerate(piece.outputs):
                made[ref] = built.tensor(folded.outputs[start + j])
        # graph outputs read inputs or weights directly, or a piece's outputs
        return b.build([made[r] for r in orig.outputs])


class _Copier:
    """Copies the part of ``src`` a set of refs depends on into builder ``b``, leaves given."""

    def __init__(self, src: Graph, b: GraphBuilder, leaves: dict[int, Tensor]) -> None:
        self.src, self.b = src, b
        self.done: dict[int, tuple[Tensor, ...]] = {k: (v,) for k, v in leaves.items()}

    def tensor(self, ref: Ref) -> Tensor:
        stack = [ref.node]
        while stack:
            i = stack[-1]
            if i in self.done:
                stack.pop()
                continue
            node = self.src.nodes[i]
            todo = [r.node for r in node.inputs if r.node not in self.done]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            if node.op in ("input", "weight"):
                raise GraphError(f"leaf {node.name!r} of the folded graph has no counterpart")
            ins = [self.done[r.node][r.index] for r in node.inputs]
            self.done[i] = self.b.add_node(node.op, ins, node.params, name=node.name)
        return self.done[ref.node][ref.index]


# --- finding the pieces ------------------------------------------------------------------------


def fold(graph: Graph, *, min_saved: int = MIN_SAVED) -> Folding | None:
    """The folding of ``graph``, or None when it has no repeated blocks worth folding (fewer
    than ``min_saved`` operators would be explored once instead of several times)."""
    order = _stream_order(graph)
    if len(order) <= min_saved:
        return None
    pos = {nid: i for i, nid in enumerate(order)}
    keys = _keys(graph)
    last = _last_use(graph, order)
    live, chained = _crossing(graph, last, pos)
    cuts: set[int] = {0, len(order)}
    score = live * (len(order) + 1) + chained  # fewest crossing, then fewest chains cut
    repeats: list[tuple[int, int, int]] = []
    _find(np.array([keys[i] for i in order], dtype=np.int64), 0, len(order), score, repeats)
    for a, b, n in repeats:
        cuts.update(range(a, b + 1, (b - a) // n))
    for a, b, n in repeats:  # the first and last copies join their neighbours
        if n >= 3:
            cuts.difference_update({a, b} - {0, len(order)})
    bounds = sorted(cuts)
    spans = list(itertools.pairwise(bounds))
    sigs = [_signature(graph, order[a:b], last, b) for a, b in spans]
    copies: dict[tuple[Any, ...], int] = {}
    copy_of = [copies.setdefault(sig[0], len(copies)) for sig in sigs]
    count = [copy_of.count(k) for k in range(len(copies))]
    first = [copy_of.index(k) for k in range(len(copies))]
    saved = len(order) - sum(spans[i][1] - spans[i][0] for i in first)
    if saved < min_saved or _tied(graph, [sig[2] for sig in sigs]):
        return None
    pieces = tuple(
        Piece(tuple(order[a:b]), sig[1], sig[2], sig[3], copy_of[i])
        for i, ((a, b), sig) in enumerate(zip(spans, sigs, strict=True))
    )
    taken = [n.name or "" for n in graph.nodes if not n.inputs]
    prefix = "blk"
    while any(name.startswith(prefix) for name in taken):
        prefix += "_"
    folded, out_start = _folded_graph(graph, pieces, first, prefix)
    streams = _streams(graph, order, last, pos, repeats)
    return Folding(
        graph, folded, pieces, tuple(count), tuple(first), tuple(out_start), prefix, streams
    )


def _stream_order(graph: Graph) -> list[int]:
    """The operators (leaves have no inputs) in graph order, except that work off the main
    stream comes first: the operators that read a graph input but do not depend on the
    graph's longest chain of operators (the stream of layers), with the weight-only work they
    read. The dynamo exporter writes the attention-mask preparation inside the first layer;
    moved before the layers, every layer is the same run of operators."""
    nodes = graph.nodes
    depth = [0] * len(nodes)
    for n in nodes:
        if n.inputs:
            depth[n.id] = 1 + max(depth[r.node] for r in n.inputs)
    stream = [False] * len(nodes)  # on or below the longest chain
    on_chain = set()
    tip = max(range(len(nodes)), key=lambda i: (depth[i], i))
    while nodes[tip].inputs:
        on_chain.add(tip)
        tip = max((r.node for r in nodes[tip].inputs), key=lambda i: (depth[i], i))
    reads_input = [n.op == "input" for n in nodes]
    for n in nodes:
        if n.inputs:
            stream[n.id] = n.id in on_chain or any(stream[r.node] for r in n.inputs)
            reads_input[n.id] = any(reads_input[r.node] for r in n.inputs)
    early = [False] * len(nodes)
    for n in reversed(nodes):  # consumers before producers: pull in what early work reads
        if n.inputs and not stream[n.id] and (reads_input[n.id] or early[n.id]):
            early[n.id] = True
            for r in n.inputs:
                early[r.node] = True
    ops = [n.id for n in nodes if n.inputs]
    return [i for i in ops if early[i]] + [i for i in ops if not early[i]]


def _streams(
    graph: Graph,
    order: Sequence[int],
    last: Mapping[Ref, int],
    pos: Mapping[int, int],
    repeats: Sequence[tuple[int, int, int]],
) -> int:
    """The most tensors made inside a repeat that cross one of its cuts between two copies: 1
    for a chain of layers (a transformer's hidden state, a ResNet's activation; a mask made
    before the repeat does not count), more where a layer also reads the one before the last
    (NasNet-A's cells) or keeps outputs for the end (TENSAT's BERT)."""
    most = 0
    for a, b, n in repeats:
        period = (b - a) // n
        made = [
            (pos[r.node], use)
            for r, use in last.items()
            if r.node in pos and a <= pos[r.node] < b and graph.nodes[r.node].inputs
        ]
        for c in range(a + period, b, period):
            most = max(most, sum(1 for m, use in made if m < c <= use))
    return most


def _tied(graph: Graph, weights: Sequence[Sequence[int]]) -> bool:
    """Whether two pieces read one matrix or filter (a weight of rank 2 or more): tied weights,
    as in an unrolled RNN, whose steps TASO's rules batch into one matmul — across the cuts."""
    readers: dict[int, int] = {}
    for k, ws in enumerate(weights):
        for w in ws:
            if len(graph.nodes[w].shape) >= 2 and readers.setdefault(w, k) != k:
                return True
    return False


def _keys(graph: Graph) -> list[int]:
    """Per node: a hash of what it is (op, parameters, output types) and of what each input
    is — a weight, a constant, or another tensor, with its shape — the same in every copy of a
    layer, whichever layer made its input."""
    keys = []
    for n in graph.nodes:
        ins = []
        for r in n.inputs:
            src = graph.nodes[r.node]
            kind = "t" if src.inputs or src.op == "input" else "w" if src.op == "weight" else "c"
            ins.append((kind, src.params if kind == "c" else None, src.outputs[r.index].shape))
        keys.append(hash((n.op, n.params, n.outputs, tuple(ins))) & 0x7FFFFFFFFFFFFFFF)
    return keys


def _last_use(graph: Graph, order: Sequence[int]) -> dict[Ref, int]:
    """Per tensor read: the position of its last reader in ``order`` (a graph output: the end)."""
    last: dict[Ref, int] = {}
    for i, nid in enumerate(order):
        for r in graph.nodes[nid].inputs:
            last[r] = i
    for r in graph.outputs:
        last[r] = len(order)
    return last


def _crossing(
    graph: Graph, last: Mapping[Ref, int], pos: Mapping[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Per cut before operator position ``c``: how many tensors cross it — made before it
    (graph inputs at -1) and read at or after it (graph outputs: read at the end) — and how
    many of those have a single reader (a cut there splits a chain a fusion may want whole)."""
    n = len(pos)
    readers: dict[Ref, int] = {}
    for nid in pos:
        for r in graph.nodes[nid].inputs:
            readers[r] = readers.get(r, 0) + 1
    for r in graph.outputs:
        readers[r] = readers.get(r, 0) + 2
    diff = np.zeros((2, n + 2), dtype=np.int64)
    for r, use in last.items():
        node = graph.nodes[r.node]
        if node.op == "input":
            made = -1
        elif not node.inputs:
            continue  # weights and constants are not boundary tensors
        else:
            made = pos[r.node]
        if use > made:  # crosses every cut c with made < c <= use
            diff[:, made + 1] += (1, readers[r] == 1)
            diff[:, use + 1] -= (1, readers[r] == 1)
    live = np.cumsum(diff, axis=1)[:, : n + 1]
    return live[0], live[1]


def _find(
    keys: np.ndarray, lo: int, hi: int, score: np.ndarray, repeats: list[tuple[int, int, int]]
) -> None:
    """The tandem repeats of ``keys[lo:hi]`` as ``(start, end, copies)``: the longest (the
    period and start covering the most operators more than once), then those of the stretches
    before and after it, recursively."""
    seg = keys[lo:hi]
    best = (0, 0, 0, 0)  # (operators saved, -period, start, length of the repeated stretch)
    for p in range(1, len(seg) // 2 + 1):
        eq = seg[:-p] == seg[p:]  # eq[t]: operator t equals the one a period later
        if eq.sum() < p:
            continue
        run, start = _longest_run(eq)
        copies = run // p + 1
        if copies >= 2 and (copies - 1) * p > best[0]:
            best = ((copies - 1) * p, -p, lo + start, run + p)
    saved, neg_p, start, extent = best
    if saved < 2:
        return
    p, copies = -neg_p, extent // -neg_p
    # Rotate the cuts to where they cost the least (``score``), keeping the whole copies.
    o = min(
        (o for o in range(p) if (extent - o) // p == copies), key=lambda o: (score[start + o], o)
    )
    a, b = start + o, start + o + copies * p
    repeats.append((a, b, copies))
    _find(keys, lo, a, score, repeats)
    _find(keys, b, hi, score, repeats)


def _longest_run(eq: np.ndarray) -> tuple[int, int]:
    """Length and start of the longest run of True in ``eq``."""
    padded = np.concatenate(([False], eq, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    starts, ends = edges[0::2], edges[1::2]
    if not len(starts):
        return 0, 0
    k = int(np.argmax(ends - starts))
    return int(ends[k] - starts[k]), int(starts[k])


def _signature(
    graph: Graph, nodes: Sequence[int], last: Mapping[Ref, int], end: int
) -> tuple[tuple[Any, ...], tuple[Ref, ...], tuple[int, ...], tuple[Ref, ...]]:
    """A piece's exact signature (its operators with their inputs numbered inside the piece:
    equal signatures compute the same function of their inputs and weights), and its boundary
    inputs, weights and outputs (tensors read at operator position ``end`` or later)."""
    local = {nid: i for i, nid in enumerate(nodes)}
    inputs: dict[Ref, int] = {}
    weights: dict[int, int] = {}
    ops = []
    for nid in nodes:
        n = graph.nodes[nid]
        args: list[tuple[Any, ...]] = []
        for r in n.inputs:
            src = graph.nodes[r.node]
            if r.node in local:
                args.append(("n", local[r.node], r.index))
            elif src.op == "weight":
                args.append(("w", weights.setdefault(r.node, len(weights)), src.shape))
            elif not src.inputs and src.op != "input":  # a constant: by what it is
                args.append(("c", src.op, src.params, src.outputs))
            else:
                args.append(("i", inputs.setdefault(r, len(inputs)), src.outputs[r.index]))
        ops.append((n.op, n.params, n.outputs, tuple(args)))
    outputs = tuple(
        Ref(nid, k)
        for nid in nodes
        for k in range(len(graph.nodes[nid].outputs))
        if last.get(Ref(nid, k), -1) >= end
    )
    sig = (tuple(ops), tuple((local[r.node], r.index) for r in outputs))
    return sig, tuple(inputs), tuple(weights), outputs


def _folded_graph(
    graph: Graph, pieces: Sequence[Piece], first: Sequence[int], prefix: str
) -> tuple[Graph, list[int]]:
    """One copy of each distinct piece: its boundary inputs as inputs ``<prefix><k>.in<j>`` (plain
    types: a split history does not cross a cut), its weights as they are, its outputs."""
    b = GraphBuilder()
    weights: dict[int, Tensor] = {}
    outs: list[Tensor] = []
    out_start = []
    for k, i in enumerate(first):
        piece = pieces[i]
        made: dict[Ref, Tensor] = {}
        for j, ref in enumerate(piece.inputs):
            made[ref] = b.input(graph.shape(ref), name=f"{prefix}{k}.in{j}")
        for w in piece.weights:
            if w not in weights:
                node = graph.nodes[w]
                weights[w] = b.weight(
                    node.shape, name=node.name, value=graph.values.get(node.name or "")
                )
            made[Ref(w)] = weights[w]
        for nid in piece.nodes:
            n = graph.nodes[nid]
            ins = [
                made[r] if r in made else _constant(b, graph.nodes[r.node], made, r)
                for r in n.inputs
            ]
            for idx, t in enumerate(b.add_node(n.op, ins, n.params, name=_name(n))):
                made[Ref(nid, idx)] = t
        out_start.append(len(outs))
        outs.extend(made[r] for r in piece.outputs)
    return b.build(outs), out_start


def _constant(b: GraphBuilder, node: Node, made: dict[Ref, Tensor], ref: Ref) -> Tensor:
    """A constant leaf (no inputs: a scalar, an opaque constant) made again inside a copy."""
    tensors = b.add_node(node.op, [], node.params)
    for idx, t in enumerate(tensors):
        made[Ref(node.id, idx)] = t
    return made[ref]


def _name(node: Node) -> str | None:
    return node.name if node.op not in ("input", "weight") else None
