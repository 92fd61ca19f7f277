"""Every bundled model builds, round-trips through JSON and runs in the NumPy executor."""

from __future__ import annotations

import numpy as np
import pytest

from relsat import UnknownModelError, allclose, models, run
from relsat.graph.serial import from_json, to_json

EXPECTED_OUTPUTS = {
    "nasrnn": [(1, 512)],
    "bert": [(64, 1024)] * 9,  # 8 attention outputs and the last layer, through the noop chain
    "resnext50": [(1, 2048, 7, 7)],
    "nasneta": [(1, 5120, 7, 7)],
    "squeezenet": [(1, 1000)],
    "vgg19": [(1, 1000)],
    "inceptionv3": [(1, 2048, 1, 1)],
}


def test_the_seven_benchmarks_in_paper_order() -> None:
    assert models.BENCHMARKS == tuple(EXPECTED_OUTPUTS)
    assert {m.name for m in models.available()} >= set(EXPECTED_OUTPUTS)


@pytest.mark.parametrize("name", models.BENCHMARKS)
def test_executor_runs_every_benchmark(name: str) -> None:
    outs = run(models.load(name), dtype=np.float32)
    assert [o.shape for o in outs] == EXPECTED_OUTPUTS[name]
    assert all(np.isfinite(o).all() for o in outs)
    assert any(np.abs(o).max() > 0 for o in outs)


@pytest.mark.parametrize("name", [m.name for m in models.available()])
def test_json_round_trip_of_every_model(name: str) -> None:
    graph = models.load(name)
    again = from_json(to_json(graph))
    assert again == graph
    assert to_json(again) == to_json(graph)


def test_round_tripped_model_computes_the_same() -> None:
    graph = models.load("nasrnn")
    assert allclose(graph, from_json(to_json(graph)), rtol=0, atol=0)


def test_aliases_and_unknown_names() -> None:
    assert models.load("VGG") is models.load("vgg19")
    with pytest.raises(UnknownModelError) as info:
        models.load("alexnet")
    assert "unknown model 'alexnet'" in str(info.value)
    assert "nasrnn" in info.value.available
