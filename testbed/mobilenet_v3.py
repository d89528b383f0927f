"""A MobileNet-V3 in the shape of torchvision's (Howard et al. 2019), for the quantize tests and
benchmark: torchvision is not installed here (its wheels are CUDA builds that break torch's
imports), and transformers has no MobileNet-V3. What the quantizer meets is what torchvision's
model gives it: a hardswish stem, inverted residuals (1x1 expansion, a depthwise conv, a
squeeze-excite gate of adaptive average pooling, 1x1 convs, ReLU and hardsigmoid multiplied
into the features, a 1x1 projection, a residual add where shapes allow), a hardswish head and
a two-layer classifier. Convolutions pad themselves (no F.pad), as torchvision's do.

`mobilenet_v3("tiny")` is CI-sized (32x32 images, 16-48 channels, 10 classes: 0.1 MB of
weights); `"small"` is MobileNet-V3-Small itself (224x224, 1000 classes: 2.5M parameters)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

SEED = 0

# (kernel, expanded channels, out channels, squeeze-excite, activation, stride), per block
SMALL = (
    (3, 16, 16, True, "RE", 2),
    (3, 72, 24, False, "RE", 2),
    (3, 88, 24, False, "RE", 1),
    (5, 96, 40, True, "HS", 2),
    (5, 240, 40, True, "HS", 1),
    (5, 240, 40, True, "HS", 1),
    (5, 120, 48, True, "HS", 1),
    (5, 144, 48, True, "HS", 1),
    (5, 288, 96, True, "HS", 2),
    (5, 576, 96, True, "HS", 1),
    (5, 576, 96, True, "HS", 1),
)
TINY = (
    (3, 16, 16, True, "RE", 2),
    (3, 48, 24, False, "RE", 1),
    (3, 72, 24, False, "RE", 1),
    (5, 72, 32, True, "HS", 2),
    (5, 96, 32, True, "HS", 1),
)
# name -> (blocks, stem channels, head channels, classifier width, classes, image size)
CONFIGS = {"tiny": (TINY, 16, 96, 64, 10, 32), "small": (SMALL, 16, 576, 1024, 1000, 224)}


def _divisible(channels: float, by: int = 8) -> int:
    """torchvision's _make_divisible: channels rounded to a multiple of 8, never below 90%."""
    rounded = max(by, int(channels + by / 2) // by * by)
    return rounded + by if rounded < 0.9 * channels else rounded


def _conv(
    cin: int, cout: int, kernel: int = 1, stride: int = 1, groups: int = 1, act: str | None = None
) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act is not None:
        layers.append(nn.Hardswish() if act == "HS" else nn.ReLU())
    return nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        squeezed = _divisible(channels // 4)
        self.fc1, self.fc2 = nn.Conv2d(channels, squeezed, 1), nn.Conv2d(squeezed, channels, 1)
        self.relu, self.gate = nn.ReLU(), nn.Hardsigmoid()

    def forward(self, x: Tensor) -> Tensor:
        scale = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(self.relu(self.fc1(scale))))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, kernel: int, expanded: int, cout: int, se: bool, act: str, stride: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [] if expanded == cin else [_conv(cin, expanded, act=act)]
        layers.append(_conv(expanded, expanded, kernel, stride, groups=expanded, act=act))  # depthwise
        if se:
            layers.append(SqueezeExcite(expanded))
        layers.append(_conv(expanded, cout))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: Tensor) -> Tensor:
        y = self.block(x)
        return y + x if self.residual else y


class MobileNetV3(nn.Module):
    def __init__(self, blocks: tuple, stem: int, head: int, width: int, classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [_conv(3, stem, 3, 2, act="HS")]
        channels = stem
        for kernel, expanded, cout, se, act, stride in blocks:
            layers.append(InvertedResidual(channels, kernel, expanded, cout, se, act, stride))
            channels = cout
        layers.append(_conv(channels, head, act="HS"))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(head, width), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(width, classes)
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


def mobilenet_v3(size: str = "tiny") -> tuple[nn.Module, tuple[Tensor, ...], dict[str, Tensor]]:
    """(the model, seeded and in eval mode with batch norms' statistics randomized, so that
    folding them changes the weights; a batch of one image; no keyword inputs), as
    testbed/hf_models.py's builders return."""
    blocks, stem, head, width, classes, image = CONFIGS[size]
    torch.manual_seed(SEED)
    model = MobileNetV3(blocks, stem, head, width, classes).eval()
    with torch.no_grad():
        for child in model.modules():
            if isinstance(child, nn.BatchNorm2d):
                child.running_mean.uniform_(-0.5, 0.5)
                child.running_var.uniform_(0.5, 2.0)
    return model, (torch.randn(1, 3, image, image),), {}
