"""relsat.graph.dot: the rewritten nodes are highlighted, not everything downstream of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from relsat import Options, optimize
from relsat.cli import main
from relsat.graph import Graph, GraphBuilder
from relsat.graph.diff import changed_nodes
from relsat.graph.dot import graph_dot
from relsat.graph.serial import to_json


def _convs(fused: bool, *, fuse_relu: bool = False, swap: bool = False) -> Graph:
    """input -> conv + bias -> relu -> conv -> tanh, the first conv's bias fused or added."""
    b = GraphBuilder()
    x = b.input([1, 8, 16, 16], name="x")
    w1 = b.weight([8, 8, 3, 3], name="w1")
    bias = b.weight([1, 8, 1, 1], name="b1")
    if fused:
        act = "RELU" if fuse_relu else "NONE"
        y = b.conv2d_bias(x, w1, bias, activation=act, name="convbias")
    else:
        c = b.conv2d(x, w1)
        y = b.add(bias, c) if swap else b.add(c, bias)
    if not (fused and fuse_relu):
        y = b.relu(y)
    y = b.conv2d(y, b.weight([8, 8, 3, 3], name="w2"))
    return b.build(b.tanh(y))


def _ops(graph: Graph, ids: set[int]) -> list[str]:
    return sorted(graph.nodes[i].op for i in ids)


@pytest.mark.parametrize("fuse_relu", [False, True])
def test_a_fused_conv_bias_is_the_only_change(fuse_relu: bool) -> None:
    original, fused = _convs(False), _convs(True, fuse_relu=fuse_relu)
    assert _ops(fused, changed_nodes(fused, original)) == ["conv2d_bias"]
    assert changed_nodes(original, original) == set()
    # the other way round: the conv and its add are what the original has and the fused not
    back = _ops(original, changed_nodes(original, fused))
    assert back == (["conv2d", "ewadd", "relu"] if fuse_relu else ["conv2d", "ewadd"])


def test_changed_is_by_direct_inputs_not_by_value() -> None:
    """The add's operands swapped: the add changed (its direct inputs differ), nothing after it."""
    swapped, original = _convs(False, swap=True), _convs(False)
    assert _ops(swapped, changed_nodes(swapped, original)) == ["ewadd"]


def test_graph_dot_highlights_exactly_the_fused_node() -> None:
    fused = _convs(True)
    dot = graph_dot(fused, _convs(False))
    marked = [line for line in dot.splitlines() if "#ffd8a8" in line]
    assert len(marked) == 1 and "conv2d_bias" in marked[0]
    assert "#ffd8a8" not in graph_dot(fused)  # nothing to compare with: nothing marked


def test_the_optimizer_fusing_conv_bias_is_drawn_as_that_fusion(tmp_path: Path) -> None:
    """relsat's own answer for the graph: each fused unit (the first conv with its bias and
    ReLU, the second with its tanh: rules/bias.rules) is orange, and nothing else is left."""
    original = _convs(False)
    result = optimize(original, Options(verify=False))
    changed = changed_nodes(result.graph, original)
    assert _ops(result.graph, changed) == ["conv2d", "conv2d_bias"]
    assert set(result.graph.op_counts()) == {"conv2d", "conv2d_bias"}  # no relu, tanh or add left
    assert result.to_dot().count("#ffd8a8") == len(changed)
    # relsat show, as a user draws it from the files
    orig, opt, dot = tmp_path / "orig.json", tmp_path / "opt.json", tmp_path / "changes.dot"
    orig.write_text(to_json(original))
    opt.write_text(to_json(result.graph))
    assert main(["show", str(opt), "--against", str(orig), "-o", str(dot)]) == 0
    assert dot.read_text().count("#ffd8a8") == len(changed)


def test_a_rewritten_sum_of_matmuls_leaves_what_reads_it_unchanged() -> None:
    """x@w1 + h@w2 rewritten as concat(x, h) @ concat(w1, w2) (NasRNN's rewrite): the two
    concatenations and the matmul changed; the sigmoid and the tanh reading the sum did not."""

    def cell(rewritten: bool) -> Graph:
        b = GraphBuilder()
        x, h = b.input([1, 4], name="x"), b.input([1, 4], name="h")
        w1, w2 = b.weight([4, 8], name="w1"), b.weight([4, 8], name="w2")
        if rewritten:
            y = b.matmul(b.concat(1, [x, h]), b.concat(0, [w1, w2]))
        else:
            y = b.add(b.matmul(x, w1), b.matmul(h, w2))
        return b.build(b.tanh(b.sigmoid(y)))

    ours = cell(True)
    assert _ops(ours, changed_nodes(ours, cell(False))) == ["concat", "concat", "matmul"]
