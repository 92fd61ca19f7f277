"""NasRNN: five steps of the NAS recurrent cell, hidden size 512 (TENSAT benchmark).

Source: TASO ``examples/nasrnn.py`` (jiazhihao/TASO @ f11782c), which TENSAT's ``src/nasrnn.rs``
ports line for line; op for op equal to ``reference/models/nasrnn.oplist.json`` (230 ops).

Quirks kept on purpose (``reference/MODELS.md`` §4.1):

* The initial state ``h_0`` is a **weight** ``[1, 512]``, not an input, so in step 0 the eight
  ``h``-side matmuls multiply two weights.
* No weight sharing: every gate of every step has its own ``[512, 512]`` weights, created in the
  order ``x``-side, ``h``-side.

Inputs: ``x_0 … x_4``, each ``[1, 512]``. Output (the root): the state after the fifth step.
"""

from __future__ import annotations

from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Graph

__all__ = ["HIDDEN", "LENGTH", "build"]

HIDDEN = 512
LENGTH = 5


def _combine(b: GraphBuilder, x: Tensor, h: Tensor) -> Tensor:
    """``matmul(x, A) + matmul(h, B)`` with fresh weights ``A``, ``B``."""
    w1 = b.weight([HIDDEN, x.dim(1)])
    w2 = b.weight([HIDDEN, h.dim(1)])
    return b.add(b.matmul(x, w1), b.matmul(h, w2))


def _nas_node(b: GraphBuilder, h: Tensor, x: Tensor) -> Tensor:
    """One NAS cell step: the new state from state ``h`` and input ``x``."""
    t = [_combine(b, x, h) for _ in range(8)]
    mid = [
        b.add(b.relu(t[0]), b.sigmoid(t[3])),
        b.add(b.sigmoid(t[1]), b.tanh(t[2])),
        b.mul(b.sigmoid(t[4]), b.tanh(t[5])),
        b.mul(b.sigmoid(t[6]), b.relu(t[7])),
    ]
    mid.append(b.add(b.sigmoid(mid[1]), b.tanh(mid[2])))
    mid.append(b.mul(b.tanh(mid[0]), b.tanh(mid[3])))
    mid.append(b.mul(b.tanh(mid[4]), b.tanh(mid[5])))
    return b.tanh(mid[6])


def build() -> Graph:
    """The NasRNN graph; its one output is the final state ``[1, 512]``."""
    b = GraphBuilder()
    xs = [b.input([1, HIDDEN]) for _ in range(LENGTH)]
    state = b.weight([1, HIDDEN])
    for x in xs:
        state = _nas_node(b, state, x)
    return b.build(state)
