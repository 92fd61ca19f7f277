"""The distribution-free intervals relsat.onnx.latency decides with (relsat.onnx.intervals)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from relsat.onnx.intervals import shift_interval, signed_rank_depth


def test_the_signed_rank_interval_has_the_textbook_depth() -> None:
    # two-sided 5 %: the critical T+ of the tables is 8 for n = 10, 25 for 15, 52 for 20
    assert [signed_rank_depth(n, 0.05) for n in (10, 15, 20)] == [9, 26, 53]
    assert signed_rank_depth(5, 0.05) == 1  # too few rounds for the level: the full range
    ratios = [0.5, 0.8, 1.0, 2.0]
    shift = shift_interval(np.log(ratios), 0.95)
    assert (shift.low, shift.high) == pytest.approx((0.5, 2.0))  # n = 4: the full range
    # Hodges-Lehmann: the median of the 10 Walsh averages (geometric means of pairs, i <= j)
    walsh = sorted(math.sqrt(x * y) for i, x in enumerate(ratios) for y in ratios[i:])
    assert shift.estimate == pytest.approx(math.sqrt(walsh[4] * walsh[5]))


def test_the_signed_rank_interval_covers_a_symmetric_centre_at_its_level() -> None:
    """Samples symmetric about log 0.9 (heavy-tailed): the 90 % interval misses 0.9 about 10 %
    of the time, never much more (exact for symmetric samples)."""
    rng = np.random.default_rng(0)
    misses = 0
    for _ in range(400):
        logs = math.log(0.9) + rng.standard_t(2, size=15) * 0.05
        s = shift_interval(logs, 0.90)
        misses += not s.low <= 0.9 <= s.high
    assert misses <= 60  # 10 % of 400 is 40; 60 is far in the binomial tail
