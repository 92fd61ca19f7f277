"""Timing an optimized ONNX model against its original (relsat.onnx.latency).

No assertion depends on this machine's speed: verdicts are asserted only between models whose
work differs by a thousand times (sixteen 256x256 MatMuls against one Relu of the same
signature), and a model timed against itself is checked for the protocol's structure (rounds,
looks, intervals, why it stopped), never for its verdict. The decision rule itself is tested on
synthetic rounds (:meth:`LatencyComparison.from_rounds`): rounds simulated as compare_latency
runs them — each round's order drawn, each place with its own speed, bursts of load — where what
the right verdict is, is known.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from relsat import LatencyComparison, compare_latency
from relsat.onnx import OnnxError
from relsat.onnx.latency import (
    ORDERS,
    STOPS,
    VERDICTS,
    WORDS,
    Timing,
    _decision,
    explain,
)
from relsat.onnx.runtime import OrtSettings, RuntimeSettingsError

ONE_THREAD = OrtSettings(threads=1)
#: A short budget; a 1000x difference decides at the first look (9 rounds) whatever the machine.
QUICK = Timing(max_seconds=0.3, min_rounds=9, max_rounds=60)


def _model(nodes: list[Any], inits: Sequence[Any] = (), inputs: list[Any] | None = None) -> Any:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 256])
    graph = helper.make_graph(nodes, "g", inputs or [x], [y], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def heavy() -> Any:
    """Sixteen chained 64x256 @ 256x256 MatMuls (about 134 MFLOP)."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array((rng.standard_normal((256, 256)) / 16).astype(np.float32), f"w{i}")
        for i in range(16)
    ]
    names = ["x", *(f"h{i}" for i in range(15)), "y"]
    nodes = [helper.make_node("MatMul", [names[i], f"w{i}"], [names[i + 1]]) for i in range(16)]
    return _model(nodes, weights)


@pytest.fixture(scope="module")
def light() -> Any:
    return _model([helper.make_node("Relu", ["x"], ["y"])])


def _well_formed(c: LatencyComparison, timing: Timing) -> None:
    """What every comparison must satisfy, whatever the machine measured."""
    assert c.verdict in VERDICTS and c.stopped in STOPS
    assert timing.min_rounds <= c.rounds <= timing.max_rounds and len(c.ratios) == c.rounds
    assert list(c.ratios) == sorted(c.ratios)
    assert c.ratios[0] <= c.ratio_low * (1 + 1e-12)  # exp(log(r)) may round below r
    assert c.ratio_low <= c.ratio <= c.ratio_high <= c.ratios[-1] * (1 + 1e-12)
    assert c.control_low <= c.control <= c.control_high
    assert c.against_control_low <= c.against_control <= c.against_control_high
    decision = _decision(
        (c.ratio_low, c.ratio_high), (c.against_control_low, c.against_control_high), c.min_gain
    )
    assert c.decided == (decision is not None) == (c.stopped == "decided")
    assert c.verdict == (decision or "same")
    assert c.stopped != "round limit" or c.rounds == timing.max_rounds
    assert c.confidence == timing.confidence and c.min_gain == timing.min_gain
    assert c.report().endswith(f", {c.rounds} rounds, {c.stopped})")


def test_a_much_lighter_model_is_faster_and_decides_at_the_first_look(
    heavy: Any, light: Any
) -> None:
    c = compare_latency(heavy, light, settings=ONE_THREAD, timing=QUICK)
    _well_formed(c, QUICK)
    assert c.verdict == "faster" and c.stopped == "decided" and c.rounds == QUICK.min_rounds
    assert c.optimized_ms < c.original_ms and c.threads == 1
    assert c.report().startswith("onnxruntime CPU (1 thread): ")
    assert "x faster (ratio " in c.report()


def test_a_much_heavier_model_is_slower_and_bytes_work(heavy: Any, light: Any) -> None:
    c = compare_latency(
        light.SerializeToString(), heavy.SerializeToString(), settings=ONE_THREAD, timing=QUICK
    )
    _well_formed(c, QUICK)
    assert c.verdict == "slower" and c.stopped == "decided" and c.rounds == QUICK.min_rounds
    assert "x slower" in c.report()


