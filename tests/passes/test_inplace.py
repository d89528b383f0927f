"""In-place reuse: an elementwise result takes over a dying input's storage (a method input
too: the runtime copies the caller's data in on every run), never the bytes of anything
still read later, nor state."""

from dataclasses import replace

import torch

import devplan
from devplan.passes.method.inplace import reuse_dead_inputs
from devplan.spec import TensorSpec
from testbed.models import eager_outputs, run_executorch
from tests.passes.methods import call, method, tensor


class Chain(torch.nn.Module):
    def forward(self, x):
        h = x @ x.mT  # a fresh intermediate, larger than x
        return torch.sigmoid(torch.relu(h) * 3.0)


class StillRead(torch.nn.Module):
    def forward(self, a, b):
        s = a @ b
        r = torch.relu(s)  # s is read again below, so r needs its own bytes
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


# the pass alone, on methods built by hand: v0 the input, v1 = relu(v0), v2 = sigmoid(v1)


def _relu_sigmoid(**facts):
    values = [tensor(), tensor(), tensor(), *facts.pop("extra", ())]
    return method(values, [call("aten::relu.out", 0, 1, 1), call("aten::sigmoid.out", 1, 2, 2)], **facts)


def test_a_result_takes_the_bytes_of_an_input_that_dies_with_it():
    done = reuse_dead_inputs(_relu_sigmoid(outputs=(2,))).values
    assert (done[1].alias_of, done[2].alias_of) == (0, 0)  # the input's bytes are free after its last read


def test_a_payload_never_writes_over_its_callers_tensors():
    done = reuse_dead_inputs(_relu_sigmoid(outputs=(2,)), borrowed_io=True).values
    assert (done[1].alias_of, done[2].alias_of) == (None, None)  # v1 over v0 (an input), v2 is an output


def test_what_is_read_later_returned_or_kept_as_state_keeps_its_bytes():
    returned = reuse_dead_inputs(_relu_sigmoid(outputs=(1, 2))).values
    assert returned[2].alias_of is None and returned[1].alias_of == 0
    state = reuse_dead_inputs(_relu_sigmoid(outputs=(2,), state={0: torch.zeros(2, 4)})).values
    assert state[1].alias_of is None and state[2].alias_of == 1


def test_only_an_input_of_the_results_shape_and_dtype_is_taken():
    wide = method(
        [tensor(), tensor(shape=(2, 1)), tensor()], [call("aten::add.out", 0, 1, 2, 2)], inputs=(0, 1), outputs=(2,)
    )
    assert reuse_dead_inputs(wide).values[2].alias_of == 0  # not the broadcast v1
    ints = method([replace(tensor(), dtype="int32"), tensor()], [call("aten::relu.out", 0, 1, 1)], outputs=(1,))
    assert reuse_dead_inputs(ints).values[1].alias_of is None
