"""Repeated blocks explored once (relsat.pipeline.blocks): folding finds identical layers, the
folded
graph holds each once, unfolding puts the optimized copy back into every layer, and costs and
verification are the whole graph's."""

from __future__ import annotations

import numpy as np
import pytest

from relsat import GraphBuilder, Limits, Options, models, optimize
from relsat.cost import AnalyticModel, price_egraph
from relsat.engine.egraph import EGraph
from relsat.engine.problem import egraph_problem
from relsat.errors import SettingsError
from relsat.graph.execute import compare
from relsat.graph.graph import Graph
from relsat.pipeline.blocks import fold
from relsat.pipeline.price import leaf_names


def _encoder(layers: int, *, tie_in: int | None = None, d: int = 64) -> Graph:
    """A pre-norm transformer-like stack: per layer, Q/K/V matmuls sharing their input
    (TASO merges them), an attention-like product, a layernorm and a residual add. With
    ``tie_in``, that layer reads one weight for both Q and K (another wiring)."""
    b = GraphBuilder()
    g, beta = b.weight([d], name="g"), b.weight([d], name="beta")
    x = b.relu(b.input([32, d], name="x"))
    for i in range(layers):
        h = b.layernorm(x, g, beta, 1e-5)
        wq = b.weight([d, d], name=f"wq{i}")
        wk = wq if i == tie_in else b.weight([d, d], name=f"wk{i}")
        wv = b.weight([d, d], name=f"wv{i}")
        q, k, v = b.matmul(h, wq), b.matmul(h, wk), b.matmul(h, wv)
        s = b.softmax(b.matmul(q, b.transpose(k, [1, 0], shuffle=True)))
        x = b.add(x, b.relu(b.matmul(s, v)))
    return b.build(b.layernorm(x, g, beta, 1e-5))  # a head after the stack, as GPT-2's


def test_fold_finds_the_layers_and_keeps_the_ends_whole():
    folding = fold(_encoder(12))
    assert folding is not None
    # the first and last layers join the ends; the ten in between are one copy
    assert sorted(folding.count) == [1, 1, 10]
    k = folding.count.index(10)
    layer = folding.pieces[folding.first[k]]
    assert len(layer.nodes) == 10 and len(layer.outputs) == 1
    assert folding.saved == 9 * 10
    names = {n.name for n in folding.graph.inputs}
    assert f"blk{k}.in0" in names


def _masked_encoder(layers: int, d: int = 32) -> Graph:
    """Layers reading an additive mask, the mask prepared inside the first layer as the dynamo
    exporter writes it (its operators come between the first layer's)."""
    b = GraphBuilder()
    x = b.input([16, d], name="x")
    m = b.input([16, 16], name="mask")
    g, beta = b.weight([d], name="g"), b.weight([d], name="beta")
    mask = None
    for i in range(layers):
        h = b.layernorm(x, g, beta, 1e-5)
        q, k, v = (b.matmul(h, b.weight([d, d], name=f"w{c}{i}")) for c in "qkv")
        if mask is None:  # prepared once, where the first layer first needs it
            mask = b.sigmoid(b.relu(m))
        s = b.softmax(b.add(b.matmul(q, b.transpose(k, [1, 0], shuffle=True)), mask))
        x = b.add(x, b.matmul(b.matmul(s, v), b.weight([d, d], name=f"wo{i}")))
        up = b.relu(b.matmul(b.layernorm(x, g, beta, 1e-5), b.weight([d, 4 * d], name=f"u{i}")))
        x = b.add(x, b.matmul(up, b.weight([4 * d, d], name=f"dn{i}")))
    return b.build(x)


def test_fold_sees_layers_whose_mask_is_prepared_inside_the_first():
    graph = _masked_encoder(4)
    folding = fold(graph)
    assert folding is not None and folding.streams == 1
    assert sorted(folding.count) == [1, 3]  # the layers after the first are one copy
    assert compare(graph, folding.unfold(folding.graph)).ok


def test_folded_graph_does_not_grow_with_depth():
    small, big = fold(_encoder(12)), fold(_encoder(48))
    assert small is not None and big is not None
    assert len(big.graph) == len(small.graph)
    assert big.count[big.count.index(max(big.count))] == 46


def test_unfold_of_the_folded_graph_is_the_original_function():
    graph = _encoder(8)
    folding = fold(graph)
    assert folding is not None
    again = folding.unfold(folding.graph)
    assert [n.name for n in again.inputs] == [n.name for n in graph.inputs]
    assert [n.name for n in again.weights] == [n.name for n in graph.weights]
    assert compare(graph, again).ok
    assert again.op_counts() == graph.op_counts()


