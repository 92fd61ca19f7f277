"""Packed attention: an extracted attention whose queries, keys and values are head splits of
projections of one tensor, as one ``mha`` (com.microsoft Attention) node.

Exporters write self-attention as three projections of one input ``x`` (or one projection to
``3E``, split: GPT-2's ``c_attn``), each reshaped into heads and transposed, then attention and
the heads merged back. The e-graph's rules fuse the attention itself (``attention``), but the
projections and the head layout around it are reshapes and transposes, which rules do not see.
onnxruntime's com.microsoft Attention does all of it in one kernel, one GEMM for the three
projections: measured 0.71 -> 0.44 ms per layer for BERT's at 128 tokens (hidden 256, 4 heads,
2 threads). :func:`sites` finds them in an extracted graph, :func:`pack` rewrites the chosen
ones, :func:`fragment` cuts one out (with its head merge) so both forms can be timed.

A site is accepted only when it is provably the packed computation: each of q, kt and v is
followed down through reshapes, transposes, one-axis splits and products with a ``scalar`` to a
``matmul`` / ``matmul_bias`` (no activation) of weights ``[E, N]``, all three of one input
``x``; the chain of layout ops is replayed on an index array of the projection's output and
must give exactly the head split (q, v: ``[B, H, S, D]``; kt: ``[B, H, D, S]``) of one block of
``H * D`` columns. The scalars multiply into the scale. Queries and keys must come from the same
rows (self-attention: ``T == S``), and all three have ``H * D`` columns.

>>> from relsat.graph import GraphBuilder
>>> b = GraphBuilder()
>>> x = b.input([1, 8, 16], name="x")
>>> def heads(w, perm):
...     p = b.reshape(b.matmul(b.reshape(x, [8, 16]), w), [1, 8, 2, 8])
...     return b.transpose(p, perm)
>>> q, kt, v = (heads(b.weight([16, 16]), p) for p in ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3]))
>>> out = b.attention(q, kt, v, b.scalar(0.0), 0.25)
>>> g = b.build(b.reshape(b.transpose(out, [0, 2, 1, 3]), [1, 8, 16]))
>>> [(s.heads, s.scale) for s in sites(g)]
[(2, 0.25)]
>>> pack(g, sites(g)).op_counts()["mha"]
1
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial

import numpy as np

from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Graph, Node, Ref
from relsat.graph.replay import Get, cut, rebuild, reshape, transpose

__all__ = ["Projection", "Site", "fragment", "pack", "sites"]

#: A site's index check replays the layout on an array of this many elements at most (int32:
#: 64 MiB).
MAX_INDEX = 1 << 24


@dataclass(frozen=True)
class Projection:
    """Columns ``start`` to ``start + width`` of the ``matmul`` / ``matmul_bias`` node ``node``
    (weights ``w``, bias ``bias`` or None) read by one of an attention's q, kt, v."""

    node: int
    w: Ref
    bias: Ref | None
    start: int
    width: int


@dataclass(frozen=True)
class Site:
    """An attention (``node``: an ``attention``, or the last ``matmul`` of one spelled out)
    computable as one ``mha``: its input ``x`` (the projections' common input, ``[B * S, E]``
    or ``[B, S, E]``), ``batch``, ``seq``, ``heads``, the ``scale`` (attention's times the
    scalars on q and kt), the q, k, v projections, and the additive ``mask`` (attention's bias;
    None: none)."""

    node: int
    x: Ref
    batch: int
    seq: int
    heads: int
    scale: float
    q: Projection
    k: Projection
    v: Projection
    mask: Ref | None


def sites(graph: Graph) -> list[Site]:
    """Every attention of ``graph`` that :func:`pack` can rewrite (see the module docstring)."""
    weights = graph.all_weights()
    found = []
    for node in graph.nodes:
        parts = _attention(graph, node)
        site = _site(graph, node, parts, weights) if parts is not None else None
        if site is not None:
            found.append(site)
    return found


Parts = tuple[Ref, Ref, Ref, "Ref | None", float]


