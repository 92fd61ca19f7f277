"""BERT-style self-attention stack, 8 layers, hidden 1024, 16 heads (TENSAT benchmark).

Two definitions:

* :func:`build` (registry name ``bert``) — the graph TENSAT optimized: TASO ``examples/bert.py`` as
  it was before commit ae32942 (2021-03-31; batch 1, sequence 64, input ``[64, 1024]``), plus the
  eight ``noop`` joins of TENSAT's ``src/bert.rs``. Op for op equal to
  ``reference/models/bert_2019_batch1.oplist.json`` (113 ops), then the 8 noops.
* :func:`build_2021` (registry name ``bert-2021``) — TASO ``examples/bert.py`` @ f11782c: batch 16,
  input ``[1024, 1024]``, 4-D reshapes ``[16, 64, 16, 64]`` and transposes ``(0, 2, 1, 3)``. Op for
  op equal to ``reference/models/bert.oplist.json`` (113 ops). Not the graph TENSAT used.

Quirks kept on purpose (``reference/MODELS.md`` §4.2), in both:

* ``X_0 = relu(input)``.
* ``k`` is not transposed before ``matmul(q, k)``; no scaling, no softmax.
* The next layer's input is ``matmul(X, Wo)`` of the **layer input** ``X``, not of the attention
  output; the attention outputs are dead ends of the network. TASO keeps them as extra sinks;
  TENSAT keeps them alive with ``noop``: ``c = out_1; c = noop(c, out_i)`` for ``i = 2 … 8``;
  ``root = noop(c, X_8)``.
* Four matmuls per layer share the left operand ``X`` (q, k, v and the output projection).

Outputs: :func:`build` has the one noop root. :func:`build_2021` lists TASO's sinks, the eight
attention outputs then ``X_8`` (the last element, TASO's main output).
"""

from __future__ import annotations

from collections.abc import Sequence

from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Graph

__all__ = ["HEADS", "HIDDEN", "LAYERS", "SEQ", "build", "build_2021"]

SEQ = 64
HIDDEN = 1024
HEADS = 16
LAYERS = 8


def _attention(
    b: GraphBuilder,
    x: Tensor,
    heads_shape: Sequence[int],
    perm: Sequence[int],
) -> tuple[Tensor, Tensor]:
    """One layer: ``(attention output, next layer input = matmul(x, Wo))``.

    ``heads_shape`` splits the hidden dim into heads and ``perm`` moves the head dim in front of
    the sequence dim (it is its own inverse, so it also moves it back).
    """
    d_model = x.dim(1)
    weights = [b.weight([d_model, d_model]) for _ in range(3)]
    q, k, v = (b.matmul(x, w) for w in weights)
    q, k, v = (b.reshape(t, heads_shape) for t in (q, k, v))
    q, k, v = (b.transpose(t, perm, shuffle=True) for t in (q, k, v))
    logits = b.matmul(q, k)  # k is not transposed (kept from TASO's script)
    out = b.matmul(logits, v)
    out = b.transpose(out, perm, shuffle=True)
    out = b.reshape(out, x.shape)
    linear = b.weight([d_model, d_model])
    return out, b.matmul(x, linear)


def _layers(
    b: GraphBuilder, rows: int, heads_shape: Sequence[int], perm: Sequence[int]
) -> tuple[list[Tensor], Tensor]:
    """``relu(input)`` then ``LAYERS`` layers: the attention outputs and the last ``X``."""
    t = b.relu(b.input([rows, HIDDEN]))
    outs = []
    for _ in range(LAYERS):
        out, t = _attention(b, t, heads_shape, perm)
        outs.append(out)
    return outs, t


def build() -> Graph:
    """TENSAT's BERT: batch 1, input ``[64, 1024]``, one root joining all sinks with ``noop``."""
    b = GraphBuilder()
    outs, last = _layers(b, SEQ, (SEQ, HEADS, HIDDEN // HEADS), (1, 0, 2))
    c = outs[0]
    for out in outs[1:]:
        c = b.noop(c, out)
    return b.build(b.noop(c, last))


def build_2021(batch: int = 16) -> Graph:
    """TASO's current BERT: batch 16, input ``[1024, 1024]``; outputs the 9 sinks, ``X_8`` last."""
    b = GraphBuilder()
    heads_shape = (batch, SEQ, HEADS, HIDDEN // HEADS)
    outs, last = _layers(b, batch * SEQ, heads_shape, (0, 2, 1, 3))
    return b.build(*outs, last)
