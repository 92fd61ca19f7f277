"""ResNet-50 body as TASO's example builds it: input ``[1, 64, 56, 56]``, no stem, no classifier.

Source: TASO ``examples/resnet50.py`` @ f11782c; op for op equal to
``reference/models/resnet50.oplist.json`` (84 ops). Not a TENSAT benchmark (TENSAT's own
``src/resnet50.rs``, seen in the extraction-gym ``resnet50`` dump, is a different graph).

Quirks kept on purpose: the projection shortcut (first block of each stage) is a 1×1 conv **with** a
fused ReLU, and it is the first operand of the block's ``ewadd``. The output (root) is the last
block's ReLU, ``[1, 2048, 7, 7]``.
"""

from __future__ import annotations

from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Graph

__all__ = ["STAGES", "build"]

#: (blocks, bottleneck width, stride of the first block) per stage.
STAGES = ((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2))


def _block(b: GraphBuilder, x: Tensor, stride: int, channels: int) -> Tensor:
    """A bottleneck block: 1×1 → 3×3 → 1×1 (4·channels), plus shortcut, then ReLU."""
    w1 = b.weight([channels, x.dim(1), 1, 1])
    t = b.conv2d(x, w1, stride=1, padding="SAME", activation="RELU")
    w2 = b.weight([channels, t.dim(1), 3, 3])
    t = b.conv2d(t, w2, stride=stride, padding="SAME", activation="RELU")
    w3 = b.weight([4 * channels, t.dim(1), 1, 1])
    t = b.conv2d(t, w3, stride=1, padding="SAME")
    if stride > 1 or x.dim(1) != 4 * channels:
        w4 = b.weight([4 * channels, x.dim(1), 1, 1])
        x = b.conv2d(x, w4, stride=stride, padding="SAME", activation="RELU")
    return b.relu(b.add(x, t))


def build() -> Graph:
    """The ResNet-50 body; its one output is ``[1, 2048, 7, 7]``."""
    b = GraphBuilder()
    t = b.input([1, 64, 56, 56])
    for blocks, channels, first_stride in STAGES:
        stride = first_stride
        for _ in range(blocks):
            t = _block(b, t, stride, channels)
            stride = 1
    return b.build(t)