def _attention(graph: Graph, node: Node) -> Parts | None:
    """``node`` as attention: q, kt, v, the mask (None: none) and the scale; an ``attention``,
    or one spelled out as extraction may leave it when the fused op did not price cheaper:
    ``nanzero(softmax(q @ kt * c + mask)) @ v``, without the mask, and without the NaN guard
    where there is no mask or the mask is marked ``finite`` (a fully masked row is then
    impossible); None for anything else."""
    if node.op == "attention":
        q, kt, v, bias = node.inputs
        return q, kt, v, bias, float(node.params["scale"])
    if node.op != "matmul" or node.params["activation"] != "NONE":
        return None
    probs, v = node.inputs
    guarded = graph.node(probs).op == "nanzero"
    if guarded:
        probs = graph.node(probs).inputs[0]
    if graph.node(probs).op != "softmax":
        return None
    scores = graph.node(probs).inputs[0]
    mask: Ref | None = None
    if graph.node(scores).op == "ewadd":
        scores, mask = graph.node(scores).inputs
        if not guarded and graph.node(mask).op != "finite":
            return None
    scale = 1.0
    product = graph.node(scores)
    if product.op == "ewmul" and graph.node(product.inputs[1]).op == "scalar":
        scale = float(graph.node(product.inputs[1]).params["value"])
        product = graph.node(product.inputs[0])
    if product.op != "matmul" or product.params["activation"] != "NONE":
        return None
    q, kt = product.inputs
    shapes = [graph.shape(r) for r in (q, kt, v)]
    if any(len(s) != 4 for s in shapes) or graph.shape(scores) != shapes[0][:3] + shapes[1][3:]:
        return None  # not head-split operands, or a mask that broadcasts the scores up
    return q, kt, v, mask, scale


def _site(graph: Graph, node: Node, parts: Parts, weights: list[bool]) -> Site | None:
    q_ref, kt_ref, v_ref, mask, scale = parts
    batch, heads, seq, size = graph.shape(q_ref)
    if graph.shape(kt_ref)[3] != seq or graph.shape(v_ref)[3] != size:
        return None  # cross-attention, or values of another head size
    maybe = [_trace(graph, r, weights) for r in (q_ref, kt_ref, v_ref)]
    traced = [t for t in maybe if t is not None]
    if len(traced) != 3:
        return None
    (_, xq, fq, _), (_, xk, fk, _), (_, xv, fv, _) = traced
    if not xq == xk == xv or fv != 1.0:
        return None
    layout = (batch, heads, seq, size)
    projections = []
    for (proj, _x, _f, chain), keys in zip(traced, (False, True, False), strict=True):
        start = _head_split(graph, proj, chain, layout, transposed=keys)
        if start is None:
            return None
        p = graph.node(proj)
        bias = p.inputs[2] if p.op == "matmul_bias" else None
        projections.append(Projection(p.id, p.inputs[1], bias, start, heads * size))
    x_shape = graph.shape(xq)
    if math.prod(x_shape[:-1]) != batch * seq:
        return None
    scale = float(np.float32(scale) * np.float32(fq) * np.float32(fk))
    if not scale > 0:
        return None
    q, k, v = projections
    return Site(node.id, xq, batch, seq, heads, scale, q, k, v, mask)


#: Positions of the head layout :func:`_head_split_sampled` checks besides its corners.
SAMPLED = 64


def _head_split_sampled(
    graph: Graph,
    proj: Ref,
    chain: list[Ref],
    layout: tuple[int, int, int, int],
    *,
    transposed: bool,
) -> int | None:
    """:func:`_head_split` for a layout too large to replay (dims at their markers): each of
    the layout's 16 corners and :data:`SAMPLED` positions drawn with a fixed seed is followed
    back through ``chain`` to its column of ``proj`` and compared with the head split's. The
    onnxruntime checks at three shapes stand behind what sampling leaves open."""
    batch, heads, seq, size = layout
    final = (batch, heads, size, seq) if transposed else layout
    top = chain[0] if chain else proj
    if tuple(graph.shape(top)) != final:
        return None
    rng = np.random.default_rng(0)
    corners = [
        tuple(c * (n - 1) for c, n in zip(bits, final, strict=True))
        for bits in np.ndindex(2, 2, 2, 2)
    ]
    drawn = [tuple(int(rng.integers(0, n)) for n in final) for _ in range(SAMPLED)]
    width = graph.shape(proj)[-1]
    start: int | None = None
    for position in corners + drawn:
        linear = _back(graph, chain, proj, position)
        if linear is None:
            return None
        b, h, d, q = (
            position if transposed else (position[0], position[1], position[3], position[2])
        )
        column = h * size + d
        row = b * seq + q
        if start is None:
            start = linear - row * width - column
            if not 0 <= start <= width - heads * size:
                return None
        if linear != row * width + start + column:
            return None
    return start


