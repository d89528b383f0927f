"""In-place reuse: an elementwise result takes over a dying input's storage (a method input
too: the runtime copies the caller's data in on every run), never the bytes of anything
still read later, nor state."""
import torch

import devplan
from devplan.spec import TensorSpec
from tests.models import eager_outputs, run_executorch


class Chain(torch.nn.Module):
    def forward(self, x):
        h = x @ x.mT          # a fresh intermediate, larger than x
        return torch.sigmoid(torch.relu(h) * 3.0)


class StillRead(torch.nn.Module):
    def forward(self, a, b):
        s = a @ b
        r = torch.relu(s)     # s is read again below, so r needs its own bytes
        return r + s


def compile_it(module, args, **options):
    result = devplan.compile(torch.export.export(module.eval(), args, strict=False), **options)
    return result, result.planned.method


def kernel_out(method, op):
    return next(k.args[-1] for k in method.kernels if k.op == op)


def test_chain_runs_in_one_storage_and_matches_eager():
    args = (torch.randn(8, 2),)  # the 8x8 intermediates dominate the plan
    result, method = compile_it(Chain(), args)
    mm = kernel_out(method, "aten::mm.out")
    relu, mul = kernel_out(method, "aten::relu.out"), kernel_out(method, "aten::mul.Scalar_out")
    assert method.values[relu].alias_of == mm and method.values[mul].alias_of == mm
    plain, _ = compile_it(Chain(), args, inplace=False)
    assert result.planned.buffers[0].size < plain.planned.buffers[0].size
    torch.testing.assert_close(run_executorch(result.data, args)[0][0], eager_outputs(Chain(), args)[0][0])


def test_a_storage_read_later_is_not_overwritten():
    args = (torch.randn(4, 6), torch.randn(6, 4))
    result, method = compile_it(StillRead(), args)
    assert method.values[kernel_out(method, "aten::relu.out")].alias_of is None
    torch.testing.assert_close(run_executorch(result.data, args)[0][0], eager_outputs(StillRead(), args)[0][0])


def test_a_dying_input_is_written_over_and_each_run_sets_it_again():
    class OnInput(torch.nn.Module):
        def forward(self, x, y):
            return torch.sigmoid(x) * y  # not idempotent: a stale x would show

    args = (torch.randn(5), torch.randn(5))
    result, method = compile_it(OnInput(), args)
    assert method.values[kernel_out(method, "aten::sigmoid.out")].alias_of == method.inputs[0]
    # the second run reads x again: the runtime copied the caller's x in afresh, or it fails
    first, second = run_executorch(result.data, args, runs=2)
    torch.testing.assert_close(first[0], eager_outputs(OnInput(), args)[0][0])
    torch.testing.assert_close(second[0], first[0])


def test_an_input_read_later_keeps_its_bytes():
    class ReadTwice(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) + x

    args = (torch.randn(6),)
    result, method = compile_it(ReadTwice(), args)
    assert method.values[kernel_out(method, "aten::relu.out")].alias_of is None
    torch.testing.assert_close(run_executorch(result.data, args)[0][0], eager_outputs(ReadTwice(), args)[0][0])


def test_no_inplace_option_keeps_every_result_apart():
    _, method = compile_it(Chain(), (torch.randn(8, 8),), inplace=False)
    assert all(v.alias_of is None for v in method.values if isinstance(v, TensorSpec))


def test_batch_norm_writes_over_the_convolution_it_normalizes():
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.Tanh())
    with torch.no_grad():
        module[1].running_mean.uniform_(-1, 1)
        module[1].running_var.uniform_(0.5, 2)
    args = (torch.randn(1, 3, 12, 12),)
    result, method = compile_it(module, args)
    conv = kernel_out(method, "aten::convolution.out")
    bn = next(k for k in method.kernels if k.op == "aten::_native_batch_norm_legit_no_training.out")
    assert method.values[method.values[bn.args[-1]].items[0]].alias_of == conv
    torch.testing.assert_close(run_executorch(result.data, args)[0][0], eager_outputs(module, args)[0][0])
