"""The importer never crashes on a model onnxruntime runs (issue 40): every recognizer says "no
match" and every refusal is a typed :class:`~relsat.errors.RelsatError` naming the node.

Two parts: SegFormer's (MiT-b0, torch dynamo export) token ↔ image reshapes, where a Transpose
of a multi-input node's output (LayerNormalization, Add) is reshaped back into an image and a
recognizer expecting ``transpose(reshape(z))`` unpacked the producer's inputs as one; and a
seeded fuzz of random *valid* ONNX models built from operators of the ONNX backend suite
(``tests/onnxfuzzgen.py``), each checked by ``onnx.checker`` and run in onnxruntime first (a
model it refuses is skipped), then imported and cheaply optimized: nothing but relsat's typed
errors may come out, and no wrong result. ``RELSAT_IMPORT_FUZZ=<n>`` runs ``n`` seeds instead of
the default 60 (about 0.2 s a model; 2,000 ran clean when this was written; before the fix, 3 of
the first 60 hit the crash above).
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import relsat
from relsat import Limits, Options
from relsat import onnx as ronnx
from relsat.engine.egraph import EGraph
from relsat.engine.explore import explore
from relsat.errors import RelsatError
from relsat.pipeline.verify import VerificationError
from relsat.rewrite.rulefile import RULES_DIR, load_rules

sys.path.insert(0, str(Path(__file__).resolve().parent))

from onnxfuzzgen import describe, random_model

ort = pytest.importorskip("onnxruntime")

#: Analytic prices, no timing, one iteration: the import and the pipeline, not the search.
CHEAP = Options(cost_model="analytic", timing=None, limits=Limits(iterations=1))
FLOAT = TensorProto.FLOAT
SEEDS = range(int(os.environ.get("RELSAT_IMPORT_FUZZ", "60")))
LAYOUT = {r.name: r for r in load_rules(RULES_DIR / "layout.rules")}


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


# --- SegFormer's token <-> image reshapes ------------------------------------------------------


def _segformer(middle: str) -> onnx.ModelProto:
    """MiT-b0's patch embedding and back: a conv's image ``[1, 64, 16, 16]`` flattened to
    tokens ``[1, 256, 64]`` (Reshape, Transpose), through ``middle`` (a LayerNormalization or an
    Add: a producer of several inputs), transposed back and reshaped into an image."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    inits = [
        numpy_helper.from_array(rng.standard_normal((64, 3, 1, 1)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array([1, 64, 256], np.int64), "tokens"),
        numpy_helper.from_array(np.array([1, 64, 16, 16], np.int64), "image"),
        numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "gamma"),
        numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "beta"),
        numpy_helper.from_array(rng.standard_normal((1, 256, 64)).astype(np.float32), "pos"),
    ]
    nodes = [
        n("Conv", ["x", "w"], ["c"]),
        n("Reshape", ["c", "tokens"], ["f"]),
        n("Transpose", ["f"], ["t"], perm=[0, 2, 1]),
    ]
    if middle == "LayerNormalization":
        nodes.append(n("LayerNormalization", ["t", "gamma", "beta"], ["u"], axis=-1))
    else:
        nodes.append(n("Add", ["t", "pos"], ["u"]))
    nodes += [
        n("Transpose", ["u"], ["v"], perm=[0, 2, 1]),
        n("Reshape", ["v", "image"], ["r"]),
        n("Relu", ["r"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "segformer",
        [helper.make_tensor_value_info("x", FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", FLOAT, [1, 64, 16, 16])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("middle", ["LayerNormalization", "Add"])
def test_segformer_tokens_back_to_an_image_import_and_optimize(middle: str) -> None:
    model = _segformer(middle)
    ronnx.load(model)  # used to raise ValueError in opmap._merged_heads_swapped
    result = relsat.optimize(model, CHEAP)
    assert result.verified, result.verification
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    (want,), (got,) = _run(model, feeds), _run(result.model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    result.egraph.close()


def _heads(first: str | None, merged: list[int], shape: list[int]) -> onnx.ModelProto:
    """``x`` (through ``first`` when given) reshaped to ``merged``, transposed ``(0, 2, 1)``
    and reshaped to ``[2, 3, 5, 4]``."""
    n = helper.make_node
    nodes = [n(first, ["x"], ["z"])] if first else []
    z = "z" if first else "x"
    nodes += [n("Reshape", [z, "merged"], ["a"])] if merged else []
    a = "a" if merged else z
    nodes += [
        n("Transpose", [a], ["b"], perm=[0, 2, 1]),
        n("Reshape", ["b", "heads"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(merged or [0], np.int64), "merged"),
        numpy_helper.from_array(np.array([2, 3, 5, 4], np.int64), "heads"),
    ]
    graph = helper.make_graph(
        nodes,
        "heads",
        [helper.make_tensor_value_info("x", FLOAT, shape)],
        [helper.make_tensor_value_info("y", FLOAT, [2, 3, 5, 4])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("first", "merged", "shape", "swapped"),
    [
        ("Relu", [6, 4, 5], [2, 3, 4, 5], True),  # onnxscript's keys: one transpose of z
        (None, [6, 4, 5], [2, 3, 4, 5], True),  # z a graph input
        (None, [], [6, 4, 5], False),  # the transpose of a graph input (no producer's inputs)
        ("Relu", [], [6, 4, 5], False),  # of a relu: not a reshape
    ],
)
def test_merged_heads_match_and_near_misses_do_not_crash(
    first: str | None, merged: list[int], shape: list[int], swapped: bool
) -> None:
    """The importer reads the chain one operator at a time (it used to recognize it and crashed
    on SegFormer); the rule merged-heads-transpose makes it one transpose where it is one."""
    graph = ronnx.load(_heads(first, merged, shape))
    assert [n.params["perm"] for n in graph.nodes if n.op == "transpose"] == [(0, 2, 1)]
    eg = EGraph.from_graph(graph)
    explore(eg, [LAYOUT["merged-heads-transpose"]])
    made = eg.db.execute("SELECT s FROM enode WHERE rule = 'merged-heads-transpose'")
    assert made == ([("0_1_3_2",)] if swapped else [])


# --- the importer fuzzed (tests/onnxfuzzgen.py) -------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_importer_fuzz_raises_only_typed_errors(seed: int) -> None:
    """Import and a cheap optimize (at the inputs' shapes, a dynamic batch dim included, with
    the values onnxruntime ran) end in a result or a typed refusal; a result that computes
    something else (:class:`VerificationError`) is a failure, not a refusal."""
    model, feeds = random_model(seed)
    onnx.checker.check_model(model, full_check=True)  # the generator writes valid graphs
    try:
        _run(model, feeds)
    except Exception as exc:  # onnxruntime's own exception classes
        pytest.skip(f"onnxruntime refuses seed {seed}: {str(exc).splitlines()[0]}")
    shapes = {name: list(value.shape) for name, value in feeds.items()}
    try:
        ronnx.load(model, input_shapes=shapes)
        result = relsat.optimize(model, replace(CHEAP, input_shapes=shapes, inputs=feeds))
    except VerificationError:
        raise
    except RelsatError:
        return  # a typed refusal: what the importer may do
    except Exception as exc:
        raise AssertionError(f"seed {seed}, {describe(model)}: untyped {exc!r}") from exc
    result.egraph.close()  # verification ran inside optimize: a wrong result raised


def test_fuzz_graphs_use_the_operators_and_run() -> None:
    """The sample covers the operators the fuzz is for and dynamic batch dims, and onnxruntime
    runs nearly all of it (a generator that writes invalid graphs would test nothing)."""
    seen: set[str] = set()
    refused = 0
    for seed in SEEDS:
        model, feeds = random_model(seed)
        seen.update(n.op_type for n in model.graph.node)
        if any(d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim):
            seen.add("dynamic batch")
        try:
            _run(model, feeds)
        except Exception:  # onnxruntime's own exception classes
            refused += 1
    assert refused <= len(SEEDS) // 10
    wanted = {"MatMul", "Transpose", "Reshape", "Concat", "Slice", "Softmax", "ReduceMean"}
    wanted |= {"Add", "Mul", "Gather", "Unsqueeze", "Squeeze", "Where", "Cast", "Conv"}
    wanted |= {"LayerNormalization", "Split", "Range", "dynamic batch"}
    assert wanted - seen == set()


# --- the retry after a shape computed at run time ------------------------------------------------


def _computed_shape() -> onnx.ModelProto:
    """x + Range(0, Shape(x)[1]): ONNX's shape inference leaves the Range's length open, so the
    first import refuses it and the loader retries on a folded model."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
        helper.make_node("Range", ["zero", "n", "one"], ["positions"]),
        helper.make_node("Cast", ["positions"], ["p"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "p"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
    ]
    graph = helper.make_graph(nodes, "computed", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_folding_retry_lets_a_bug_surface(monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime refusing to fold (its own exception classes) falls through to the next way of
    folding; a bug in the retry (here a ValueError of a bad unpacking, SegFormer's crash) is not
    swallowed as "could not fold"."""
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail

    from relsat.onnx import importer

    def refused(*args: object) -> str:
        raise Fail("[ONNXRuntimeError] : 1 : FAIL : cannot fold")

    monkeypatch.setattr(importer, "_fold_constants", refused)
    graph = ronnx.load(_computed_shape())  # folded by the reference evaluator instead
    assert [graph.shape(r) for r in graph.outputs] == [(2, 5)]

    def bug(*args: object) -> str:
        inner, (z,) = "ab", "cd"  # noqa: F841  # too many values to unpack
        return "never"

    monkeypatch.setattr(importer, "_fold_constants", bug)
    with pytest.raises(ValueError, match="too many values to unpack") as caught:
        ronnx.load(_computed_shape())
    assert not isinstance(caught.value, RelsatError)