def test_a_layer_wired_otherwise_is_its_own_copy():
    folding = fold(_encoder(12, tie_in=5))  # layer 5 reads wq for K too
    assert folding is not None
    nodes = folding.original.nodes
    tied = [p for p in folding.pieces if any(nodes[w].name == "wq5" for w in p.weights)]
    assert len(tied) == 1 and folding.count[tied[0].copy] == 1
    assert compare(folding.original, folding.unfold(folding.graph)).ok


def test_nothing_to_fold():
    assert fold(models.load("vgg19")) is None  # no layer repeats with equal shapes
    assert fold(models.load("nasrnn")) is None  # steps share their matrices (tied weights)
    b = GraphBuilder()
    t = b.input([4, 8])
    for _ in range(3):
        t = b.relu(b.matmul(t, b.weight([8, 8])))
    assert fold(b.build(t)) is None  # too little to be worth a cut


def test_optimize_with_blocks_matches_the_whole_graph():
    graph = _encoder(10)
    whole = optimize(graph)
    folded = optimize(graph, Options(blocks="on"))
    assert folded.verified and folded.graph.output_shapes == graph.output_shapes
    assert folded.cost_before == pytest.approx(whole.cost_before, rel=1e-9)
    assert folded.cost_after <= whole.cost_after * (1 + 1e-9)
    assert folded.egraph.counts()[0] < whole.egraph.counts()[0] / 2
    assert folded.blocks.startswith("10 pieces, 3 distinct")
    assert whole.blocks == "off"


def test_copies_linked_by_a_rule_are_never_mixed():
    """TASO's rules without shared variables (two ReLUs into one over a concat) link the copies
    side by side in the folded e-graph; such e-nodes are forbidden, so the costs stay the whole
    graph's and every layer is rebuilt from its own tensors."""
    graph = models.load("resnext50")
    whole = optimize(graph, Options(verify=False))
    folded = optimize(graph, Options(blocks="on"))
    assert folded.blocks != "none repeated"
    assert folded.cost_before == pytest.approx(whole.cost_before, rel=1e-9)
    assert folded.cost_after == pytest.approx(whole.cost_after, rel=1e-6)
    assert folded.verified


def test_blocks_without_repeats_optimizes_the_whole_graph():
    result = optimize(models.load("nasrnn"), Options(blocks="on"))
    assert result.blocks == "none repeated"
    assert result.reduction == pytest.approx(optimize(models.load("nasrnn")).reduction)


def test_bad_blocks_value():
    with pytest.raises(SettingsError, match="blocks"):
        Options(blocks="yes")


def test_restrict_weights_count_each_copy():
    """Before any rewrite, the folded e-graph's prices times each copy's count add up to the
    whole graph's (each price summed once per node, no sharing to blur it)."""
    graph = _encoder(6)
    folding = fold(graph)
    assert folding is not None and sorted(folding.count) == [1, 1, 4]
    sums = []
    for g in (graph, folding.graph):
        eg = EGraph.from_graph(g)
        price_egraph(eg, AnalyticModel("h100"), concat="copy", precompute_weights=False)
        problem, enode_ids, _ = egraph_problem(eg)
        times = np.ones(len(enode_ids))
        if g is folding.graph:
            times, forbidden = folding.restrict(problem, leaf_names(eg, enode_ids))
            # the ends once, the middle layer 4 times, the layernorm weights all share: 6
            assert not forbidden.any() and set(times.tolist()) == {1.0, 4.0, 6.0}
        sums.append(float((problem.node_cost * times).sum()))
    assert sums[1] == pytest.approx(sums[0], rel=1e-12)


def test_a_tensor_named_like_a_copy_input_does_not_clash():
    b = GraphBuilder()
    x = b.input([8, 16], name="blk0.in0")
    for i in range(12):
        x = b.relu(b.matmul(x, b.weight([16, 16], name=f"blk{i}")))
    graph = b.build(x)
    folding = fold(graph)
    assert folding is not None and folding.prefix == "blk_"
    assert {n.name for n in folding.graph.inputs} == {"blk_0.in0"}
    result = optimize(graph, Options(blocks="on"))
    assert result.verified and [n.name for n in result.graph.inputs] == ["blk0.in0"]


def test_auto_folds_chains_of_layers_only():
    """``blocks="auto"``: a chain of layers (one tensor made inside the repeat crosses each cut)
    is folded; TENSAT's BERT, whose layers keep an output for the end, and NasNet-A, whose cells
    read the cell before the last, are explored whole."""
    chain = _encoder(8)
    assert fold(chain).streams == 1
    assert optimize(chain, Options(blocks="auto")).blocks.startswith("8 pieces")
    for name, streams in (("bert", 8), ("nasneta", 4)):
        graph = models.load(name)
        assert fold(graph).streams == streams
        # the fold stage decides before exploring: one iteration runs the pipeline through
        result = optimize(graph, Options(blocks="auto", verify=False, limits=Limits(iterations=1)))
        assert result.blocks == (f"not folded ({streams} tensors cross a cut between copies)")
