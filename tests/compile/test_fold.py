"""Constant folding: work that depends only on weights is done at compile time."""
import pytest
import torch

import devplan
from tests.models import eager_outputs, run_executorch


class TransposedWeight(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(64, 32))
        self.scale = torch.nn.Parameter(torch.randn(64))

    def forward(self, x):
        return x @ (self.weight * 2.0).t() + self.scale


def compile_it(module, args):
    module.eval().requires_grad_(False)
    return devplan.compile(torch.export.export(module, args, strict=False))


def test_weight_transform_is_stored_not_planned():
    module, args = TransposedWeight(), (torch.randn(4, 32),)
    result = compile_it(module, args)
    method = result.planned.method
    ops = [k.op for k in method.kernels]
    assert "aten::permute_copy.out" not in ops and "aten::t_copy.out" not in ops
    assert "aten::mul.Scalar_out" not in ops
    weight_bytes = 64 * 32 * 4 + 64 * 4
    assert result.constant_bytes <= weight_bytes
    # the activation buffer holds only input, matmul result and output, never a 64x32 weight copy
    assert result.planned.buffers[0].size < 64 * 32 * 4
    got = run_executorch(result.data, args)[0][0]
    torch.testing.assert_close(got, eager_outputs(module, args)[0][0], rtol=1e-4, atol=1e-5)


class SharedWeight(torch.nn.Module):
    """The weight is used both as is and transposed: folding the transpose would store it twice."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(16, 16))

    def forward(self, x):
        return x @ self.weight.t() + x @ self.weight


def test_folding_never_grows_constant_bytes():
    module, args = SharedWeight(), (torch.randn(2, 16),)
    result = compile_it(module, args)
    assert result.constant_bytes <= 16 * 16 * 4
    got = run_executorch(result.data, args)[0][0]
    torch.testing.assert_close(got, eager_outputs(module, args)[0][0], rtol=1e-4, atol=1e-5)


class TwinWeights(torch.nn.Module):
    """Two weights with equal data (per-channel zero points across layers are such twins)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.ones(8, 8))
        self.b = torch.nn.Parameter(torch.ones(8, 8))

    def forward(self, x):
        return x @ self.a + x @ self.b


def test_constant_bytes_are_what_the_program_stores():
    """Equal constants are stored once; the count is inspect's, alignment included."""
    result = compile_it(TwinWeights(), (torch.randn(2, 8),))
    assert result.constant_bytes == devplan.inspect(result.data)["file"]["constant_bytes"] == 8 * 8 * 4


_HUGE_FROM_SMALL = """
import sys, torch, devplan

class Huge(torch.nn.Module):
    '''A 32-byte weight whose constant-only subgraph makes 2 GiB before it is reduced.'''
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(1, 8))

    def forward(self, x):
        if sys.argv[1] == "expand":
            big = self.w.expand(2 ** 26, 8).contiguous()
        else:
            big = self.w.repeat(2 ** 26, 1)
        return x + big.sum(0)

module = Huge().eval().requires_grad_(False)
result = devplan.compile(torch.export.export(module, (torch.randn(8),), strict=False))
print(result.constant_bytes)
"""


@pytest.mark.parametrize("how", ["expand", "repeat"])
def test_constant_subgraph_too_large_to_fold_stays_a_run_time_op(how):
    """Folding checks each step's result size (its fake value) before evaluating it: a step
    larger than the constants it comes from is left to run time, so compiling a tiny export
    whose constants would make 2 GiB neither takes the time nor the memory."""
    from benchmarks.peak import run_measured

    done, peak = run_measured(["-c", _HUGE_FROM_SMALL, how], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) <= 64  # the weight, not a folded copy of anything
    assert peak is not None and peak < 2 ** 30, peak
