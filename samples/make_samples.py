"""Build the sample models shipped in samples/ and save them as torch.export .pt2 files.

Run as `python samples/make_samples.py`; it rewrites mlp.pt2, cnn.pt2,
transformer.pt2 and two_io.pt2 next to this script. Weights come from a fixed
seed, so every run produces the same models.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor, nn

SAMPLES_DIR = Path(__file__).resolve().parent
SEED = 0


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(256, 256),
            nn.ReLU(),
            nn.Linear(256, 256),
            nn.ReLU(),
            nn.Linear(256, 256),
            nn.ReLU(),
            nn.Linear(256, 10),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(x)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, kernel_size=3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, kernel_size=3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Linear(32, 10)
        # Non-trivial running statistics, so eval-mode batch norm is not an identity.
        for module in self.features:
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


class EncoderBlock(nn.Module):
    """Pre-norm transformer encoder block built from plain modules.

    Attention is spelled out with matmul and softmax (no nn.MultiheadAttention or
    scaled_dot_product_attention) so that export lowers it to simple core ATen ops.
    """

    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.norm1 = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def _split_heads(self, x: Tensor) -> Tensor:
        batch, seq, _ = x.shape
        return x.reshape(batch, seq, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: Tensor) -> Tensor:
        batch, seq, dim = x.shape
        h = self.norm1(x)
        q = self._split_heads(self.q(h))
        k = self._split_heads(self.k(h))
        v = self._split_heads(self.v(h))
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        attn = torch.matmul(torch.softmax(scores, dim=-1), v)
        attn = attn.transpose(1, 2).reshape(batch, seq, dim)
        x = x + self.out(attn)
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


class TwoInTwoOut(nn.Module):
    """Two inputs; returns (a, (b, c)) so outputs are a nested tuple."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x: Tensor, y: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        a = torch.relu(self.proj(x) + y)
        b = x * y
        c = torch.tanh(a - b)
        return a, (b, c)


def sample_models() -> dict[str, tuple[nn.Module, tuple[Tensor, ...]]]:
    """Fresh eval-mode sample models with deterministic weights and example inputs, by file stem."""
    torch.manual_seed(SEED)
    return {
        "mlp": (MLP().eval(), (torch.randn(8, 256),)),
        "cnn": (SmallCNN().eval(), (torch.randn(1, 3, 32, 32),)),
        "transformer": (EncoderBlock(dim=64, heads=4, hidden=128).eval(), (torch.randn(1, 16, 64),)),
        "two_io": (TwoInTwoOut().eval(), (torch.randn(4, 16), torch.randn(4, 16))),
    }


def write_samples(directory: Path = SAMPLES_DIR) -> list[Path]:
    written = []
    for name, (model, example_args) in sample_models().items():
        path = directory / f"{name}.pt2"
        torch.export.save(torch.export.export(model, example_args), path)
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_samples():
        print(f"wrote {path} ({path.stat().st_size} bytes)")
