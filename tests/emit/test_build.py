"""Method building at the edges: outputs that are inputs, weights or views; number inputs."""

import pytest
import torch

import devplan
from testbed.models import eager_outputs, run_executorch


class Passthrough(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        return x, x + 1, self.weight, x.view(3)


class NumberInput(torch.nn.Module):
    def forward(self, x, n: int, scale: float):
        return x * n + scale


@pytest.mark.parametrize(
    "module, args",
    [
        (Passthrough(), (torch.randn(3),)),
        (NumberInput(), (torch.randn(3), 2, 0.5)),
    ],
)
def test_runtime_matches_eager(module, args):
    module.eval().requires_grad_(False)
    result = devplan.compile(torch.export.export(module, args, strict=False))
    got, want = run_executorch(result.data, args)[0], eager_outputs(module, args)[0]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_number_inputs_are_method_inputs():
    args = (torch.randn(3), 2, 0.5)
    method = devplan.compile(torch.export.export(NumberInput(), args, strict=False)).planned.method
    assert [method.values[i] for i in method.inputs[1:]] == [2, 0.5]
