"""Inception-v3 as TASO defines it since 2021: batch 32, input ``[32, 3, 299, 299]``.

Source: TASO ``examples/inceptionv3.py`` @ f11782c (added 2021-03-26); op for op equal to
``reference/models/inceptionv3.oplist.json`` (119 ops). This is **not** the Inception-v3 TENSAT
benchmarked: that one is the batch-1 graph of ``model/inceptionv3.model`` (registry name
``inceptionv3``), which differs in its B, D and E blocks and its concats.

Quirks kept on purpose (``reference/MODELS.md`` §4.7):

* Every conv has a fused ReLU. Padding is chosen as TASO's ``get_pads`` does: VALID when the
  torchvision padding is zero and the kernel is larger than 1×1, else SAME (so the 1×1 convs are
  SAME).
* Each block ends in one n-ary concat (A and C: 4 inputs, B and D: 3, E: 6); blocks B and D have a
  max-pool branch, blocks A, C and E an average-pool branch.
* The "global" average pool of the head uses the default 1×1 kernel, so it does not reduce the
  8×8 map: the output (root) is ``[32, 2048, 8, 8]``.
"""

from __future__ import annotations

from collections.abc import Sequence

from relsat.graph.builder import GraphBuilder, Tensor
from relsat.graph.graph import Graph

__all__ = ["BATCH", "build"]

BATCH = 32


def _pads(kernel: Sequence[int], padding: Sequence[int]) -> str:
    """TASO's ``get_pads``: torchvision-style explicit padding → SAME/VALID."""
    return "VALID" if sum(padding) == 0 and sum(kernel) > 2 else "SAME"


def _conv(
    b: GraphBuilder,
    v: Tensor,
    out_channels: int,
    kernel: tuple[int, int] = (1, 1),
    stride: tuple[int, int] = (1, 1),
    padding: tuple[int, int] = (0, 0),
) -> Tensor:
    w = b.weight([out_channels, v.dim(1), *kernel])
    return b.conv2d(v, w, stride=stride, padding=_pads(kernel, padding), activation="RELU")


def _pool(
    b: GraphBuilder,
    v: Tensor,
    pool_type: str,
    kernel: tuple[int, int] = (1, 1),
    stride: tuple[int, int] = (1, 1),
    padding: tuple[int, int] = (0, 0),
) -> Tensor:
    if pool_type == "global_avg":
        return b.avgpool2d(v, kernel=kernel, stride=1, padding="VALID")
    if pool_type == "avg":
        return b.avgpool2d(v, kernel=kernel, stride=stride, padding=_pads(kernel, padding))
    return b.maxpool2d(v, kernel=kernel, stride=stride, padding=_pads(kernel, padding))


def _front(b: GraphBuilder, v: Tensor) -> Tensor:
    v = _conv(b, v, 32, (3, 3), stride=(2, 2))  # 32 x 149 x 149
    v = _conv(b, v, 32, (3, 3))  # 32 x 147 x 147
    v = _conv(b, v, 64, (3, 3), padding=(1, 1))  # 64 x 147 x 147
    v = _pool(b, v, "max", (3, 3), stride=(2, 2))  # 64 x 73 x 73
    v = _conv(b, v, 80, (1, 1))  # 80 x 73 x 73
    v = _conv(b, v, 192, (3, 3))  # 192 x 71 x 71
    return _pool(b, v, "max", (3, 3), stride=(2, 2))  # 192 x 35 x 35


def _block_a(b: GraphBuilder, v: Tensor, pool_features: int) -> Tensor:
    v1x1 = _conv(b, v, 64)
    v5x5 = _conv(b, v, 48)
    v5x5 = _conv(b, v5x5, 64, (5, 5), padding=(2, 2))
    v3x3dbl = _conv(b, v, 64)
    v3x3dbl = _conv(b, v3x3dbl, 96, (3, 3), padding=(1, 1))
    v3x3dbl = _conv(b, v3x3dbl, 96, (3, 3), padding=(1, 1))
    v_pool = _pool(b, v, "avg", (3, 3), padding=(1, 1))
    v_pool = _conv(b, v_pool, pool_features)
    return b.concat(1, [v1x1, v5x5, v3x3dbl, v_pool])


