"""The bundled example ONNX file: a small SqueezeNet-style classifier, ``data/example.onnx``.

What a user's exported model looks like: convolutions with biases, two fire modules (a 1×1
squeeze conv feeding parallel 1×1 and 3×3 expand convs whose ReLU outputs are concatenated — the
shape TENSAT's fusion and enlarge rules rewrite), max pooling, global average pooling, a ``Gemm``
classifier and a ``Softmax`` relsat does not rewrite (kept as an opaque operator). Weights are
seeded random numbers. Regenerate with ``python -m relsat.models.example``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["PATH", "build"]

#: Where the example ships.
PATH = Path(__file__).resolve().parent / "data" / "example.onnx"


def build() -> bytes:
    """The example model, serialized (deterministic bytes)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2021)
    inits, nodes = [], []

    def weight(name: str, shape: tuple[int, ...]) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        data = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
        inits.append(numpy_helper.from_array(data, name))
        return name

    def conv(x: str, cin: int, cout: int, k: int, name: str, stride: int = 1) -> str:
        w, b = weight(f"{name}.weight", (cout, cin, k, k)), weight(f"{name}.bias", (cout,))
        nodes.append(
            helper.make_node(
                "Conv",
                [x, w, b],
                [f"{name}.out"],
                name=name,
                kernel_shape=[k, k],
                strides=[stride, stride],
                pads=[k // 2] * 4,
            )
        )
        nodes.append(
            helper.make_node("Relu", [f"{name}.out"], [f"{name}.relu"], name=f"{name}.act")
        )
        return f"{name}.relu"

    def fire(x: str, cin: int, squeeze: int, expand: int, name: str) -> str:
        s = conv(x, cin, squeeze, 1, f"{name}.squeeze")
        a = conv(s, squeeze, expand, 1, f"{name}.expand1x1")
        b = conv(s, squeeze, expand, 3, f"{name}.expand3x3")
        nodes.append(
            helper.make_node("Concat", [a, b], [f"{name}.out"], name=f"{name}.cat", axis=1)
        )
        return f"{name}.out"

    x = conv("image", 3, 32, 3, "stem", stride=2)
    nodes.append(
        helper.make_node(
            "MaxPool", [x], ["pool1"], name="pool1", kernel_shape=[3, 3], strides=[2, 2]
        )
    )
    x = fire("pool1", 32, 16, 32, "fire2")
    x = fire(x, 64, 16, 32, "fire3")
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1))
    w, b = weight("fc.weight", (10, 64)), weight("fc.bias", (10,))
    nodes.append(helper.make_node("Gemm", ["flat", w, b], ["logits"], name="fc", transB=1))
    nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1))
    graph = helper.make_graph(
        nodes,
        "relsat-example",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 64, 64])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
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
