"""Device programs at the size users run (issue 40): a transformers Llama over 1,024 tokens, a
batch-8 256x256 conv net whose activations pass 100 MiB, a BatchNorm conv net and a transformers
ViT, each a builder of (module, example args), seeded, in eval mode. Small programs hide a
device plan's faults under slack; these do not. The suite runs them host-backed
(tests/runtime/test_device_corpus.py), the GPU tier and benchmarks/gpu.py on a real GPU.

Import it from the repository root as `testbed.device_corpus`."""

from __future__ import annotations

import logging
from typing import Callable

import torch
from torch import Tensor, nn

logging.getLogger("transformers").setLevel(logging.ERROR)

Case = tuple[nn.Module, tuple[Tensor, ...]]
TOKENS = 1024


def llama() -> Case:
    """A 2-layer transformers Llama (width 64, 1,000-token vocabulary) over 1,024 tokens."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=172,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=TOKENS,
        use_cache=False,
    )
    model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa").eval()
    return Logits(model), (torch.randint(3, 1000, (1, TOKENS)),)


def vit() -> Case:
    """A 4-layer transformers ViT (width 192) on a batch of 8 224x224 images."""
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    config = ViTConfig(
        image_size=224,
        patch_size=16,
        hidden_size=192,
        num_hidden_layers=4,
        num_attention_heads=3,
        intermediate_size=768,
    )
    return _Hidden(ViTModel._from_config(config, attn_implementation="sdpa").eval()), (torch.randn(8, 3, 224, 224),)


class ConvNet(nn.Module):
    """Batch 8 at 256x256: each 32-channel activation is 64 MiB, so a plan holds over 100 MiB."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(32, 16, 3, stride=2, padding=1),
            nn.ReLU(),
        )
        self.head = nn.Linear(16, 10)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.body(x).mean((2, 3)))


class BatchNormNet(nn.Module):
    """Two conv-BatchNorm-ReLU blocks with running statistics that are not the identity; CUDA's
    batch norm writes saved statistics the CPU's does not."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(
            *(nn.Sequential(nn.Conv2d(c_in, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU()) for c_in in (3, 32))
        )
        for norm in (m for m in self.modules() if isinstance(m, nn.BatchNorm2d)):
            norm.running_mean.uniform_(-0.5, 0.5)
            norm.running_var.uniform_(0.5, 2.0)
        self.head = nn.Linear(32, 10)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.blocks(x).mean((2, 3)))


def convnet() -> Case:
    torch.manual_seed(0)
    return ConvNet().eval(), (torch.randn(8, 3, 256, 256),)


def batchnorm() -> Case:
    torch.manual_seed(0)
    return BatchNormNet().eval(), (torch.randn(4, 3, 128, 128),)


class Logits(nn.Module):
    """A transformers model returning its logits tensor alone (a causal LM's, a classifier's):
    an export whose outputs are plain tensors loads in a process that has not imported the
    model's transformers module (which registers its output class)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, inputs: Tensor) -> Tensor:
        return self.model(inputs).logits


class _Hidden(nn.Module):
    """An encoder returning its last hidden state alone."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: Tensor) -> Tensor:
        return self.model(pixel_values=pixel_values).last_hidden_state


DEVICE_CORPUS: dict[str, Callable[[], Case]] = {"llama": llama, "convnet": convnet, "batchnorm": batchnorm, "vit": vit}
