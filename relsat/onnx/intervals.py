"""Distribution-free confidence intervals for a centre of paired samples (relsat.onnx.latency).

:func:`shift_interval`: the Hodges-Lehmann estimate of the centre of per-round log ratios and
the Wilcoxon signed-rank interval for it — exact whenever the samples are symmetric about their
centre and independent, as drawn round orders make two sessions' log ratios.

>>> import numpy as np
>>> s = shift_interval(np.log([0.8, 0.9, 0.85, 0.95, 0.9, 0.88, 0.92, 0.87]), 0.95)
>>> round(s.estimate, 3), s.low < s.estimate < s.high < 1
(0.885, True)
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

__all__ = ["Shift", "shift_interval", "signed_rank_depth"]


class Shift(NamedTuple):
    """A ratio's Hodges-Lehmann estimate and its signed-rank interval, ``[low, high]``."""

    estimate: float
    low: float
    high: float


def shift_interval(logs: np.ndarray, confidence: float) -> Shift:
    """The Hodges-Lehmann estimate of the centre of per-round log ratios (the median of their
    Walsh averages ``(d_i + d_j) / 2``, ``i <= j``) and the signed-rank interval for it: the
    ``k``-th smallest and largest Walsh average, ``k`` the largest with ``P(T+ <= k - 1) <=
    alpha / 2`` under the signed-rank null (too few rounds: the full range); as ratios."""
    n = len(logs)
    i, j = np.triu_indices(n)
    walsh = np.sort((logs[i] + logs[j]) / 2)
    k = signed_rank_depth(n, 1.0 - confidence)
    return Shift(
        float(np.exp(np.median(walsh))),
        float(np.exp(walsh[k - 1])),
        float(np.exp(walsh[len(walsh) - k])),
    )


@functools.lru_cache(maxsize=64)
def signed_rank_depth(n: int, alpha: float) -> int:
    """The largest ``k >= 1`` with ``P(T+ <= k - 1) <= alpha / 2``, ``T+`` the Wilcoxon signed-rank
    statistic of ``n`` samples symmetric about 0 (exact: the distribution counted by adding one
    rank at a time)."""
    total = n * (n + 1) // 2
    p = np.zeros(total + 1)
    p[0] = 1.0
    for rank in range(1, n + 1):
        p[rank:] = p[rank:] + p[:-rank]  # the new rank's sign: + adds it, - leaves the sum
        p /= 2
    return max(1, int(np.searchsorted(np.cumsum(p), alpha / 2, side="right")))