def test_a_model_against_itself_is_timed_by_the_protocol(light: Any) -> None:
    """An A/A comparison: its verdict is noise, its structure is not."""
    timing = Timing(max_seconds=0.1, min_rounds=4, max_rounds=12)
    c = compare_latency(light, light, settings=ONE_THREAD, timing=timing)
    _well_formed(c, timing)
    capped = Timing(max_seconds=5, min_rounds=3, max_rounds=4, min_gain=0.5)
    c = compare_latency(light, light, settings=ONE_THREAD, timing=capped)
    _well_formed(c, capped)
    assert c.rounds in capped.looks() and c.stopped in ("decided", "round limit")


def test_paths_are_read_and_non_float_inputs_drawn(tmp_path: Path) -> None:
    """Paths are read, and int64 ids and bool inputs are drawn (relsat.onnx.random_inputs): ids
    only below the one row of the table they index, else onnxruntime fails the Gather."""
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256]),
        helper.make_tensor_value_info("idx", TensorProto.INT64, [16]),
        helper.make_tensor_value_info("flag", TensorProto.BOOL, [1]),
    ]
    table = numpy_helper.from_array(np.ones((1, 256), dtype=np.float32), "table")
    nodes = [
        helper.make_node("Gather", ["table", "idx"], ["g"]),
        helper.make_node("Where", ["flag", "x", "x"], ["y"]),
    ]
    model = _model(nodes, [table], inputs=inputs)
    model.graph.output.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, [16, 256]))
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    timing = Timing(max_seconds=0.05, min_rounds=3, max_rounds=5)
    c = compare_latency(path, str(path), settings=ONE_THREAD, timing=timing)
    _well_formed(c, timing)


def test_bad_models_raise_onnx_errors(tmp_path: Path, light: Any) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    with pytest.raises(OnnxError, match="cannot load the original model") as info:
        compare_latency(bad, light, timing=QUICK)
    assert info.value.path == str(bad)
    other = helper.make_tensor_value_info("z", TensorProto.FLOAT, [64, 256])
    renamed = _model([helper.make_node("Relu", ["z"], ["y"])], inputs=[other])
    with pytest.raises(OnnxError, match="inputs differ"):
        compare_latency(light, renamed, timing=QUICK)


def test_a_model_failing_at_run_time_is_named(light: Any) -> None:
    shape = numpy_helper.from_array(np.array([7, -1], dtype=np.int64), "shape")
    broken = _model(  # 64*256 values cannot be reshaped into rows of 7: fails only when run
        [
            helper.make_node("Reshape", ["x", "shape"], ["r"]),
            helper.make_node("Reshape", ["r", "back"], ["y"]),
        ],
        [shape, numpy_helper.from_array(np.array([64, 256], dtype=np.int64), "back")],
    )
    with pytest.raises(OnnxError, match="optimized model"):
        compare_latency(light, broken, timing=QUICK)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_seconds", 0),
        ("max_seconds", float("nan")),
        ("min_rounds", 0),
        ("max_rounds", 8),  # below min_rounds (9)
        ("warmup", 0),
        ("min_gain", 1.0),
        ("min_gain", -0.1),
        ("confidence", 1.0),
        ("confidence", 0),
        ("seed", -1),
        ("min_rounds", 2.5),
    ],
)
def test_timing_is_validated_naming_the_field(field: str, value: Any) -> None:
    settings = {"min_rounds": 9, field: value}
    with pytest.raises(RuntimeSettingsError, match=f"^{field} must be ") as info:
        Timing(**settings)
    assert info.value.option == field


def test_looks_grow_geometrically_up_to_the_round_limit() -> None:
    assert Timing().looks() == (15, 23, 35, 53, 80, 120, 180, 270, 400)
    assert Timing(min_rounds=5, max_rounds=5).looks() == (5,)
    assert Timing(confidence=0.95, min_rounds=15, max_rounds=400).alpha == pytest.approx(0.05 / 9)


