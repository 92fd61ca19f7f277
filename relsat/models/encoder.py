"""The Quickstart's model: one transformer encoder layer as torch's legacy exporter writes it,
``data/encoder.onnx``.

A BERT-style layer at 256 tokens (hidden 64, 2 heads, MLP 256): the attention in the spelling
``torch.onnx.export`` gives ``scaled_dot_product_attention`` at opset 17 — q and kᵀ each scaled by
``sqrt(1/sqrt(head_dim))``, the additive mask, Softmax, the ``Where(IsNaN(p), 0, p)`` guard —
which onnxruntime's own graph optimizer does not recognize, then the output projection, a
residual ``Add`` and ``LayerNormalization``, an MLP with the exact (erf) GELU spelled out, and a
second residual and LayerNormalization. relsat fuses the attention into one ONNX ``Attention``
(opset 23) that onnxruntime runs as one kernel. Weights are seeded random numbers scaled by
``1/sqrt(fan_in)``; biases and layer norms are small and not trivial, as a trained model's
(biases ``0.02`` times a normal, gains ``1`` plus that, from a second seed): a bias of zeros
is an ``x + 0`` that a rule drops, and the fusions with the bias (BiasGelu,
SkipLayerNormalization) would have nothing to fuse. Regenerate with ``python -m
relsat.models.encoder``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["PATH", "build"]

#: Where the model ships.
PATH = Path(__file__).resolve().parent / "data" / "encoder.onnx"

TOKENS, HIDDEN, HEADS, MLP = 256, 64, 2, 256
#: The spread of the biases and of the layer norms' gains around 1.
NOISE = 0.02


def build() -> bytes:
    """The encoder layer, serialized (deterministic bytes)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2021)
    small = np.random.default_rng(2022)  # biases and norms: the weights' draws stay as they were
    head_dim = HIDDEN // HEADS
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def weight(name: str, shape: tuple[int, ...], fan_in: int) -> str:
        return const(name, (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32))

    def noise(name: str, n: int, mean: float = 0.0) -> str:
        return const(name, (mean + NOISE * small.standard_normal(n)).astype(np.float32))

    def op(op_type: str, inputs: list[str], name: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def linear(x: str, cin: int, cout: int, name: str) -> str:
        w = weight(f"{name}.weight", (cin, cout), cin)
        b = noise(f"{name}.bias", cout)
        return op("Add", [op("MatMul", [x, w], f"{name}.matmul"), b], f"{name}.out")

    def layernorm(x: str, name: str) -> str:
        g = noise(f"{name}.weight", HIDDEN, mean=1.0)
        b = noise(f"{name}.bias", HIDDEN)
        return op("LayerNormalization", [x, g, b], name, axis=-1, epsilon=1e-12)

    heads = const("heads_shape", np.array([1, TOKENS, HEADS, head_dim], np.int64))
    merged = const("hidden_shape", np.array([1, TOKENS, HIDDEN], np.int64))
    root = const("root_scale", np.array((1 / np.sqrt(head_dim)) ** 0.5, np.float32))
    zero = const("zero", np.array([0.0], np.float32))

    def split(x: str, perm: list[int], name: str) -> str:
        return op("Transpose", [op("Reshape", [x, heads], f"{name}.split")], name, perm=perm)

    q = split(linear("hidden", HIDDEN, HIDDEN, "query"), [0, 2, 1, 3], "q")
    k = split(linear("hidden", HIDDEN, HIDDEN, "key"), [0, 2, 3, 1], "kt")
    v = split(linear("hidden", HIDDEN, HIDDEN, "value"), [0, 2, 1, 3], "v")
    scores = op(
        "MatMul", [op("Mul", [q, root], "q.scaled"), op("Mul", [k, root], "kt.scaled")], "scores"
    )
    probs = op("Softmax", [op("Add", [scores, "mask"], "scores.masked")], "probs", axis=-1)
    guarded = op("Where", [op("IsNaN", [probs], "probs.nan"), zero, probs], "probs.guarded")
    ctx = op("Transpose", [op("MatMul", [guarded, v], "context")], "context.t", perm=[0, 2, 1, 3])
    attn = linear(op("Reshape", [ctx, merged], "context.merged"), HIDDEN, HIDDEN, "attn_out")
    x = layernorm(op("Add", [attn, "hidden"], "residual1"), "norm1")
    h = linear(x, HIDDEN, MLP, "mlp_in")
    erf = op(
        "Erf",
        [op("Div", [h, const("sqrt2", np.array(np.sqrt(2), np.float32))], "gelu.div")],
        "gelu.erf",
    )
    one = const("one", np.array(1.0, np.float32))
    half = const("half", np.array(0.5, np.float32))
    gelu = op("Mul", [op("Mul", [h, op("Add", [erf, one], "gelu.add")], "gelu.mul"), half], "gelu")
    y = layernorm(op("Add", [linear(gelu, MLP, HIDDEN, "mlp_out"), x], "residual2"), "norm2")
    nodes.append(helper.make_node("Identity", [y], ["output"], name="output"))
    graph = helper.make_graph(
        nodes,
        "relsat-encoder-layer",
        [
            helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, TOKENS, HIDDEN]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, TOKENS, TOKENS]),
        ],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, TOKENS, HIDDEN])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="relsat", ir_version=8
    )
    onnx.checker.check_model(model, full_check=True)
    data: bytes = model.SerializeToString()
    return data


if __name__ == "__main__":
    PATH.write_bytes(build())
    print(f"wrote {PATH}")
