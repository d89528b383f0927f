"""Concatenation in place: along a dim with only unit dims before it, each piece is computed
straight into its place in the result and no cat kernel runs; anything else keeps the cat."""

import torch

import devplan
from devplan.spec import TensorSpec
from testbed.models import eager_outputs, run_executorch


def compile_it(module, args, **options):
    result = devplan.compile(torch.export.export(module.eval(), args, strict=False), **options)
    return result, result.planned.method


def cats(method):
    return [k for k in method.kernels if k.op == "aten::cat.out"]


def check_runs(module, args, result):
    for got, want in zip(run_executorch(result.data, args, runs=2)[1], eager_outputs(module, args)[0]):
        torch.testing.assert_close(got, want)


class Pieces(torch.nn.Module):
    """Three pieces of different sizes, one read again after the cat, then a nested cat."""

    def forward(self, x):
        a = torch.relu(x @ x.mT)  # (6, 6)
        b = torch.sigmoid(x[:2] @ x.mT)  # (2, 6)
        c = torch.tanh(x[:1] @ x.mT)  # (1, 6)
        joined = torch.cat([a, b, c])  # (9, 6)
        outer = torch.cat([joined * 2, b + 1], dim=0)
        return outer, a.sum() + joined.mean()


def test_pieces_are_written_into_the_result_and_no_cat_runs():
    args = (torch.randn(6, 4),)
    result, method = compile_it(Pieces(), args)
    assert cats(method) == []
    plain, plain_method = compile_it(Pieces(), args, inplace=False)
    assert len(cats(plain_method)) == 2
    assert result.planned.buffers[0].size < plain.planned.buffers[0].size
    # inspect, which sees only offsets and lifetimes, infers the same storages and bound
    seen = devplan.inspect(result.data)["methods"][0]["buffers"]
    assert [b["lower_bound"] for b in seen] == [b.lower_bound for b in result.planned.buffers]
    check_runs(Pieces(), args, result)


def test_each_piece_sits_at_its_offset_in_the_result():
    class Two(torch.nn.Module):
        def forward(self, x):
            return torch.cat([torch.relu(x @ x.mT), torch.exp(x[:3] @ x.mT)]) * 2

    args = (torch.randn(5, 3),)
    result, method = compile_it(Two(), args)
    relu = next(k.args[-1] for k in method.kernels if k.op == "aten::relu.out")
    exp = next(k.args[-1] for k in method.kernels if k.op == "aten::exp.out")
    relu_spec, exp_spec = method.values[relu], method.values[exp]
    whole = method.values[relu_spec.alias_of]
    assert relu_spec.alias_of == exp_spec.alias_of and whole.shape == (8, 5)
    assert (relu_spec.alias_offset, exp_spec.alias_offset) == (0, 5 * 5 * 4)
    assert exp_spec.offset == whole.offset + 100
    check_runs(Two(), args, result)


def test_a_cat_along_a_strided_dim_or_of_one_tensor_twice_keeps_its_kernel():
    class Strided(torch.nn.Module):
        def forward(self, x):
            return torch.cat([torch.relu(x), torch.exp(x)], dim=1)

    class Twice(torch.nn.Module):
        def forward(self, x):
            r = torch.relu(x)
            return torch.cat([r, r])

    for module in (Strided(), Twice()):
        args = (torch.randn(3, 4),)
        result, method = compile_it(module, args)
        assert len(cats(method)) == 1
        check_runs(module, args, result)


def test_a_cat_with_a_constant_piece_keeps_its_kernel():
    class WithConstant(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("pad", torch.arange(8.0).reshape(2, 4))

        def forward(self, x):
            return torch.cat([torch.relu(x), self.pad])

    args = (torch.randn(3, 4),)
    result, method = compile_it(WithConstant(), args)
    assert len(cats(method)) == 1
    assert all(v.alias_of is None for v in method.values if isinstance(v, TensorSpec) and v.constant)
    check_runs(WithConstant(), args, result)