def test_the_last_look_takes_the_share_of_the_looks_it_cuts_off() -> None:
    t = Timing()  # looks at 15, 23, 35, 53, 80, 120, 180, 270, 400
    assert t.alpha_at(23) == t.alpha_at(23, last=False) == t.alpha
    assert t.alpha_at(15, last=True) == pytest.approx(0.05)  # the budget spent at the first look
    assert t.alpha_at(30, last=True) == pytest.approx(0.05 * 7 / 9)  # 15, 23 made
    assert t.alpha_at(35, last=True) == pytest.approx(0.05 * 7 / 9)  # 35 is this look
    assert t.alpha_at(400, last=True) == pytest.approx(t.alpha)
    # whatever the looks made, their shares sum to the level
    for last in range(15, 401):
        made = [n for n in t.looks() if n < last]
        total = sum(t.alpha_at(n) for n in made) + t.alpha_at(last, last=True)
        assert total <= 0.05 + 1e-12


def test_decisions_follow_both_intervals() -> None:
    both = (0.8, 0.98)
    assert _decision(both, both, 0.01) == "faster"
    assert _decision((0.98, 0.995), both, 0.01) is None  # not clearly by the 1 % minimum: look on
    assert _decision((0.97, 1.02), both, 0.01) is None  # too wide to tell
    # faster than the original, not clearly than its A/A copy: the two copies differed
    assert _decision(both, (0.9, 1.05), 0.01) is None
    assert _decision((0.995, 1.008), both, 0.01) == "same"  # within 1 % of the original
    assert _decision(both, (0.995, 1.2), 0.01) == "same"  # not 1 % faster than the copy
    assert _decision((1.01, 1.2), (1.02, 1.1), 0.01) == "slower"
    # slower than one copy only: not slower beyond noise, but surely not faster
    assert _decision((1.01, 1.2), (0.98, 1.1), 0.01) == "same"
    assert _decision((0.992, 1.3), both, 0.01) == "same"  # futility: 1 % faster is ruled out
    same = LatencyComparison(2.0, 2.0, 1.0, 0.97, 1.02, 9, "same", 2)
    assert "too noisy to tell: between 1.03x faster and 1.02x slower" in same.report()
    assert same.speedup == 1.0 and math.isnan(same.against_control)
    assert not same.decided and same.report().endswith(", 9 rounds, time limit)")


def _spread(low: float, high: float, n: int = 15) -> list[float]:
    """``n`` synthetic per-round times evenly from ``low`` to ``high`` (no real timing)."""
    return [low + (high - low) * i / (n - 1) for i in range(n)]


#: Synthetic rounds (optimized, A/A control; the original 1 ms each round) → the word and the
#: line every report prints (15 rounds, the timing's last look: at the full 5 %).
SAYS = [
    (_spread(0.49, 0.51), _spread(0.98, 1.02), "faster", "2.00x faster"),
    (_spread(1.98, 2.02), _spread(0.98, 1.02), "slower", "2.00x slower"),
    # clearly faster than the original (0.72-0.76), but the control ran as fast as the
    # optimized model in the same rounds: the "faster, not clearly (…A/A 0.795-1.28…)"
    (
        _spread(0.70, 0.78),
        _spread(0.68, 0.82)[::-1],
        "too noisy to tell",
        "too noisy to tell: the two copies of the original differed by up to 28 %",
    ),
    (
        _spread(0.8, 1.2),
        _spread(0.98, 1.02),
        "too noisy to tell",
        "too noisy to tell: between 1.09x faster and 1.07x slower",
    ),
    (
        _spread(0.996, 1.004),
        _spread(0.98, 1.02),
        "not faster",
        "not faster by the 1% minimum: at most 0.1 % faster",
    ),
    (
        _spread(1.02, 1.10),
        _spread(0.95, 1.15)[::-1],
        "not faster",
        "not faster: 1.06x slower by the median, within noise",
    ),
]