def _block_b(b: GraphBuilder, v: Tensor) -> Tensor:
    v3x3 = _conv(b, v, 384, (3, 3), stride=(2, 2))
    v3x3dbl = _conv(b, v, 64)
    v3x3dbl = _conv(b, v3x3dbl, 96, (3, 3), padding=(1, 1))
    v3x3dbl = _conv(b, v3x3dbl, 96, (3, 3), stride=(2, 2))
    v_pool = _pool(b, v, "max", (3, 3), stride=(2, 2))
    return b.concat(1, [v3x3, v3x3dbl, v_pool])


def _block_c(b: GraphBuilder, v: Tensor, c7: int) -> Tensor:
    v1x1 = _conv(b, v, 192)
    v7x7 = _conv(b, v, c7)
    v7x7 = _conv(b, v7x7, c7, (1, 7), padding=(0, 3))
    v7x7 = _conv(b, v7x7, 192, (7, 1), padding=(3, 0))
    v7x7dbl = _conv(b, v, c7)
    v7x7dbl = _conv(b, v7x7dbl, c7, (7, 1), padding=(3, 0))
    v7x7dbl = _conv(b, v7x7dbl, c7, (1, 7), padding=(0, 3))
    v7x7dbl = _conv(b, v7x7dbl, c7, (7, 1), padding=(3, 0))
    v7x7dbl = _conv(b, v7x7dbl, 192, (1, 7), padding=(0, 3))
    v_pool = _pool(b, v, "avg", (3, 3), padding=(1, 1))
    v_pool = _conv(b, v_pool, 192)
    return b.concat(1, [v1x1, v7x7, v7x7dbl, v_pool])


def _block_d(b: GraphBuilder, v: Tensor) -> Tensor:
    v3x3 = _conv(b, v, 192)
    v3x3 = _conv(b, v3x3, 320, (3, 3), stride=(2, 2))
    v7x7x3 = _conv(b, v, 192)
    v7x7x3 = _conv(b, v7x7x3, 192, (1, 7), padding=(0, 3))
    v7x7x3 = _conv(b, v7x7x3, 192, (7, 1), padding=(3, 0))
    v7x7x3 = _conv(b, v7x7x3, 192, (3, 3), stride=(2, 2))
    v_pool = _pool(b, v, "max", (3, 3), stride=(2, 2))
    return b.concat(1, [v3x3, v7x7x3, v_pool])


def _block_e(b: GraphBuilder, v: Tensor) -> Tensor:
    v1x1 = _conv(b, v, 320)
    v3x3 = _conv(b, v, 384)
    v3x3a = _conv(b, v3x3, 384, (1, 3), padding=(0, 1))
    v3x3b = _conv(b, v3x3, 384, (3, 1), padding=(1, 0))
    v3x3dbl = _conv(b, v, 448)
    v3x3dbl = _conv(b, v3x3dbl, 384, (3, 3), padding=(1, 1))
    v3x3dbla = _conv(b, v3x3dbl, 384, (1, 3), padding=(0, 1))
    v3x3dblb = _conv(b, v3x3dbl, 384, (3, 1), padding=(1, 0))
    v_pool = _pool(b, v, "avg", (3, 3), padding=(1, 1))
    v_pool = _conv(b, v_pool, 192)
    return b.concat(1, [v1x1, v3x3a, v3x3b, v3x3dbla, v3x3dblb, v_pool])


def build(batch: int = BATCH) -> Graph:
    """TASO's 2021 Inception-v3; its one output is ``[batch, 2048, 8, 8]``."""
    b = GraphBuilder()
    v = _front(b, b.input([batch, 3, 299, 299]))
    for pool_features in (32, 64, 64):
        v = _block_a(b, v, pool_features)
    v = _block_b(b, v)
    for c7 in (128, 160, 160, 192):
        v = _block_c(b, v, c7)
    v = _block_d(b, v)
    v = _block_e(b, v)
    v = _block_e(b, v)
    v = _pool(b, v, "global_avg")
    return b.build(v)
