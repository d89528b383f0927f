"""The quantized sweep's models (test_quantized_sweep.py): convolutions of every kind, pools, a
MobileNet-like block, linears on 1-D to 4-D inputs, matmuls, cats, adds and muls of two
quantized tensors, a transformer block, recurrent layers and an embedding, each with the
makers of its inputs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ConvStridePadDilation(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=2, dilation=2)

    def forward(self, x):
        return F.relu(self.conv(x))


class ConvNoBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, (3, 2), stride=(1, 2), padding=(1, 0), bias=False)

    def forward(self, x):
        return self.conv(x)


class ConvBatchNorm(nn.Module):
    """Eval-mode batch norm, folded into the convolution by prepare_pt2e."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class Depthwise(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.BatchNorm2d(8)

    def forward(self, x):
        return F.relu6(self.bn(self.conv(x)))


class Grouped(nn.Module):
    def __init__(self):
        super().__init__()
        self.grouped = nn.Conv2d(8, 16, 3, padding=1, groups=4)
        self.wide = nn.Conv2d(16, 8, (1, 3), stride=(1, 2), padding=(0, 2), bias=False)

    def forward(self, x):
        return self.wide(self.grouped(x))


class Conv1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, stride=2, padding=2, dilation=2)

    def forward(self, x):
        return F.relu(self.conv(x))


class ConvTranspose(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        return F.relu(self.up(x))


class ConvTransposeNoBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 8, 2, stride=2, bias=False)

    def forward(self, x):
        return self.up(x)


class ConvTransposeBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.bn = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1), nn.BatchNorm2d(6)

    def forward(self, x):
        return F.relu(self.bn(self.up(x)))


