"""Nothing the extractor may choose fails to export (relsat.onnx.exportable, relsat.onnx.constants).

The ONNX model zoo's graphs (the "light" models the onnx wheel ships) compute their weights with
``ConstantOfShape`` of a shape initializer. Imported as opaque operators, those weights were
computed at run time, TASO's merge rules still rewrote their grouped convs, and an extraction
choosing a merged conv failed to export ("cannot export merge node 16", ShuffleNet). Now such
subgraphs are folded into weights at import, and the extraction problem forbids the e-nodes the
exporter cannot write whatever the weights are.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import relsat
import relsat.onnx as ronnx
from relsat.cost import AnalyticModel, price_egraph
from relsat.engine.decode import decode
from relsat.engine.egraph import EGraph
from relsat.engine.explore import explore
from relsat.engine.problem import egraph_problem
from relsat.extract import extract
from relsat.graph.graph import Graph
from relsat.onnx.exportable import exportable_only, unexportable
from relsat.rewrite.rulefile import RULES_DIR, load_rules

FILL = numpy_helper.from_array(np.array([0.02], dtype=np.float32))
#: The model zoo's graphs the onnx wheel ships, their weights ConstantOfShape of 0.02.
SHUFFLENET = Path(onnx.__file__).parent / "backend/test/data/light/light_shufflenet.onnx"


def _grouped_conv(weight_at_run_time: bool) -> Any:
    """A grouped conv (2 groups), a Relu and an Add, ShuffleNet's pattern: the weight a
    ConstantOfShape of a shape initializer, the addend a Cast of a float64 initializer; with
    ``weight_at_run_time``, the weight goes through an operator relsat keeps opaque (Tan) first."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])
    inits = [
        numpy_helper.from_array(np.array([8, 4, 3, 3], dtype=np.int64), "w_shape"),
        numpy_helper.from_array(np.linspace(-1, 1, 8).reshape(1, 8, 1, 1), "b64"),
    ]
    w = "w_made" if weight_at_run_time else "w"
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], [w], value=FILL),
        helper.make_node("Cast", ["b64"], ["b"], to=TensorProto.FLOAT),
        *([helper.make_node("Tan", ["w_made"], ["w"])] if weight_at_run_time else []),
        helper.make_node("Conv", ["x", "w"], ["c"], group=2, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Add", ["r", "b"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "grouped", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_weight_subgraphs_of_the_model_zoo_are_folded_into_weights() -> None:
    graph = ronnx.load(_grouped_conv(weight_at_run_time=False))
    counts = {"input": 1, "weight": 2, "conv2d": 1, "relu": 1, "ewadd": 1}  # one op per node
    assert graph.op_counts(leaves=True) == counts
    assert np.all(graph.values["w"] == np.float32(0.02)) and graph.values["w"].shape == (8, 4, 3, 3)
    assert graph.values["b"].dtype == np.float32
    assert graph.values["b"].reshape(-1).tolist() == pytest.approx(np.linspace(-1, 1, 8))


def _extract_every_rewrite(model: Any) -> tuple[Graph, Graph]:
    """The imported graph, and the graph extracted after the merge rules with every new e-node
    free (so the extractor takes every rewrite it is offered)."""
    graph = ronnx.load(model)
    eg = EGraph.from_graph(graph)
    explore(eg, load_rules(RULES_DIR / "merge.rules"))
    price_egraph(eg, AnalyticModel("t4"), cache=False)
    problem, enode_ids, class_ids = egraph_problem(eg)
    problem = exportable_only(
        problem,
        eg.sql("SELECT op FROM enode ORDER BY id")["op"].to_numpy(zero_copy_only=False)[enode_ids],
    )  # as the pipeline does for an ONNX output
    born = eg.sql("SELECT born FROM enode ORDER BY id")["born"].to_numpy()[enode_ids]
    free = extract(replace(problem, node_cost=np.where(born > 0, 0.0, 1.0)), "ilp")
    choice = {int(class_ids[c]): int(enode_ids[n]) for c, n in free.choice.items()}
    return graph, decode(eg, choice, graph.values)


def test_a_merged_conv_of_folded_weights_exports_and_runs_the_same() -> None:
    model = _grouped_conv(weight_at_run_time=False)
    _, chosen = _extract_every_rewrite(model)
    assert chosen.op_counts()["merge"] == 1  # the grouped conv now runs with one group
    check = ronnx.verify(model, ronnx.to_model(chosen, like=model))
    assert check.ok, check.report()


def test_a_merge_of_a_weight_computed_at_run_time_is_never_offered() -> None:
    model = _grouped_conv(weight_at_run_time=True)
    graph, chosen = _extract_every_rewrite(model)
    assert graph.op_counts()["opaque"] == 1  # Tan: the weight exists only at run time
    assert "merge" not in chosen.op_counts()
    check = ronnx.verify(model, ronnx.to_model(chosen, like=model))
    assert check.ok, check.report()


def test_a_merged_weight_is_read_only_by_conv_weights() -> None:
    # classes: 0 weight, 1 input, 2 merge(0), 3 conv(1, 2), 4 transpose(2), 5 concat(2, 0),
    # 6 conv(1, 5), 7 conv_bias(1, 0, 2): the transpose and the bias cannot read a merged weight
    ops = np.array(["weight", "input", "merge", "conv2d", "transpose", "concat", "conv2d"])
    ops = np.append(ops, "conv2d_bias")
    kids = [[], [], [0], [1, 2], [2], [2, 0], [1, 5], [1, 0, 2]]
    ptr = np.cumsum([0] + [len(k) for k in kids])
    idx = np.array([c for k in kids for c in k])
    bad = unexportable(ops, np.arange(8), ptr, idx, 8)
    assert bad.tolist() == [False, False, False, False, True, False, False, True]
    # a forbidden merge (by the cycle filter) makes no merged weight: nothing else is refused
    forbidden = np.zeros(8, dtype=bool)
    forbidden[2] = True
    assert not unexportable(ops, np.arange(8), ptr, idx, 8, forbidden).any()


@pytest.mark.skipif(not SHUFFLENET.exists(), reason="the onnx wheel has no light_shufflenet")
def test_the_model_zoo_shufflenet_is_optimized_and_written(tmp_path: Path) -> None:
    assert "opaque" not in ronnx.load(SHUFFLENET).op_counts()  # weights folded, Sum mapped
    result = relsat.optimize(SHUFFLENET, relsat.Options(cost_model="analytic", timing=None))
    out = result.save(tmp_path / "out.onnx")
    check = ronnx.verify(SHUFFLENET, out)
    assert check.ok, check.report()
