"""Prices that hold (relsat.cost.stability): the measuring loop on a fake timer and a fake load
probe, the re-check policy as a table, the CPU load probe on a fake ``/proc/stat``.

Nothing here runs onnxruntime or depends on the machine's speed or load."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from relsat.cost.stability import CpuLoad, Price, Stability, recheck, relative_iqr, settle

S = Stability()


class Load:
    """A load probe reporting ``shares``, one per attempt (the last one repeated)."""

    def __init__(self, *shares: float | None) -> None:
        self.shares = list(shares) or [0.0]
        self.calls = 0

    def start(self) -> object:
        return None

    def share(self, since: object) -> float | None:
        value = self.shares[min(self.calls, len(self.shares) - 1)]
        self.calls += 1
        return value


def timer(repeats: dict[str, list[float]]) -> tuple[object, list[tuple[str, bool]]]:
    """A ``time_pass`` handing out each unit's repeats in order (the last one repeated) and
    the log of its calls (unit, first)."""
    log: list[tuple[str, bool]] = []
    given: dict[str, Iterator[float]] = {u: iter(xs) for u, xs in repeats.items()}
    last: dict[str, float] = {}

    def time_pass(unit: str, first: bool) -> float:
        log.append((unit, first))
        last[unit] = next(given[unit], last.get(unit, 0.0))
        return last[unit]

    return time_pass, log


def run(repeats: dict[str, list[float]], *shares: float | None, passes: int = 5, **kw: object):
    time_pass, log = timer(repeats)
    errors: list[str] = []
    prices = settle(
        list(repeats),
        time_pass,  # type: ignore[arg-type]
        passes=passes,
        stability=S,
        probe=Load(*shares),
        on_error=lambda u, exc: errors.append(u),
        **kw,  # type: ignore[arg-type]
    )
    return prices, log, errors


def test_steady_repeats_are_timed_once_and_priced_by_their_median() -> None:
    prices, log, _ = run({"a": [1.0, 1.02, 0.99, 1.01, 1.0], "b": [2.0] * 5})
    assert len(log) == 10 and [first for u, first in log if u == "a"] == [True] + [False] * 4
    assert prices["a"] == Price(1.0, pytest.approx(0.01), 0.0, 1)  # type: ignore[arg-type]
    assert prices["b"].ms == 2.0 and prices["b"].spread == 0.0


def test_only_the_unsettled_unit_is_timed_again_and_its_quiet_repeats_pooled() -> None:
    """Two of five repeats hit by a burst: wide; the next attempt's five are steady and pooled
    with them the spread is narrow again (the median of ten)."""
    burst = [1.0, 1.6, 1.0, 1.7, 1.0]
    prices, log, _ = run({"a": [*burst, 1.0, 1.01, 1.0, 0.99, 1.0], "b": [2.0] * 5})
    assert sum(u == "a" for u, _ in log) == 10 and sum(u == "b" for u, _ in log) == 5
    assert prices["a"].attempts == 2 and prices["a"].ms == 1.0
    assert prices["a"].sound(S)


def test_one_burst_repeat_of_five_does_not_send_a_unit_round_again() -> None:
    prices, log, _ = run({"a": [1.0, 3.0, 1.0, 1.01, 0.99]})
    assert len(log) == 5 and prices["a"].ms == 1.0 and prices["a"].sound(S)


def test_a_busy_attempt_is_set_aside() -> None:
    prices, log, _ = run({"a": [1.4] * 5 + [1.0] * 5}, 0.7, 0.1)
    assert len(log) == 10
    assert prices["a"] == Price(1.0, 0.0, 0.1, 2)


def test_busy_throughout_gives_the_least_loaded_attempt_doubtful() -> None:
    prices, log, _ = run({"a": [1.5] * 5 + [1.2] * 5 + [1.9] * 5}, 0.9, 0.6, 0.95)
    assert len(log) == 15
    assert prices["a"] == Price(1.2, 0.0, 0.6, 3) and not prices["a"].sound(S)


def test_a_recheck_takes_one_attempt() -> None:
    prices, log, _ = run({"a": [1.0, 2.0, 1.0, 2.0, 1.5]}, attempts=1)
    assert len(log) == 5 and not prices["a"].sound(S)


def test_an_unknown_load_does_not_count_against_a_price() -> None:
    prices, _, _ = run({"a": [1.0] * 5}, None)
    assert prices["a"].load is None and prices["a"].sound(S)


def test_a_unit_that_fails_is_handed_on_and_left_out() -> None:
    def time_pass(unit: str, first: bool) -> float:
        if unit == "bad" and not first:
            raise RuntimeError("gone")
        return 1.0

    failed: list[str] = []
    prices = settle(
        ["ok", "bad"],
        time_pass,
        passes=3,
        stability=S,
        probe=Load(),
        on_error=lambda u, exc: failed.append(u),
    )
    assert list(prices) == ["ok"] and failed == ["bad"]


def test_relative_iqr() -> None:
    assert relative_iqr([1.0]) == 0.0 and relative_iqr([0.0, 0.0]) == 0.0
    assert relative_iqr([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2.0 / 3.0)


# stored, check -> what stands (agree: 10 %, max_spread 15 %, max_load 25 %)
RECHECKS = [
    # a sound check that disagrees replaces (the 25 µs rotary, the encoder under load)
    (Price(0.025), Price(0.006, 0.05, 0.0), Price(0.006, 0.05, 0.0)),
    (Price(1.37, 0.02, 0.6), Price(1.08, 0.03, 0.1), Price(1.08, 0.03, 0.1)),
    # a sound check that agrees confirms: the price stays, with the check's spread and load
    (Price(1.05), Price(1.0, 0.03, 0.1), Price(1.05, 0.03, 0.1)),
    # a doubtful check never displaces a sound price
    (Price(1.0, 0.02, 0.0), Price(0.5, 0.5, 0.0), Price(1.0, 0.02, 0.0)),
    # two doubtful prices: the lower stands (load only adds time)
    (Price(1.0, 0.4, 0.0), Price(1.3, 0.02, 0.9), Price(1.0, 0.4, 0.0)),
    (Price(1.3), Price(1.0, 0.02, 0.9), Price(1.0, 0.02, 0.9)),
]


@pytest.mark.parametrize(("stored", "check", "stands"), RECHECKS)
def test_recheck_policy(stored: Price, check: Price, stands: Price) -> None:
    assert recheck(stored, check, S) == stands


def test_stability_is_checked() -> None:
    with pytest.raises(ValueError, match="attempts"):
        Stability(attempts=0)
    with pytest.raises(ValueError, match="max_spread"):
        Stability(max_spread=-1)


def write_stat(path: Path, busy: list[int], idle: list[int]) -> None:
    """A /proc/stat with one line per core: user=busy, idle=idle, the rest 0."""
    lines = [f"cpu  {sum(busy)} 0 0 {sum(idle)} 0 0 0 0 0 0"]
    pairs = enumerate(zip(busy, idle, strict=True))
    lines += [f"cpu{i} {b} 0 0 {d} 0 0 0 0 0 0" for i, (b, d) in pairs]
    path.write_text("\n".join(lines) + "\nintr 0\n")


def test_cpu_load_reads_others_share_between_two_readings(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    probe = CpuLoad(stat=str(stat), min_window=0.0)
    probe._cpus = frozenset({"cpu0", "cpu1"})  # this process may run on both
    write_stat(stat, [1000, 1000], [1000, 1000])
    since = probe.start()
    write_stat(stat, [1000 + 100_000, 1000], [1000, 1000 + 100_000])  # one core of two busy
    assert probe.share(since) == pytest.approx(0.5, abs=0.01)  # this process idle meanwhile
    since = probe.start()
    write_stat(stat, [101_000, 1000], [101_000 + 50_000, 101_000 + 50_000])
    assert probe.share(since) == pytest.approx(0.0, abs=0.01)


def test_cpu_load_counts_only_the_cores_this_process_may_use(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    probe = CpuLoad(stat=str(stat), min_window=0.0)
    probe._cpus = frozenset({"cpu1"})
    write_stat(stat, [0, 0], [0, 0])
    since = probe.start()
    write_stat(stat, [100_000, 0], [0, 100_000])  # the busy core is not this process's
    assert probe.share(since) == pytest.approx(0.0, abs=0.01)


def test_cpu_load_without_counters_falls_back_to_the_load_average(tmp_path: Path) -> None:
    probe = CpuLoad(stat=str(tmp_path / "missing"), min_window=0.0)
    share = probe.share(probe.start())
    assert share is None or 0.0 <= share <= 1.0  # the load average, where there is one
