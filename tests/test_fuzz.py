"""Fuzzing in the default run: 100 random graphs (``tests/fuzzgen.py``) optimized and verified.

Each graph is optimized with the shipped rules and guards, a quarter of them with two
multi-pattern iterations; ``optimize`` verifies the result numerically (a wrong rewrite raises
``VerificationError``), and the optimized graph must keep the original's interface. Any other
exception fails the test too. A positive control: with the guards off some of these graphs get a
wrong rewrite, which verification catches. ``bench/fuzz.py`` runs the same with ≥ 1,000 larger
graphs and the positive control (guards off).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzzgen import describe, random_graph

from relsat import IlpOptions, Limits, Options, VerificationError, optimize
from relsat.graph.graph import Graph

SEEDS = range(100)
LIMITS = Limits(iterations=2, nodes=1500)


def _interface(g: Graph) -> tuple[list[tuple[str | None, tuple[int, ...]]], list[tuple[int, ...]]]:
    return sorted((n.name, n.shape) for n in g.inputs), g.output_shapes


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzzed_graph_is_optimized_soundly(seed: int) -> None:
    graph = random_graph(seed)
    k_multi = 2 if seed % 4 == 0 else 1
    options = Options(k_multi=k_multi, limits=LIMITS, ilp=IlpOptions(time_limit=10))
    result = optimize(graph, options)
    try:
        assert result.verified, f"seed {seed}: {result.verification}; {describe(graph)}"
        assert _interface(result.graph) == _interface(graph), f"seed {seed}: {describe(graph)}"
    finally:
        result.egraph.close()


def test_positive_control_guards_off_is_caught() -> None:
    """With the guards off (TENSAT's rules) the sample holds graphs that get a wrong rewrite
    (shared-input merges of grouped convs, concats of broadcasting element-wise ops), and
    verification catches them; the test above passes them with the guards on."""
    unsound = []
    for seed in (17, 56, 85, 90):  # those of the sample, found by running it with guards off
        try:
            k_multi = 2 if seed % 4 == 0 else 1
            options = Options(k_multi=k_multi, limits=LIMITS, guards=False)
            optimize(random_graph(seed), options).egraph.close()
        except VerificationError:
            unsound.append(seed)
            break
    assert unsound, "no wrong rewrite with the guards off: the fuzzer lost its teeth"


def test_generator_is_deterministic_and_covers_the_ops() -> None:
    """The sample has what the fuzzer is for: grouped and fused convs, pools, matmul chains and
    shared inputs, concat/split, broadcasting element-wise ops, dead inputs, several outputs."""
    seen: Counter[str] = Counter()
    for seed in SEEDS:
        g = random_graph(seed)
        assert g == random_graph(seed)
        seen.update(g.op_counts())
        seen["dead input"] += any(n.name == "dead" for n in g.inputs)
        seen["outputs > 1"] += len(g.outputs) > 1
        for n in g.nodes:
            if n.op in ("conv2d", "conv2d_bias"):
                groups = g.shape(n.inputs[0])[1] // g.shape(n.inputs[1])[1]
                seen["grouped conv"] += groups > 1
                seen["strided conv"] += n.params["stride"] != (1, 1)
                seen["valid conv"] += n.params["padding"] == "VALID"
                seen["conv activation"] += n.params["activation"] != "NONE"
            if n.op in ("ewadd", "ewmul"):
                seen["broadcast"] += len({g.shape(r) for r in n.inputs}) > 1
            if n.op == "matmul" and g.node(n.inputs[0]).op == "matmul":
                seen["matmul chain"] += 1
        users = g.consumers()
        seen["shared input"] += any(
            sum(g.node(u).op in ("matmul", "conv2d", "conv2d_bias") for u in users[n.id]) > 1
            for n in g.nodes
        )
    wanted = [
        *("conv2d", "conv2d_bias", "matmul", "matmul_bias", "concat", "split"),
        *("poolmax", "poolavg", "ewadd", "ewmul", "relu", "sigmoid", "tanh", "relu6"),
        *("dead input", "outputs > 1", "grouped conv", "strided conv", "valid conv"),
        *("conv activation", "broadcast", "matmul chain", "shared input"),
    ]
    assert {w: seen[w] for w in wanted if seen[w] < 3} == {}
