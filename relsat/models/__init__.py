"""The benchmark graphs of TENSAT (MLSys 2021) and a few more, built faithfully.

>>> from relsat import models
>>> models.load("nasrnn").output_shapes
[(1, 512)]

``BENCHMARKS`` are the seven graphs of the paper, in its order. Where two definitions of a network
exist, the plain name is the one TENSAT used and the other carries a suffix (``bert-2021``,
``inceptionv3-taso``); see each builder's docstring and the README for the quirks kept on purpose.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache

from relsat.errors import UnknownModelError
from relsat.graph.graph import Graph

__all__ = ["BENCHMARKS", "ModelInfo", "available", "load"]


@dataclass(frozen=True)
class ModelInfo:
    """One bundled model: its name, what it is, where its definition comes from."""

    name: str
    description: str
    source: str
    builder: str  # "module:function"
    benchmark: bool = False


_MODELS = [
    ModelInfo(
        "nasrnn",
        "NasRNN, 5 steps, hidden 512 (TENSAT benchmark)",
        "TASO examples/nasrnn.py = TENSAT src/nasrnn.rs",
        "nasrnn:build",
        True,
    ),
    ModelInfo(
        "bert",
        "BERT, 8 layers, seq 64, hidden 1024, batch 1, 8 noop joins (TENSAT benchmark)",
        "TASO examples/bert.py before ae32942 + TENSAT src/bert.rs",
        "bert:build",
        True,
    ),
    ModelInfo(
        "resnext50",
        "ResNeXt-50 (32 groups), 224x224, no classifier (TENSAT benchmark)",
        "TASO examples/resnext50.py @ f11782c",
        "resnext:build",
        True,
    ),
    ModelInfo(
        "nasneta",
        "NasNet-A, 3x(5 normal + 1 reduction) cells (TENSAT benchmark)",
        "TASO examples/nasnet_a.py",
        "nasnet:build",
        True,
    ),
    ModelInfo(
        "squeezenet",
        "SqueezeNet 1.1 (TENSAT benchmark)",
        "TENSAT model/squeezenet.model",
        "tensat_files:squeezenet",
        True,
    ),
    ModelInfo(
        "vgg19", "VGG-19 (TENSAT benchmark)", "TENSAT model/vgg.model", "tensat_files:vgg19", True
    ),
    ModelInfo(
        "inceptionv3",
        "Inception-v3, 299x299, batch 1 (TENSAT benchmark)",
        "TENSAT model/inceptionv3.model",
        "tensat_files:inceptionv3",
        True,
    ),
    ModelInfo(
        "bert-2021",
        "BERT as TASO defines it since 2021 (batch 16, input [1024,1024])",
        "TASO examples/bert.py @ f11782c",
        "bert:build_2021",
    ),
    ModelInfo(
        "inceptionv3-taso",
        "Inception-v3 as TASO defines it since 2021 (batch 32)",
        "TASO examples/inceptionv3.py @ f11782c",
        "inception:build",
    ),
    ModelInfo(
        "resnet50",
        "ResNet-50 body, input [1,64,56,56] (TASO example)",
        "TASO examples/resnet50.py @ f11782c",
        "resnet:build",
    ),
    ModelInfo(
        "mobilenetv2",
        "MobileNetV2 with batchnorm (TENSAT file, not a benchmark)",
        "TENSAT model/mobilenetv2.model",
        "tensat_files:mobilenetv2",
    ),
]
_BY_NAME = {m.name: m for m in _MODELS}
_ALIASES = {
    "vgg": "vgg19",
    "nasnet_a": "nasneta",
    "nasnet-a": "nasneta",
    "squeezenet1.1": "squeezenet",
    "resnext-50": "resnext50",
    "inception": "inceptionv3",
}

#: The seven graphs of the TENSAT paper, in the paper's order.
BENCHMARKS = tuple(m.name for m in _MODELS if m.benchmark)


def available() -> list[ModelInfo]:
    """Every bundled model, benchmarks first."""
    return list(_MODELS)


def load(name: str) -> Graph:
    """Build the bundled model ``name`` (case-insensitive; see :func:`available`)."""
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in _BY_NAME:
        raise UnknownModelError(name, [m.name for m in _MODELS])
    return _build(key)


@cache
def _build(key: str) -> Graph:
    module, function = _BY_NAME[key].builder.split(":")
    graph: Graph = getattr(importlib.import_module(f"relsat.models.{module}"), function)()
    return graph
