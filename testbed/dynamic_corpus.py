"""The model corpus (testbed/models.py) exported with a dynamic batch: dim 0 of each model's
batched inputs a `Dim` bounded by BOUND. A model whose batch torch.export cannot keep dynamic
is skipped (pytest's Skipped) with torch's reason."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch.export import Dim

from testbed.models import CORPUS

BOUND = 8
EXAMPLE = 4  # batch of the example inputs: torch specializes a dim whose example size is 1


@dataclass(frozen=True)
class Batch:
    """How a model's batch is dynamic: `shared` are the inputs whose dim 0 is the batch, which
    is `step` times a Dim of at least `least`; `sizes` are the batches the runtimes run, in order."""

    shared: tuple[int, ...] = (0,)
    least: int = 1
    step: int = 1
    sizes: tuple[int, ...] = (BOUND, 3, 1)


BATCHES = {
    "matmul_bmm": Batch(shared=(0, 1)),
    "multi_input_nested": Batch(shared=(0, 1, 2)),
    # x[1:3] guards batch >= 3 (torch's suggested fix: Dim('batch', min=3, max=8))
    "slicing": Batch(least=3, sizes=(BOUND, 3)),
    # chunk(2, dim=0) then left - right: torch specializes a plain Dim to the example's 4, but
    # keeps an even batch 2 * half dynamic (half >= 2: chunks of one row are guarded away)
    "cat_split_chunk": Batch(shared=(0, 1), least=2, step=2, sizes=(BOUND, 6, 4)),
}


def resized(t: torch.Tensor, batch: int) -> torch.Tensor:
    """An input like `t` with `batch` rows: normal floats, integers within `t`'s own range."""
    if t.dtype.is_floating_point:
        return torch.randn(batch, *t.shape[1:], dtype=t.dtype)
    return torch.randint(int(t.min()), int(t.max()) + 1, (batch, *t.shape[1:]), dtype=t.dtype)


def batched(name: str, args: tuple, batch: int) -> tuple:
    shared = BATCHES.get(name, Batch()).shared
    return tuple(resized(a, batch) if i in shared else a for i, a in enumerate(args))


def exported(name: str) -> tuple[torch.export.ExportedProgram, torch.nn.Module, tuple]:
    """A fresh dynamic export each call: ExecuTorch's lowering rewrites the shapes of a derived dim."""
    spec = BATCHES.get(name, Batch())
    module, args = CORPUS[name]()
    if not all(isinstance(a, torch.Tensor) and a.dim() > 0 for a in args):
        pytest.skip(f"{name}: not every input is a tensor with a batch dim")
    args = batched(name, args, EXAMPLE)
    dim = Dim(f"{name}_batch", min=spec.least, max=BOUND // spec.step)
    size = dim * spec.step if spec.step > 1 else dim
    dims = tuple({0: size} if i in spec.shared else None for i in range(len(args)))
    try:
        ep = torch.export.export(module, args, dynamic_shapes=dims, strict=False)
    except Exception as error:  # torch specializes the batch, or the model's state fixes it
        lines = [line.strip(" -") for line in str(error).splitlines() if line.strip(" -")]
        pytest.skip(f"{name}: torch.export keeps no dynamic batch: {type(error).__name__}: {' / '.join(lines[:2])}")
    return ep, module, args
