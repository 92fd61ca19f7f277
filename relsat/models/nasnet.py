"""NasNet-A: three stages of five normal cells and one reduction cell (TENSAT benchmark).

Source: TASO ``examples/nasnet_a.py`` @ f11782c (with the 7×7 stem and 3×3 max-pool), identical to
TENSAT's ``src/nasneta.rs``; op for op equal to ``reference/models/nasnet_a.oplist.json`` (383 ops).

Quirks kept on purpose (``reference/MODELS.md`` §4.4):

* The graph is built **with duplicates**: each normal cell computes ``avgpool(prev)`` twice and
  each reduction cell ``maxpool(cur)`` twice, as separate nodes (383 ops). TENSAT's starting
  e-graph hash-conses them (365 ops), so its "original" runtime is that of the deduplicated graph.
* The "separable" conv is a grouped k×k conv with ``groups = out_channels`` (depthwise only when the
  input has ``out_channels`` channels) followed by a 1×1 conv, neither with an activation.
* ``fit`` never takes its strided-conv branch here (``prev`` always has ``cur``'s spatial size).

Input ``[1, 3, 224, 224]``. Output (the root): the last reduction cell's concat,
``[1, 5120, 7, 7]``.
"""

from __future__ import annotations

from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Graph

__all__ = ["build"]


def _squeeze(b: GraphBuilder, out_channels: int, x: Tensor) -> Tensor:
    """1×1 conv with ReLU to ``out_channels``."""
    w = b.weight([out_channels, x.dim(1), 1, 1])
    return b.conv2d(x, w, stride=1, padding="SAME", activation="RELU")


def _fit(b: GraphBuilder, current: Tensor, x: Tensor) -> Tensor:
    """Bring ``x`` to ``current``'s channels (and, if needed, halve its spatial size)."""
    if x.dim(2) == current.dim(2):
        return _squeeze(b, current.dim(1), x)
    w = b.weight([current.dim(1), x.dim(1), 3, 3])
    return b.conv2d(x, w, stride=2, padding="SAME", activation="RELU")


def _sep(b: GraphBuilder, x: Tensor, out_channels: int, kernel: int, stride: int) -> Tensor:
    """TASO's ``seperable_conv``: grouped k×k conv (groups = out_channels), then 1×1 conv."""
    w1 = b.weight([out_channels, x.dim(1) // out_channels, kernel, kernel])
    t = b.conv2d(x, w1, stride=stride, padding="SAME")
    w2 = b.weight([out_channels, t.dim(1), 1, 1])
    return b.conv2d(t, w2, stride=1, padding="SAME")


def _normal_cell(b: GraphBuilder, prev: Tensor, cur: Tensor, out_channels: int) -> Tensor:
    """Five pairwise sums of branches, concatenated: ``5 · out_channels`` channels."""
    cur = _squeeze(b, out_channels, cur)
    prev = _fit(b, cur, prev)
    oc = out_channels
    ts = [
        _sep(b, cur, oc, 3, 1),
        cur,
        _sep(b, prev, oc, 3, 1),
        _sep(b, cur, oc, 3, 1),
        b.avgpool2d(cur, kernel=3, stride=1, padding="SAME"),
        prev,
        b.avgpool2d(prev, kernel=3, stride=1, padding="SAME"),
        b.avgpool2d(prev, kernel=3, stride=1, padding="SAME"),
        _sep(b, prev, oc, 3, 1),
        _sep(b, prev, oc, 3, 1),
    ]
    outputs = [b.add(ts[2 * i], ts[2 * i + 1]) for i in range(5)]
    return b.concat(1, outputs)


def _reduction_cell(b: GraphBuilder, prev: Tensor, cur: Tensor, out_channels: int) -> Tensor:
    """Like a normal cell but with stride-2 branches: half the spatial size."""
    cur = _squeeze(b, out_channels, cur)
    prev = _fit(b, cur, prev)
    oc = out_channels
    outputs = [b.add(_sep(b, prev, oc, 7, 2), _sep(b, cur, oc, 5, 2))]
    outputs.append(
        b.add(b.maxpool2d(cur, kernel=3, stride=2, padding="SAME"), _sep(b, prev, oc, 7, 2))
    )
    outputs.append(
        b.add(b.avgpool2d(cur, kernel=3, stride=2, padding="SAME"), _sep(b, prev, oc, 5, 2))
    )
    outputs.append(
        b.add(b.maxpool2d(cur, kernel=3, stride=2, padding="SAME"), _sep(b, outputs[0], oc, 3, 1))
    )
    outputs.append(b.add(b.avgpool2d(outputs[0], kernel=3, stride=1, padding="SAME"), outputs[1]))
    return b.concat(1, outputs)


def build() -> Graph:
    """The NasNet-A graph as built (duplicates kept); its one output is ``[1, 5120, 7, 7]``."""
    b = GraphBuilder()
    x = b.input([1, 3, 224, 224])
    x = b.conv2d(x, b.weight([64, 3, 7, 7]), stride=2, padding="SAME", activation="RELU")
    x = b.maxpool2d(x, kernel=3, stride=2, padding="SAME")
    out_channels = 128
    for _ in range(3):
        prev = cur = x
        for _ in range(5):
            prev, cur = cur, _normal_cell(b, prev, cur, out_channels)
        out_channels *= 2
        x = _reduction_cell(b, prev, cur, out_channels)
    return b.build(x)
