"""Plain ``torch.nn`` models for the benchmarks: torchvision's architectures and two small nets.

Importing this module needs torch (``pip install -e '.[bench]'``). Every builder returns
``(module in eval mode, example inputs)`` and seeds torch first, so every call builds the same
model; nothing is downloaded. No exporting here (bench/exports.py does that).

The torchvision architectures are re-implemented in plain ``torch.nn``, layer for layer as
torchvision 0.2x defines them (torchvision's wheels do not import beside the CPU torch the bench
uses): ``resnet50``, ``resnext50_32x4d``, ``squeezenet1_1``, ``inception_v3`` (aux logits off,
299x299, ``transform_input=False``), ``vgg19``, ``mobilenet_v2`` (ReLU6, exported as Clip),
``densenet121`` and ``efficientnet_b0`` (SiLU, squeeze-excitation; stochastic depth is the
identity at inference and left out), with torchvision's parameter counts. Every bias is a
small seeded non-zero value (:func:`nonzero_biases`), as a trained model's. Batch-norm running
statistics are calibrated on one seeded random batch (as if trained, :func:`calibrated`), so
activations stay in range through 50+ layers and numerical comparisons mean something.

The small nets (``transformer``: ``nn.TransformerEncoder``; ``convnet``: conv, batch-norm, fire
and residual blocks) are bench/onnx_models.py's torch sources.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

SEED = 0
#: The spread of the values :func:`nonzero_biases` gives every bias: small, as a trained model's.
BIAS_STD = 0.02

Example = tuple[torch.Tensor, ...]


def nonzero_biases(model: nn.Module, seed: int = SEED) -> nn.Module:
    """``model`` with every bias (any parameter named ``bias`` or ``*_bias``: linear, conv and
    norm layers, attention's packed projection) drawn from a normal of spread :data:`BIAS_STD`,
    seeded ``seed``; in place.

    Random init leaves biases at 0, which a trained model's are not: a tool that drops ``x + 0``
    would be credited with a gain no trained model gives. Every builder of the bench calls this
    after init (before :func:`calibrated`, which measures the statistics the biases move).
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "bias" or leaf.endswith("_bias"):
                p.copy_(torch.randn(p.shape, generator=g) * BIAS_STD)
    return model


# ---------------------------------------------------------------------------------------------
# torchvision architectures


class Bottleneck(nn.Module):
    """torchvision's ResNet v1.5 bottleneck: the stride sits on the 3x3 conv."""

    expansion = 4

    def __init__(
        self, cin: int, planes: int, stride: int = 1, groups: int = 1, base_width: int = 64
    ) -> None:
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        cout = planes * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet with bottleneck blocks (``layers`` blocks per stage)."""

    def __init__(self, layers: Sequence[int], groups: int = 1, width_per_group: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, cin = [], 64
        for i, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers, strict=True)):
            stride = 1 if i == 0 else 2
            stage = []
            for b in range(blocks):
                stage.append(
                    Bottleneck(cin, planes, stride if b == 0 else 1, groups, width_per_group)
                )
                cin = planes * Bottleneck.expansion
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * Bottleneck.expansion, 1000)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class Fire(nn.Module):
    """SqueezeNet's fire module (with biases and ReLUs, as torchvision has it)."""

    def __init__(self, cin: int, squeeze: int, expand1: int, expand3: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.expand1x1 = nn.Conv2d(squeeze, expand1, 1)
        self.expand3x3 = nn.Conv2d(squeeze, expand3, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.relu(self.squeeze(x))
        return torch.cat([self.relu(self.expand1x1(s)), self.relu(self.expand3x3(s))], 1)


class SqueezeNet11(nn.Module):
    """torchvision's ``squeezenet1_1``."""

    def __init__(self) -> None:
        super().__init__()
        pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, 2),
            nn.ReLU(inplace=True),
            pool(),
            Fire(64, 16, 64, 64),
            Fire(128, 16, 64, 64),
            pool(),
            Fire(128, 32, 128, 128),
            Fire(256, 32, 128, 128),
            pool(),
            Fire(256, 48, 192, 192),
            Fire(384, 48, 192, 192),
            Fire(384, 64, 256, 256),
            Fire(512, 64, 256, 256),
        )
        final = nn.Conv2d(512, 1000, 1)
        self.classifier = nn.Sequential(
            nn.Dropout(0.5), final, nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1))
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                if m is final:
                    nn.init.normal_(m.weight, 0.0, 0.01)
                else:
                    nn.init.kaiming_uniform_(m.weight)
                nn.init.zeros_(m.bias)  # type: ignore[arg-type]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


