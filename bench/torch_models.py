"""Small models made of standard ``torch.nn`` building blocks, exported with ``torch.onnx.export``.

Used by ``bench/onnx_models.py``. Importing this module needs torch; ``MODELS`` maps a name to a
builder returning ``(module in eval mode, example input)``. Weights and batch-norm statistics are
seeded random values, so every run exports the same model.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

#: The ONNX opset of the exports (relsat writes opset 17 too).
OPSET = 17


def transformer() -> tuple[nn.Module, torch.Tensor]:
    """``nn.TransformerEncoder``: d_model 256, 4 heads, feed-forward 1024, 2 layers; seq 64."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(256, 4, dim_feedforward=1024, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    return model.eval(), torch.randn(1, 64, 256)


def _block(cin: int, cout: int, kernel: int = 3, groups: int = 1) -> list[nn.Module]:
    return [
        nn.Conv2d(cin, cout, kernel, padding=kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
    ]


class Fire(nn.Module):
    """SqueezeNet's fire module: a 1x1 squeeze, then 1x1 and 3x3 expands side by side."""

    def __init__(self, cin: int, squeeze: int, expand: int) -> None:
        super().__init__()
        self.squeeze = nn.Sequential(*_block(cin, squeeze, 1))
        self.expand1 = nn.Sequential(*_block(squeeze, expand, 1))
        self.expand3 = nn.Sequential(*_block(squeeze, expand, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.squeeze(x)
        return torch.cat([self.expand1(s), self.expand3(s)], 1)


class Residual(nn.Module):
    """A depthwise 3x3 then pointwise 1x1 block with a skip connection."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            *_block(channels, channels, 3, groups=channels), *_block(channels, channels, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def convnet() -> tuple[nn.Module, torch.Tensor]:
    """Conv2d+BatchNorm2d+ReLU blocks, a grouped and a depthwise conv, fire modules, a residual
    block, MaxPool2d, AdaptiveAvgPool2d and a Linear classifier; input 1x3x112x112."""
    torch.manual_seed(0)
    model = nn.Sequential(
        *_block(3, 32),
        nn.MaxPool2d(2),
        *_block(32, 64),
        *_block(64, 64, groups=64),  # depthwise
        Fire(64, 16, 64),
        Fire(128, 16, 64),
        nn.MaxPool2d(2),
        *_block(128, 128, groups=4),  # grouped
        Residual(128),
        Fire(128, 32, 128),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(256, 10),
    )
    for m in model.modules():  # non-trivial statistics, so folding them is visible in the numbers
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return model.eval(), torch.randn(1, 3, 112, 112)


MODELS = {"transformer": transformer, "convnet": convnet}


def export(name: str, path: Path) -> list[str]:
    """Export model ``name`` to ``path`` (TorchScript exporter, static shapes); its output names."""
    model, example = MODELS[name]()
    with warnings.catch_warnings():  # the exporter warns about TorchScript's deprecation
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (example,),
            str(path),
            dynamo=False,  # the dynamo exporter needs onnxscript, which relsat does not depend on
            opset_version=OPSET,
            input_names=["input"],
            output_names=["output"],
        )
    return ["output"]
