"""Small models quantized as ExecuTorch's XNNPACK quantizer does (torchao's PT2E flow), by
name and config: what the quantized-program tests compile and run, and one of the programs
benchmarks/fuzz.py mutates."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from testbed.models import pt2e_quantize


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.depthwise = nn.Conv2d(8, 8, 3, groups=8)
        self.fc = nn.Linear(8 * 2 * 2, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc(F.relu(self.depthwise(x)).flatten(1))


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        return self.b(F.relu(self.a(x))) + x


class ConvBatchNorm1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv1d(4, 8, 3), nn.BatchNorm1d(8)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        return torch.softmax(self.q(x) @ self.k(x).transpose(-1, -2), -1) @ self.v(x)


MODELS = {
    "mlp": (lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), (2, 8)),
    "cnn": (CNN, (1, 3, 8, 8)),
    "residual": (Residual, (4, 16)),
    "conv1d_bn": (ConvBatchNorm1d, (2, 4, 10)),
    "attention": (Attention, (2, 5, 16)),
}
# weights per tensor or per channel; activations static, or quantized at run time (dynamic)
CONFIGS = {
    "per_tensor": {},
    "per_channel": {"is_per_channel": True},
    "dynamic": {"is_per_channel": True, "is_dynamic": True},
}


def quantize(model: str, config: str) -> tuple[torch.export.ExportedProgram, nn.Module, tuple]:
    """(the quantized program, the quantized module it was exported from, sample inputs)."""
    torch.manual_seed(0)
    make, shape = MODELS[model]
    args = (torch.randn(shape),)
    return (*pt2e_quantize(make(), args, **CONFIGS[config]), args)