class ConvReflectPad(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")

    def forward(self, x):
        return self.conv(x)


class Upsample(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return self.b(F.interpolate(self.a(x), scale_factor=2, mode="nearest"))


class SqueezeExcite(nn.Module):
    """MobileNetV3's squeeze-and-excite: a pooled gate (relu, hardsigmoid) multiplied back in."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.reduce, self.expand = nn.Conv2d(8, 4, 1), nn.Conv2d(4, 8, 1)

    def forward(self, x):
        h = self.conv(x)
        gate = F.hardsigmoid(self.expand(F.relu(self.reduce(F.adaptive_avg_pool2d(h, 1)))))
        return h * gate


class MaxPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return F.max_pool2d(F.relu(self.conv(x)), 3, stride=2, padding=1)


class AvgPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.after = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.after(F.avg_pool2d(self.conv(x), 2))


class PoolHead(nn.Module):
    """Adaptive average pool and a linear classifier head."""

    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(F.relu(self.conv(x)), 1), 1))


class InvertedResidual(nn.Module):
    """A MobileNetV2/V3-style block: expand (hardswish), depthwise (relu6), project, residual add."""

    def __init__(self, channels=8, expanded=16):
        super().__init__()
        self.expand, self.bn1 = nn.Conv2d(channels, expanded, 1, bias=False), nn.BatchNorm2d(expanded)
        self.dw = nn.Conv2d(expanded, expanded, 3, padding=1, groups=expanded, bias=False)
        self.bn2 = nn.BatchNorm2d(expanded)
        self.project, self.bn3 = nn.Conv2d(expanded, channels, 1, bias=False), nn.BatchNorm2d(channels)

    def forward(self, x):
        h = F.hardswish(self.bn1(self.expand(x)))
        h = F.relu6(self.bn2(self.dw(h)))
        return x + self.bn3(self.project(h))


class MobileNetLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.bn = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8)
        self.block = InvertedResidual()
        self.head = nn.Linear(8, 6)

    def forward(self, x):
        h = self.block(F.hardswish(self.bn(self.stem(x))))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


class LinearNoBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(12, 24, bias=False), nn.Linear(24, 6, bias=False)

    def forward(self, x):
        return self.b(F.relu(self.a(x)))


class LinearBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x):
        return self.fc(x)


class SharedLinear(nn.Module):
    """One weight used twice."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(torch.tanh(self.fc(x)))


class Matmul(nn.Module):
    """Matmuls of two activations (batched, and one broadcast over a weight-like input)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 6), nn.Linear(8, 6)

    def forward(self, x):
        a, b = self.a(x), self.b(x)
        return torch.matmul(a, b.transpose(-1, -2)), torch.bmm(a.transpose(1, 2), b)


class Cat(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 6, 1)
        self.after = nn.Conv2d(10, 4, 1)

    def forward(self, x):
        joined = torch.cat([F.relu(self.a(x)), self.b(x)], 1)
        return self.after(joined), joined


class CatLinear(nn.Module):
    """cat along the last dim, and of a quantized tensor with itself."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 4), nn.Linear(8, 4), nn.Linear(16, 4)

    def forward(self, x):
        a = self.a(x)
        return self.c(torch.cat([a, self.b(x), a, a], -1))


class AddTwo(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.a(x) + self.b(x)


class AddRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return F.relu(self.a(x) + self.b(x))


class MulTwo(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.a(x) * torch.sigmoid(self.b(x)), F.relu(self.a(x) * self.b(x))


class AddInputs(nn.Module):
    """Quantized adds and muls of the user's own inputs, broadcast."""

    def forward(self, x, y):
        return x + y, x * y


class TransformerBlock(nn.Module):
    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attention = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, -1)
        x = x + self.proj((attention @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class LSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn, self.fc = nn.LSTM(8, 12, batch_first=True), nn.Linear(12, 4)

    def forward(self, x):
        return self.fc(self.rnn(x)[0])


class GRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn, self.fc = nn.GRU(8, 12, batch_first=True), nn.Linear(12, 4)

    def forward(self, x):
        return self.fc(self.rnn(x)[0])


class EmbeddingLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.table, self.fc = nn.Embedding(32, 16), nn.Linear(16, 4)

    def forward(self, tokens):
        return self.fc(self.table(tokens))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.b(F.relu(self.a(x)))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        return self.fc(torch.flatten(F.max_pool2d(F.relu(self.conv(x)), 2), 1))


def tokens(*shape):
    return lambda: torch.randint(0, 32, shape)


def randn(*shape):
    return lambda: torch.randn(*shape)


# name -> (module class, input makers)
MODELS = {
    "conv_stride_pad_dilation": (ConvStridePadDilation, (randn(1, 3, 9, 9),)),
    "conv_no_bias": (ConvNoBias, (randn(2, 3, 6, 7),)),
    "conv_bn_relu": (ConvBatchNorm, (randn(1, 3, 8, 8),)),
    "depthwise_bn_relu6": (Depthwise, (randn(1, 8, 6, 6),)),
    "grouped_conv": (Grouped, (randn(1, 8, 6, 6),)),
    "conv1d": (Conv1d, (randn(2, 4, 12),)),
    "conv_transpose": (ConvTranspose, (randn(1, 4, 4, 4),)),
    "conv_transpose_no_bias": (ConvTransposeNoBias, (randn(1, 4, 3, 3),)),
    "conv_transpose_bn_relu": (ConvTransposeBatchNorm, (randn(1, 4, 4, 4),)),
    "conv_reflect_pad": (ConvReflectPad, (randn(1, 3, 6, 6),)),
    "upsample_nearest": (Upsample, (randn(1, 3, 4, 4),)),
    "squeeze_excite": (SqueezeExcite, (randn(1, 3, 6, 6),)),
    "max_pool": (MaxPool, (randn(1, 3, 8, 8),)),
    "avg_pool": (AvgPool, (randn(1, 3, 8, 8),)),
    "adaptive_pool_linear": (PoolHead, (randn(2, 3, 6, 6),)),
    "mobilenet_block": (MobileNetLike, (randn(1, 3, 12, 12),)),
    "linear_no_bias": (LinearNoBias, (randn(3, 12),)),
    "linear_1d": (LinearBias, (randn(16),)),
    "linear_3d": (LinearBias, (randn(2, 5, 16),)),
    "shared_linear": (SharedLinear, (randn(3, 8),)),
    "linear_4d": (LinearBias, (randn(2, 3, 2, 16),)),
    "matmul": (Matmul, (randn(2, 5, 8),)),
    "cat_conv": (Cat, (randn(1, 3, 6, 6),)),
    "cat_linear": (CatLinear, (randn(3, 8),)),
    "add_two": (AddTwo, (randn(4, 8),)),
    "add_relu": (AddRelu, (randn(1, 4, 5, 5),)),
    "mul_two": (MulTwo, (randn(4, 8),)),
    "add_mul_inputs": (AddInputs, (randn(3, 8), randn(1, 8))),
    "transformer_block": (TransformerBlock, (randn(2, 6, 16),)),
    "lstm": (LSTM, (randn(2, 3, 8),)),
    "gru": (GRU, (randn(2, 3, 8),)),
    "embedding_linear": (EmbeddingLinear, (tokens(2, 5),)),
}
