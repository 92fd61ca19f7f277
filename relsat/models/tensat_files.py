"""The benchmark graphs TENSAT reads from TASO ``.model`` files, loaded as TENSAT loads them.

The files are uwplse/tensat's ``model/*.model`` (MIT, see ``data/LICENSE.tensat``), shipped in
``relsat/models/data``. :mod:`relsat.models.taso_file` reads them with TENSAT's rules: the last
record is the output, only what it reaches is kept, dependencies in the listed order, pool
activations dropped (``reference/models/FORMAT.md`` §1.4).
"""

from __future__ import annotations

from importlib import resources
from typing import Literal

from relsat.graph.graph import Graph
from relsat.models.taso_file import parse_model

__all__ = ["bts", "inceptionv3", "load_file", "mobilenetv2", "squeezenet", "vgg19"]


def load_file(filename: str, *, outputs: Literal["last", "sinks"] = "last") -> Graph:
    """Parse the shipped file ``relsat/models/data/<filename>``."""
    text = resources.files("relsat.models").joinpath("data", filename).read_text("ascii")
    return parse_model(text, path=f"relsat/models/data/{filename}", outputs=outputs)


def squeezenet() -> Graph:
    """SqueezeNet 1.1, input ``[1, 3, 224, 224]``, output ``[1, 1000]`` (TENSAT benchmark).

    File ``squeezenet.model`` (uwplse/tensat ``model/squeezenet.model``), serialized from the ONNX
    model-zoo SqueezeNet 1.1 through the yycdavid/taso fork's ``load_onnx``. 66 ops (26 conv, 26
    relu, 3 maxpool, 8 concat, 1 dropout, 1 avgpool, 1 reshape) and 26 weights (57 in the file).

    Quirks (``reference/MODELS.md`` §4.5): the biases were dropped on import and survive only as
    unused weights, which are not in the graph; no conv has a fused activation, each is followed
    by a separate ReLU; the first conv is stride 2 VALID, so TENSAT's fusion rules never fuse it.
    """
    return load_file("squeezenet.model")


def vgg19() -> Graph:
    """VGG-19, input ``[1, 3, 224, 224]``, output ``[1, 1000]`` (TENSAT benchmark).

    File ``vgg.model`` (uwplse/tensat ``model/vgg.model``), from the ONNX model-zoo ``vgg19-7``
    imported like SqueezeNet. 50 ops (16 conv, 18 relu, 5 maxpool, 3 matmul, 3 transpose,
    3 reshape, 2 dropout) and 19 weights (43 in the file).

    Quirks (``reference/MODELS.md`` §4.6): no biases; the classifier weights are stored
    ``[out, in]`` and transposed in the graph; two of the three reshapes keep the shape.
    """
    return load_file("vgg.model")


def inceptionv3() -> Graph:
    """Inception-v3, input ``[1, 3, 299, 299]``, output ``[1, 2048, 1, 1]`` (TENSAT benchmark).

    File ``inceptionv3.model`` (uwplse/tensat ``model/inceptionv3.model``), exported from
    ``examples/inceptionv3.py`` of the yycdavid/taso fork; not the batch-32 network of TASO's own
    2021 script (that one is ``inceptionv3-taso``). 138 ops (94 conv, 9 avgpool, 5 maxpool,
    30 concat: 27 binary, one of 3 inputs, two of 4) and 94 weights (108 in the file).

    Quirks (``reference/MODELS.md`` §4.7, ``models/FORMAT.md`` §1.1): every conv has a fused ReLU;
    the ReLU flag of the A and C blocks' avgpools is dropped, as TENSAT drops it; this file lists
    dependencies in guid order, and block B's outer concat is kept in that listed order,
    ``concat(avgpool, concat(b1, b2))``, as TENSAT reads it.
    """
    return load_file("inceptionv3.model")


def mobilenetv2() -> Graph:
    """MobileNetV2 with batchnorm, input ``[1, 3, 224, 224]``, output ``[1, 1000]`` (no benchmark).

    File ``mobilenetv2.model`` (uwplse/tensat ``model/mobilenetv2.model``); TENSAT ships it but does
    not evaluate it. 155 ops (54 conv, 53 batchnorm, 36 relu, 10 ewadd, 1 avgpool, 1 reshape) and
    266 weights (268 in the file). Batchnorm epsilon is not stored; it is taken as 1e-5.
    """
    return load_file("mobilenetv2.model")


def bts() -> Graph:
    """BERT as TASO exported it (``bts.model``), input ``[64, 1024]``, its nine sinks as outputs.

    Not a benchmark: TENSAT only parses this file in a test. The outputs are every operator record
    nothing reads (FORMAT.md §1.5: the eight attention outputs and the last layer's matmul);
    113 ops (48 matmul, 32 reshape, 32 transpose, 1 relu) and 32 weights.

    Quirks (``models/FORMAT.md`` §1.1, §1.3): the transposes use the older ``perm…, shuffle``
    layout, read correctly here; dependencies are listed in guid order, which is not argument
    order: record 115 multiplies the value tensor by the attention logits where the network
    computes logits × value; both are ``[16, 64, 64]``, so it builds. Use ``bert`` for TENSAT's
    BERT.
    """
    return load_file("bts.model", outputs="sinks")