@pytest.mark.parametrize(("optimized", "control", "word", "text"), SAYS)
def test_the_verdict_says_why_in_plain_words(
    optimized: list[float], control: list[float], word: str, text: str
) -> None:
    c = LatencyComparison.from_rounds([1.0] * len(optimized), optimized, control)
    assert explain(c) == (word, text) and (c.word, c.why) == (word, text) and word in WORDS
    assert c.report().startswith(
        f"onnxruntime CPU (1 thread): 1 -> {c.optimized_ms:.4g} ms, {text} ("
    )
    assert (c.verdict == "faster") == (word == "faster")  # only "faster" keeps the optimized model
    assert c.decided == (c.stopped == "decided")
    decision = _decision(
        (c.ratio_low, c.ratio_high), (c.against_control_low, c.against_control_high), c.min_gain
    )
    assert c.verdict == (decision or "same")


def _simulated(
    theta: float,
    rounds: int,
    seed: int,
    places: Sequence[float] = (1.0, 1.0, 1.0),
    burst: Sequence[int] = (),
    noise: float = 0.05,
    fixed: bool = False,
) -> tuple[list[float], list[float], list[float]]:
    """Rounds as compare_latency runs them, simulated: the original takes 1 ms, the optimized
    model ``theta`` ms; each round's order drawn (``fixed``: always original, optimized,
    control); the sessions in the round's first, second and third place run ``places`` times
    slower (the place's own effect, the same in every round), times log-normal ``noise``; in the
    rounds ``burst`` the first place runs 3 times slower (a burst of load)."""
    rng = random.Random(seed)
    out: list[list[float]] = [[], [], []]
    for r in range(rounds):
        order = ORDERS[0] if fixed else rng.choice(ORDERS)
        for place, session in enumerate(order):
            slow = places[place] * (3.0 if r in burst and place == 0 else 1.0)
            base = theta if session == 1 else 1.0
            out[session].append(base * slow * math.exp(rng.gauss(0.0, noise)))
    return out[0], out[1], out[2]


def test_a_clear_gain_is_decided_on_synthetic_rounds() -> None:
    for seed in range(20):
        c = LatencyComparison.from_rounds(*_simulated(0.7, 15, seed, places=(1.0, 1.05, 0.95)))
        assert c.verdict == "faster" and c.word == "faster" and c.ratio_high < 0.99


def test_identical_rounds_are_never_faster() -> None:
    times = _spread(0.5, 3.0)  # however the load varies between rounds
    c = LatencyComparison.from_rounds(times, times, times)
    assert c.verdict == "same" and c.word == "not faster" and c.ratio == 1.0


def test_a_model_against_itself_is_rarely_faster_whatever_the_places_do() -> None:
    """The model timed against itself, each place with its own speed and heavy noise: with the
    orders drawn, "faster" or "slower" must come at most as often as the level allows (5 %: 15
    of 300; each verdict needs both intervals wrong on the same side, so far fewer come)."""
    wrong = 0
    for seed in range(300):
        rounds = _simulated(1.0, 15, seed, places=(0.9, 1.0, 1.15), noise=0.2)
        wrong += LatencyComparison.from_rounds(*rounds).verdict != "same"
    assert wrong <= 15


def test_a_place_bias_under_a_fixed_order_is_not_faster() -> None:
    """The optimized model always in the second place, which runs 5 % faster than the first
    (a fixed order's bias, as before the orders were drawn): faster than the original by its
    own interval, but not than the control, which sits in a place as fast."""
    rounds = _simulated(1.0, 35, 0, places=(1.0, 0.95, 0.95), noise=0.01, fixed=True)
    c = LatencyComparison.from_rounds(*rounds)
    assert c.ratio_high < 0.97 and c.verdict == "same"
    assert c.word == "not faster" and 0.99 <= c.against_control_low
    assert c.why.startswith("not faster than the A/A copy")


def test_drawn_orders_cancel_a_place_bias() -> None:
    """The same places with the orders drawn: the bias cancels (the model against itself)."""
    for seed in range(20):
        rounds = _simulated(1.0, 35, seed, places=(1.0, 0.95, 0.95), noise=0.01)
        c = LatencyComparison.from_rounds(*rounds)
        assert c.verdict == "same" and c.ratio_low < 1.0 < c.ratio_high


def test_a_burst_in_a_few_rounds_does_not_decide() -> None:
    for seed in range(20):
        rounds = _simulated(1.0, 15, seed, burst=(3, 4, 5), noise=0.02)
        assert LatencyComparison.from_rounds(*rounds).verdict != "faster"