def _back(graph: Graph, chain: list[Ref], proj: Ref, position: tuple[int, ...]) -> int | None:
    """The flat index in ``proj`` of ``position`` of the chain's top output (``chain`` from the
    top down), or None for a layout op it does not follow."""
    index = list(position)
    for out in chain:
        n = graph.node(out)
        before = graph.shape(n.inputs[0])
        if n.op == "reshape":
            flat = int(np.ravel_multi_index(index, graph.shape(out)))
            index = [int(i) for i in np.unravel_index(flat, before)]
        elif n.op == "transpose":
            back = [0] * len(index)
            for i, p in enumerate(n.params["perm"]):
                back[p] = index[i]
            index = back
        elif n.op == "split":
            axis = n.params["axis"] % len(before)
            index[axis] += int(sum(n.params["sizes"][: out.index]))
        else:
            return None
    return int(np.ravel_multi_index(index, graph.shape(proj)))


def _trace(graph: Graph, ref: Ref, weights: list[bool]) -> tuple[Ref, Ref, float, list[Ref]] | None:
    """``ref`` followed down through layout ops and scalar products to a projection: the
    projection's output, its input ``x`` (below any reshapes), the scalars' product and the
    layout ops' outputs passed (from ``ref`` down); None when it does not end at a plain
    projection of weights."""
    factor = 1.0
    chain: list[Ref] = []
    while True:
        n = graph.node(ref)
        if n.op == "ewmul":
            a, b = n.inputs
            scalars = [graph.node(r).op == "scalar" for r in (a, b)]
            if scalars.count(True) != 1:
                return None
            c, ref = (a, b) if scalars[0] else (b, a)
            factor *= float(graph.node(c).params["value"])
        elif n.op in ("reshape", "transpose", "split"):
            chain.append(ref)
            ref = n.inputs[0]
        elif n.op in ("matmul", "matmul_bias"):
            w = graph.shape(n.inputs[1])
            plain = n.params["activation"] == "NONE" and len(w) == 2
            bias_ok = n.op == "matmul" or (
                weights[n.inputs[2].node] and graph.shape(n.inputs[2]) == (w[1],)
            )
            if not (plain and weights[n.inputs[1].node] and bias_ok):
                return None
            if weights[n.inputs[0].node] or graph.shape(n.inputs[0])[-1] != w[0]:
                return None
            return ref, _below_reshapes(graph, n.inputs[0]), factor, chain
        else:
            return None


def _below_reshapes(graph: Graph, ref: Ref) -> Ref:
    while graph.node(ref).op == "reshape":
        ref = graph.node(ref).inputs[0]
    return ref


