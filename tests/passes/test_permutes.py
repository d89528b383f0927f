"""A permute or transpose of a permute or transpose is one permute, or none when they cancel
(an attention layer's `k.transpose(1, 2)` and the cache update's transpose back)."""

import pytest
import torch

import devplan
from devplan.runtime import run
from testbed.models import eager_outputs, run_executorch

COPIES = {"aten::transpose_copy.int_out", "aten::permute_copy.out", "aten::t_copy.out"}


class Cancels(torch.nn.Module):
    def forward(self, x):
        heads = torch.relu(x).transpose(1, 2)  # [b, h, s, d] as attention reads it
        return heads.transpose(-3, 2) * 2 + x, heads.sum()


class Composes(torch.nn.Module):
    def forward(self, x):
        return torch.sigmoid(x).transpose(0, 1).permute(2, 0, 1).transpose(1, 2) + 1


class Returned(torch.nn.Module):
    """A pair that cancels on an input and is returned keeps its copies: an output is never the
    input's own bytes."""

    def forward(self, x):
        return x.transpose(0, 1).transpose(0, 1), torch.tanh(x).mT.mT


@pytest.mark.parametrize(
    "module,copies", [(Cancels(), 1), (Composes(), 1), (Returned(), 2)], ids=["cancel", "compose", "returned"]
)
def test_chained_permutes_are_one_copy_or_none(module, copies):
    args = (torch.randn(2, 3, 4, 5) if isinstance(module, Cancels) else torch.randn(3, 4, 5),)
    result = devplan.compile(torch.export.export(module, args, strict=False))
    ops = [k.op for k in result.planned.method.kernels]
    assert sum(op in COPIES for op in ops) == copies, ops
    want = eager_outputs(module, args)[0]
    for got in (run(result.data, list(args))[0], run_executorch(result.data, args)[0]):
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
