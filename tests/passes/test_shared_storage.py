"""Views at offsets, cat pieces written in place and in-place results, mixed in one program:
ExecuTorch's runtime and the reference runtime both match eager over two runs."""

import pytest
import torch

import devplan
from devplan.runtime import run
from testbed.models import assert_runs_match, eager_outputs, run_executorch


class InputInsideCats(torch.nn.Module):
    def forward(self, x, y):
        a = torch.cat([x, x * 2.0])  # a method input becomes a piece of a cat
        b = torch.cat([a[1:3], torch.relu(y)])
        c = torch.cat([b, a]).sigmoid()
        return x, c, a[0] + 1


class SplitThenCat(torch.nn.Module):
    def forward(self, x):
        parts = torch.split(x, [1, 2, 1])
        z = torch.cat([p.exp() for p in parts[::-1]])
        return torch.cat([z, z]) * x.sum(), z


class ChunksOfAnIntermediate(torch.nn.Module):
    def forward(self, x):
        h = x @ x.mT
        top, bottom = h.chunk(2)
        s = torch.cat([bottom.tanh(), top.relu()])
        return s + h, torch.cat([s[:1], h[-1:]])


class RollingState(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.arange(12.0).reshape(4, 3))

    def forward(self, x):
        old = self.buf[1:]
        new = torch.cat([old, x[:1]])
        self.buf.copy_(new)
        return torch.cat([new * 2, old])


CASES = {
    "input_inside_cats": (InputInsideCats, lambda: (torch.randn(4, 3), torch.randn(2, 3))),
    "split_then_cat": (SplitThenCat, lambda: (torch.randn(4, 5),)),
    "chunks_of_an_intermediate": (ChunksOfAnIntermediate, lambda: (torch.randn(4, 6),)),
    "rolling_state": (RollingState, lambda: (torch.randn(2, 3),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_both_runtimes_match_eager(name):
    make, make_args = CASES[name]
    module, args = make().eval(), make_args()
    with torch.no_grad():
        result = devplan.compile(torch.export.export(module, args, strict=False))
    shared = [v for v in result.planned.method.values if getattr(v, "alias_of", None) is not None]
    assert shared, "the case should exercise shared storage"
    want = eager_outputs(module, args, runs=2)
    for got in (run_executorch(result.data, args, runs=2), run(result.data, list(args), runs=2)):
        assert_runs_match(got, want)