def _head_split(
    graph: Graph,
    proj: Ref,
    chain: list[Ref],
    layout: tuple[int, int, int, int],
    *,
    transposed: bool,
) -> int | None:
    """The first column of the block of the projection ``proj`` that the layout ops ``chain``
    (their outputs, from the attention's operand down, as :func:`_trace` passed them) split
    into heads (``[B, H, S, D]``, or ``[B, H, D, S]`` when ``transposed``), or None when they
    do something else."""
    shape = graph.shape(proj)
    if len(shape) < 2:
        return None
    if math.prod(shape) > MAX_INDEX:  # symbolic dims at their markers: sampled, not replayed
        return _head_split_sampled(graph, proj, chain, layout, transposed=transposed)
    index = np.arange(math.prod(shape), dtype=np.int32).reshape(shape)
    for out in reversed(chain):
        n = graph.node(out)
        if n.op == "reshape":
            index = index.reshape(n.params["shape"])
        elif n.op == "transpose":
            index = index.transpose(n.params["perm"])
        else:  # split: the part the chain reads
            cuts = np.cumsum(n.params["sizes"])[:-1]
            index = np.split(index, cuts, axis=n.params["axis"])[out.index]
    batch, heads, seq, size = layout
    width = shape[-1]
    ints = np.int32
    rows = (np.arange(batch, dtype=ints)[:, None] * seq + np.arange(seq, dtype=ints)) * width
    cols = np.arange(heads, dtype=ints)[:, None] * size + np.arange(size, dtype=ints)  # [H, D]
    start = int(index.reshape(-1)[0]) % width
    if start + heads * size > width:
        return None
    expected = rows[:, None, :, None] + start + cols[None, :, None, :]  # [B, H, S, D]
    if transposed:
        expected = expected.transpose(0, 1, 3, 2)
    if index.shape != expected.shape or not np.array_equal(index, expected):
        return None
    return start


# ---------------------------------------------------------------------------------------------
# Rewriting


def pack(graph: Graph, chosen: Iterable[Site]) -> Graph:
    """``graph`` with each ``chosen`` site's attention computed by one ``mha`` node, its heads
    split back out (a reshape and a transpose, which the merge after it cancels: consecutive
    transposes and reshapes are folded as the graph is rebuilt), and what only the attention
    read left out."""
    return rebuild(graph, {s.node: partial(_packed, site=s) for s in chosen})


def _packed(b: GraphBuilder, get: Get, *, site: Site) -> Tensor:
    x = get(site.x)
    hidden = x.shape[-1]
    if x.shape != (site.batch, site.seq, hidden):
        x = reshape(b, x, [site.batch, site.seq, hidden])
    ws, bs = [], []
    for i, p in enumerate((site.q, site.k, site.v)):
        w = get(p.w)
        if p.width != w.shape[1]:
            w = b.slice(w, 1, p.start, p.start + p.width)
        ws.append(w)
        if p.bias is None:
            zeros = np.zeros(p.width, np.float32)
            bs.append(b.weight([p.width], name=f"mha_{site.node}_bias_{i}", value=zeros))
        else:
            bias = get(p.bias)
            whole = p.width == bias.shape[0]
            bs.append(bias if whole else b.slice(bias, 0, p.start, p.start + p.width))
    mask = get(site.mask) if site.mask is not None else b.scalar(0.0)
    out = b.mha(x, b.concat(1, ws), b.concat(0, bs), mask, site.heads, site.scale)
    size = site.q.width // site.heads
    split = reshape(b, out, [site.batch, site.seq, site.heads, size])
    return transpose(b, split, (0, 2, 1, 3), shuffle=True)


# ---------------------------------------------------------------------------------------------
# Pricing


def fragment(graph: Graph, site: Site) -> tuple[Graph, Site]:
    """The part of ``graph`` that ``site`` replaces, as a graph of its own: the attention with
    its projections, from ``x`` (an input named ``x``) and the mask (an input named ``mask``
    unless it is a constant), to the merge of its heads after it (the reshapes and transposes
    that alone read it); with the site as found in it (``pack`` of the two is the packed
    fragment)."""
    consumers = graph.consumers()
    out = Ref(site.node, 0)
    while len(consumers.get(out.node, [])) == 1:
        reader = graph.node(consumers[out.node][0])
        if reader.op not in ("reshape", "transpose"):
            break
        out = Ref(reader.id, 0)
    weights = graph.all_weights()
    inputs = {site.x: "x"}
    mask = site.mask
    if mask is not None and graph.node(mask).op == "finite":
        mask = graph.node(mask).inputs[0]  # the mark stays in the fragment: an eager attention's
    if mask is not None and not weights[mask.node]:
        inputs[mask] = "mask"
    part = cut(graph, out, inputs)
    (found,) = sites(part)
    return part, found
