"""ResNeXt-50 (32 groups), input ``[1, 3, 224, 224]``, no classifier (TENSAT benchmark).

Source: TASO ``examples/resnext50.py`` @ f11782c, identical to TENSAT's ``src/resnext50.rs``; op for
op equal to ``reference/models/resnext50.oplist.json`` (86 ops).

Quirks kept on purpose (``reference/MODELS.md`` §4.3):

* The projection shortcut (first block of each stage) is a 1×1 conv **with** a fused ReLU, and it
  is the first operand of the block's ``ewadd``.
* No global pooling or classifier: the root is the last block's ReLU, ``[1, 2048, 7, 7]``.
* (TASO's older 2019 script, without stem and with 64 groups, is not what TENSAT used.)
"""

from __future__ import annotations

from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Graph

__all__ = ["GROUPS", "STAGES", "build"]

GROUPS = 32
#: (blocks, bottleneck width, stride of the first block) per stage.
STAGES = ((3, 128, 1), (4, 256, 2), (6, 512, 2), (3, 1024, 2))


def _block(b: GraphBuilder, x: Tensor, stride: int, channels: int, groups: int) -> Tensor:
    """A bottleneck block: 1×1 → grouped 3×3 → 1×1 (2·channels), plus shortcut, then ReLU."""
    w1 = b.weight([channels, x.dim(1), 1, 1])
    t = b.conv2d(x, w1, stride=1, padding="SAME", activation="RELU")
    w2 = b.weight([channels, t.dim(1) // groups, 3, 3])
    t = b.conv2d(t, w2, stride=stride, padding="SAME", activation="RELU")
    w3 = b.weight([2 * channels, t.dim(1), 1, 1])
    t = b.conv2d(t, w3, stride=1, padding="SAME")
    if stride > 1 or x.dim(1) != 2 * channels:
        w4 = b.weight([2 * channels, x.dim(1), 1, 1])
        x = b.conv2d(x, w4, stride=stride, padding="SAME", activation="RELU")
    return b.relu(b.add(x, t))


def build() -> Graph:
    """The ResNeXt-50 graph; its one output is ``[1, 2048, 7, 7]``."""
    b = GraphBuilder()
    x = b.input([1, 3, 224, 224])
    t = b.conv2d(x, b.weight([64, 3, 7, 7]), stride=2, padding="SAME", activation="RELU")
    t = b.maxpool2d(t, kernel=3, stride=2, padding="SAME")
    for blocks, channels, first_stride in STAGES:
        stride = first_stride
        for _ in range(blocks):
            t = _block(b, t, stride, channels, GROUPS)
            stride = 1
    return b.build(t)