class VGG(nn.Module):
    """torchvision's VGG without batch norm (``cfg`` as torchvision's, "M" a max pool)."""

    def __init__(self, cfg: Sequence[int | str]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                assert isinstance(v, int)
                layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU(inplace=True)]
                cin = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(True),
            nn.Dropout(),
            nn.Linear(4096, 4096),
            nn.ReLU(True),
            nn.Dropout(),
            nn.Linear(4096, 1000),
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)  # type: ignore[arg-type]
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


VGG19: list[int | str] = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M"]
VGG19 += [512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]


class BasicConv2d(nn.Module):
    """Inception's conv (no bias) + batch norm (eps 0.001) + ReLU."""

    def __init__(self, cin: int, cout: int, kernel: int | tuple[int, int], **kw: object) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, bias=False, **kw)  # type: ignore[arg-type]
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def _avg3(x: torch.Tensor) -> torch.Tensor:
    # torchvision's branch pools: 3x3, stride 1, pad 1, padding counted in the divisor.
    return nn.functional.avg_pool2d(x, kernel_size=3, stride=1, padding=1)


class InceptionA(nn.Module):
    def __init__(self, cin: int, pool_features: int) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, 64, 1)
        self.branch5x5_1 = BasicConv2d(cin, 48, 1)
        self.branch5x5_2 = BasicConv2d(48, 64, 5, padding=2)
        self.branch3x3dbl_1 = BasicConv2d(cin, 64, 1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, 3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, 3, padding=1)
        self.branch_pool = BasicConv2d(cin, pool_features, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.branch1x1(x)
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return torch.cat([b1, b5, b3, self.branch_pool(_avg3(x))], 1)


class InceptionB(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.branch3x3 = BasicConv2d(cin, 384, 3, stride=2)
        self.branch3x3dbl_1 = BasicConv2d(cin, 64, 1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, 3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.branch3x3(x)
        bd = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return torch.cat([b3, bd, nn.functional.max_pool2d(x, 3, 2)], 1)


class InceptionC(nn.Module):
    def __init__(self, cin: int, c7: int) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, 192, 1)
        self.branch7x7_1 = BasicConv2d(cin, c7, 1)
        self.branch7x7_2 = BasicConv2d(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7_3 = BasicConv2d(c7, 192, (7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = BasicConv2d(cin, c7, 1)
        self.branch7x7dbl_2 = BasicConv2d(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = BasicConv2d(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = BasicConv2d(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = BasicConv2d(c7, 192, (1, 7), padding=(0, 3))
        self.branch_pool = BasicConv2d(cin, 192, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.branch1x1(x)
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        bd = self.branch7x7dbl_1(x)
        for layer in (self.branch7x7dbl_2, self.branch7x7dbl_3, self.branch7x7dbl_4):
            bd = layer(bd)
        bd = self.branch7x7dbl_5(bd)
        return torch.cat([b1, b7, bd, self.branch_pool(_avg3(x))], 1)


class InceptionD(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.branch3x3_1 = BasicConv2d(cin, 192, 1)
        self.branch3x3_2 = BasicConv2d(192, 320, 3, stride=2)
        self.branch7x7x3_1 = BasicConv2d(cin, 192, 1)
        self.branch7x7x3_2 = BasicConv2d(192, 192, (1, 7), padding=(0, 3))
        self.branch7x7x3_3 = BasicConv2d(192, 192, (7, 1), padding=(3, 0))
        self.branch7x7x3_4 = BasicConv2d(192, 192, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.branch3x3_2(self.branch3x3_1(x))
        b7 = self.branch7x7x3_1(x)
        for layer in (self.branch7x7x3_2, self.branch7x7x3_3, self.branch7x7x3_4):
            b7 = layer(b7)
        return torch.cat([b3, b7, nn.functional.max_pool2d(x, 3, 2)], 1)


class InceptionE(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, 320, 1)
        self.branch3x3_1 = BasicConv2d(cin, 384, 1)
        self.branch3x3_2a = BasicConv2d(384, 384, (1, 3), padding=(0, 1))
        self.branch3x3_2b = BasicConv2d(384, 384, (3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = BasicConv2d(cin, 448, 1)
        self.branch3x3dbl_2 = BasicConv2d(448, 384, 3, padding=1)
        self.branch3x3dbl_3a = BasicConv2d(384, 384, (1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = BasicConv2d(384, 384, (3, 1), padding=(1, 0))
        self.branch_pool = BasicConv2d(cin, 192, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.branch1x1(x)
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        bd = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        bd = torch.cat([self.branch3x3dbl_3a(bd), self.branch3x3dbl_3b(bd)], 1)
        return torch.cat([b1, b3, bd, self.branch_pool(_avg3(x))], 1)


class InceptionV3(nn.Module):
    """torchvision's ``inception_v3`` without the auxiliary classifier, ``transform_input`` off."""

    def __init__(self) -> None:
        super().__init__()
        self.Conv2d_1a_3x3 = BasicConv2d(3, 32, 3, stride=2)
        self.Conv2d_2a_3x3 = BasicConv2d(32, 32, 3)
        self.Conv2d_2b_3x3 = BasicConv2d(32, 64, 3, padding=1)
        self.maxpool1 = nn.MaxPool2d(3, 2)
        self.Conv2d_3b_1x1 = BasicConv2d(64, 80, 1)
        self.Conv2d_4a_3x3 = BasicConv2d(80, 192, 3)
        self.maxpool2 = nn.MaxPool2d(3, 2)
        self.Mixed_5b = InceptionA(192, 32)
        self.Mixed_5c = InceptionA(256, 64)
        self.Mixed_5d = InceptionA(288, 64)
        self.Mixed_6a = InceptionB(288)
        self.Mixed_6b = InceptionC(768, 128)
        self.Mixed_6c = InceptionC(768, 160)
        self.Mixed_6d = InceptionC(768, 160)
        self.Mixed_6e = InceptionC(768, 192)
        self.Mixed_7a = InceptionD(768)
        self.Mixed_7b = InceptionE(1280)
        self.Mixed_7c = InceptionE(2048)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(2048, 1000)
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.trunc_normal_(m.weight, mean=0.0, std=0.1, a=-2, b=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x)))
        x = self.maxpool2(self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(self.maxpool1(x))))
        for name in ("5b", "5c", "5d", "6a", "6b", "6c", "6d", "6e", "7a", "7b", "7c"):
            x = getattr(self, f"Mixed_{name}")(x)
        return self.fc(torch.flatten(self.dropout(self.avgpool(x)), 1))


def _conv_bn_relu6(
    cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1
) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU6(inplace=True),
    )


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand, 3x3 depthwise, 1x1 linear projection, skip if it fits."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = round(cin * expand)
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(_conv_bn_relu6(cin, hidden, 1))
        layers += [
            _conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision's ``mobilenet_v2``, width 1.0 (every channel count a multiple of 8 already)."""

    #: (expansion t, channels c, blocks n, first stride s) per stage, as torchvision has them.
    SETTINGS: tuple[tuple[int, int, int, int], ...] = (
        (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
        (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1),
    )  # fmt: skip

    def __init__(self) -> None:
        super().__init__()
        features: list[nn.Module] = [_conv_bn_relu6(3, 32, stride=2)]
        cin = 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                features.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        features.append(_conv_bn_relu6(cin, 1280, 1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, 1000))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


class DenseLayer(nn.Module):
    """DenseNet's layer: BN-ReLU-Conv1x1 (to ``bn_size * growth``), BN-ReLU-Conv3x3 (to ``growth``),
    on the concatenation of every earlier feature map of the block (no dropout, as torchvision)."""

    def __init__(self, cin: int, growth: int, bn_size: int) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        x = self.conv1(torch.relu(self.norm1(torch.cat(features, 1))))
        return self.conv2(torch.relu(self.norm2(x)))


class DenseBlock(nn.Module):
    def __init__(self, layers: int, cin: int, growth: int, bn_size: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            DenseLayer(cin + i * growth, growth, bn_size) for i in range(layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return torch.cat(features, 1)


class DenseNet(nn.Module):
    """torchvision's DenseNet: growth ``growth``, ``blocks`` layers per dense block, transitions
    BN-ReLU-Conv1x1 (halving the channels) then 2x2 average pooling."""

    def __init__(
        self, growth: int = 32, blocks: Sequence[int] = (6, 12, 24, 16), init: int = 64
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(3, init, 7, 2, 3, bias=False),
            nn.BatchNorm2d(init),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        ]
        c = init
        for i, n in enumerate(blocks):
            layers.append(DenseBlock(n, c, growth, bn_size=4))
            c += n * growth
            if i != len(blocks) - 1:
                layers += [
                    nn.BatchNorm2d(c),
                    nn.ReLU(inplace=True),
                    nn.Conv2d(c, c // 2, 1, bias=False),
                    nn.AvgPool2d(2, 2),
                ]
                c //= 2
        layers.append(nn.BatchNorm2d(c))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(c, 1000)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(torch.relu(self.features(x)), (1, 1))
        return self.classifier(torch.flatten(x, 1))


def _conv_bn_silu(
    cin: int, cout: int, kernel: int = 1, stride: int = 1, groups: int = 1, act: bool = True
) -> nn.Module:
    """torchvision's ``Conv2dNormActivation`` with SiLU (or none)."""
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    return nn.Sequential(*layers, *([nn.SiLU(inplace=True)] if act else []))


class SqueezeExcitation(nn.Module):
    """torchvision's: global average pool, 1x1 conv, SiLU, 1x1 conv, sigmoid, scale the input."""

    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = nn.functional.adaptive_avg_pool2d(x, 1)
        scale = torch.sigmoid(self.fc2(nn.functional.silu(self.fc1(scale))))
        return scale * x


class MBConv(nn.Module):
    """EfficientNet's block: 1x1 expand, kxk depthwise, squeeze-excitation (input channels / 4),
    1x1 linear projection, skip if it fits (stochastic depth: the identity at inference)."""

    def __init__(self, expand: int, kernel: int, stride: int, cin: int, cout: int) -> None:
        super().__init__()
        hidden = cin * expand  # already a multiple of 8 for B0
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if hidden != cin:
            layers.append(_conv_bn_silu(cin, hidden))
        layers += [
            _conv_bn_silu(hidden, hidden, kernel, stride, groups=hidden),
            SqueezeExcitation(hidden, max(1, cin // 4)),
            _conv_bn_silu(hidden, cout, act=False),
        ]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.use_res_connect else self.block(x)


class EfficientNetB0(nn.Module):
    """torchvision's ``efficientnet_b0`` (width and depth 1.0, batch-norm eps 1e-5)."""

    #: (expansion, kernel, first stride, input channels, output channels, blocks) per stage.
    SETTINGS: tuple[tuple[int, int, int, int, int, int], ...] = (
        (1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
        (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1),
    )  # fmt: skip

    def __init__(self) -> None:
        super().__init__()
        features: list[nn.Module] = [_conv_bn_silu(3, 32, 3, 2)]
        for t, k, s, cin, cout, n in self.SETTINGS:
            stage = [
                MBConv(t, k, s if i == 0 else 1, cin if i == 0 else cout, cout) for i in range(n)
            ]
            features.append(nn.Sequential(*stage))
        features.append(_conv_bn_silu(320, 1280))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, 1000))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                bound = 1.0 / m.out_features**0.5
                nn.init.uniform_(m.weight, -bound, bound)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


def calibrated(model: nn.Module, example: torch.Tensor) -> nn.Module:
    """``model`` in eval mode, its batch-norm statistics those of one seeded random batch of 4.

    Default statistics (mean 0, variance 1) let activations grow layer after layer; statistics
    measured on data keep them near unit scale, as in a trained network.
    """
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    if norms:
        for m in norms:
            m.reset_running_stats()
            m.momentum = None  # a cumulative average: one batch sets the statistics
        model.train()
        with torch.no_grad():
            model(torch.randn(4, *example.shape[1:]))
    return model.eval()


def _vision(build: Callable[[], nn.Module], size: int = 224) -> tuple[nn.Module, Example]:
    torch.manual_seed(SEED)
    model = nonzero_biases(build())
    example = torch.randn(1, 3, size, size)
    return calibrated(model, example), (example,)


def resnet50() -> tuple[nn.Module, Example]:
    """torchvision ``resnet50``: bottlenecks [3, 4, 6, 3]; 1x3x224x224."""
    return _vision(lambda: ResNet([3, 4, 6, 3]))


def resnext50_32x4d() -> tuple[nn.Module, Example]:
    """torchvision ``resnext50_32x4d``: 32 groups of width 4; 1x3x224x224."""
    return _vision(lambda: ResNet([3, 4, 6, 3], groups=32, width_per_group=4))


def squeezenet1_1() -> tuple[nn.Module, Example]:
    """torchvision ``squeezenet1_1``; 1x3x224x224."""
    return _vision(SqueezeNet11)


def inception_v3() -> tuple[nn.Module, Example]:
    """torchvision ``inception_v3``, aux logits off; 1x3x299x299."""
    return _vision(InceptionV3, 299)


def vgg19() -> tuple[nn.Module, Example]:
    """torchvision ``vgg19`` (no batch norm); 1x3x224x224."""
    return _vision(lambda: VGG(VGG19))


def mobilenet_v2() -> tuple[nn.Module, Example]:
    """torchvision ``mobilenet_v2`` (ReLU6); 1x3x224x224."""
    return _vision(MobileNetV2)


def densenet121() -> tuple[nn.Module, Example]:
    """torchvision ``densenet121``: growth 32, dense blocks (6, 12, 24, 16); 1x3x224x224."""
    return _vision(DenseNet)


def efficientnet_b0() -> tuple[nn.Module, Example]:
    """torchvision ``efficientnet_b0`` (SiLU, squeeze-excitation); 1x3x224x224."""
    return _vision(EfficientNetB0)


# ---------------------------------------------------------------------------------------------
# two small nets of standard building blocks


def transformer() -> tuple[nn.Module, Example]:
    """``nn.TransformerEncoder``: d_model 256, 4 heads, feed-forward 1024, 2 layers; seq 64."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(256, 4, dim_feedforward=1024, dropout=0.0, batch_first=True)
    model = nonzero_biases(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False))
    return model.eval(), (torch.randn(1, 64, 256),)


def _block(cin: int, cout: int, kernel: int = 3, groups: int = 1) -> list[nn.Module]:
    return [
        nn.Conv2d(cin, cout, kernel, padding=kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
    ]


class FireBN(nn.Module):
    """SqueezeNet's fire module with batch norm: a 1x1 squeeze, then 1x1 and 3x3 expands side
    by side."""

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


def convnet() -> tuple[nn.Module, Example]:
    """Conv2d+BatchNorm2d+ReLU blocks, a grouped and a depthwise conv, fire modules, a residual
    block, MaxPool2d, AdaptiveAvgPool2d and a Linear classifier; input 1x3x112x112."""
    torch.manual_seed(0)
    model = nn.Sequential(
        *_block(3, 32),
        nn.MaxPool2d(2),
        *_block(32, 64),
        *_block(64, 64, groups=64),  # depthwise
        FireBN(64, 16, 64),
        FireBN(128, 16, 64),
        nn.MaxPool2d(2),
        *_block(128, 128, groups=4),  # grouped
        Residual(128),
        FireBN(128, 32, 128),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(256, 10),
    )
    for m in model.modules():  # non-trivial statistics, so folding them is visible in the numbers
        if isinstance(m, nn.BatchNorm2d):
            assert m.running_mean is not None and m.running_var is not None
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return model.eval(), (torch.randn(1, 3, 112, 112),)


TORCHVISION: dict[str, Callable[[], tuple[nn.Module, Example]]] = {
    "resnet50": resnet50,
    "resnext50_32x4d": resnext50_32x4d,
    "squeezenet1_1": squeezenet1_1,
    "inception_v3": inception_v3,
    "vgg19": vgg19,
    "mobilenet_v2": mobilenet_v2,
    "densenet121": densenet121,
    "efficientnet_b0": efficientnet_b0,
}
SMALL: dict[str, Callable[[], tuple[nn.Module, Example]]] = {
    "transformer": transformer,
    "convnet": convnet,
}
