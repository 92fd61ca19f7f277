"""Rules marked ``runtime``: fusions onnxruntime makes itself when it loads a model. A model whose
only rewrites are such is kept as it is, neither verified nor timed against its own runtime
form (relsat.pipeline.verify.unchanged)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import relsat
from relsat.errors import RuleSyntaxError
from relsat.rewrite.rulefile import load_rules, parse_rules

RNG = np.random.default_rng(7)
ANALYTIC = {"cost_model": "analytic-cpu", "precompute_weights": True}


def _weight(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(np.float32), name)


def _conv_bn_relu(*, turned: bool = False) -> onnx.ModelProto:
    """conv -> batchnorm -> relu, what onnxruntime folds into one Conv (``turned``: then two
    transposes that cancel, which relsat folds away: not a rewrite marked ``runtime``)."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "t", "m", "v"], ["n"], epsilon=1e-3),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    inits = [_weight("w", 4, 4, 3, 3), _weight("b", 4), _weight("s", 4), _weight("t", 4)]
    inits += [_weight("m", 4), numpy_helper.from_array(np.full(4, 0.8, np.float32), "v")]
    out = "y"
    if turned:
        nodes.append(helper.make_node("Transpose", ["y"], ["t1"], perm=[0, 2, 3, 1]))
        nodes.append(helper.make_node("Transpose", ["t1"], ["z"], perm=[0, 3, 1, 2]))
        out = "z"
    graph = helper.make_graph(
        nodes,
        "cbr",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_flag_parses_prints_and_is_refused_twice() -> None:
    text = "# name: r\n(relu (relu ?x)) => (relu ?x)\nruntime\n"
    rule = parse_rules(text)["r"]
    assert rule.runtime and "\nruntime" in str(rule)
    assert not parse_rules("# name: r\n(relu (relu ?x)) => (relu ?x)\n")["r"].runtime
    with pytest.raises(RuleSyntaxError, match="'runtime' given twice"):
        parse_rules(text + "runtime\n")
    shipped = {r.name for r in load_rules() if r.runtime}
    assert {"conv-batchnorm-fold", "conv-bias-relu-fuse", "matmul-bias-fuse"} <= shipped
    assert not any(name.endswith("-unfuse") for name in shipped)


def test_a_model_with_only_runtime_rewrites_is_kept_untimed() -> None:
    """The batch norm folded and the ReLU fused, as onnxruntime does: the input is kept, not
    verified, exported or timed (timing on, as by default)."""
    result = relsat.optimize(_conv_bn_relu(), relsat.Options(**ANALYTIC))
    assert {"conv-bias-batchnorm-fold", "conv-bias-relu-fuse"} <= set(result.rewrites())
    assert (result.kept, result.why) == ("original", "no rewrite")
    assert result.latency is None and result.exported is None
    assert result.verification == "not needed (unchanged)"


def test_a_model_with_another_rewrite_is_verified_and_written() -> None:
    result = relsat.optimize(_conv_bn_relu(turned=True), relsat.Options(**ANALYTIC, timing=None))
    assert result.run.tidied  # the two transposes folded away: not a runtime rule's rewrite
    assert result.verification == "passed" and result.ort_check == "passed"
    assert (result.kept, result.why) == ("optimized", "not timed")
