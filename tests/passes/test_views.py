"""Ops whose result is a run of their input's bytes (view, unsqueeze, clone, a leading-dim
slice, split or select, an expand to the same shape) run no kernel: the result shares the
input's storage at its offset there, and that storage lives until the last view's last use."""

import torch

import devplan
from devplan.spec import TensorSpec
from testbed.models import eager_outputs, run_executorch


class ViewChain(torch.nn.Module):
    def forward(self, x):
        h = torch.relu(x)
        flat = h.reshape(4, 16).unsqueeze(0).clone()
        return torch.sigmoid(x).sum() + flat * 2


class ViewOfState(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.ones(2, 4))

    def forward(self, x):
        before = self.state.reshape(8) * 1.0
        self.state.add_(x)
        return before + self.state.reshape(8)


def compiled(module, args):
    module.eval()
    # in-place reuse would add aliases of its own; these tests are about views alone
    result = devplan.compile(torch.export.export(module, args, strict=False), inplace=False)
    return result, result.planned.method


def test_views_share_storage_and_run_no_kernel():
    args = (torch.randn(2, 2, 16),)
    result, method = compiled(ViewChain(), args)
    ops = [k.op for k in method.kernels]
    assert not {"aten::view_copy.out", "aten::unsqueeze_copy.out", "aten::clone.out"} & set(ops)
    views = [(i, v) for i, v in enumerate(method.values) if isinstance(v, TensorSpec) and v.alias_of is not None]
    # the view and unsqueeze results feed only other views, so only the clone's result is a value
    assert len(views) == 1
    assert all(
        isinstance(v, TensorSpec) and v.mem_id is not None
        for v in method.values
        if isinstance(v, TensorSpec) and not v.constant
    )
    for _index, view in views:
        root = method.values[view.alias_of]
        assert (view.mem_id, view.offset, view.nbytes) == (root.mem_id, root.offset, root.nbytes)
        assert root.alias_of is None
    # the relu result's storage stays reserved until the mul reads the last view of it
    relu = method.values[views[0][1].alias_of]
    mul_step = next(i for i, k in enumerate(method.kernels) if k.op == "aten::mul.Scalar_out")
    others = [
        v
        for i, v in enumerate(method.values)
        if isinstance(v, TensorSpec)
        and v.mem_id is not None
        and v.alias_of is None
        and v is not relu
        and v.lifetime[0] <= mul_step <= v.lifetime[1]
    ]
    for other in others:
        assert other.offset + other.nbytes <= relu.offset or relu.offset + relu.nbytes <= other.offset
    got = run_executorch(result.data, args)[0][0]
    torch.testing.assert_close(got, eager_outputs(ViewChain(), args)[0][0])


def test_state_is_never_viewed_in_place():
    """The state buffer is overwritten by the last instruction; nothing may share its bytes."""
    args = (torch.randn(2, 4),)
    result, method = compiled(ViewOfState(), args)
    (state,) = method.state
    assert all(v.alias_of != state for v in method.values if isinstance(v, TensorSpec))
    want = eager_outputs(ViewOfState(), args, runs=2)
    for got, expected in zip(run_executorch(result.data, args, runs=2), want):
        torch.testing.assert_close(got[0], expected[0])


class Slices(torch.nn.Module):
    """Leading-dim slices, a select, split and chunk pieces, and an expand to the same shape
    are runs of their source's bytes; a slice along a later dim is not."""

    def forward(self, x):
        h = x * 2.0  # (4, 3, 5): a planned intermediate to slice
        rows = h[1:3]  # bytes 60..180 of h
        first, rest = torch.split(h, [1, 3])
        last = h.select(0, 3)
        same = h.expand(4, 3, 5)
        cols = h[:, 1:]  # strided in h: must be copied
        return rows + 1, first - rest[1:2], last * 3, same.sum(0), cols.mean(1)


def test_contiguous_slices_become_views_at_their_offsets():
    args = (torch.randn(4, 3, 5),)
    result, method = compiled(Slices(), args)
    ops = [k.op for k in method.kernels]
    assert not {"aten::split_with_sizes_copy.out", "aten::select_copy.int_out", "aten::expand_copy.out"} & set(ops)
    assert ops.count("aten::slice_copy.Tensor_out") == 1  # only the strided h[:, 1:]
    h = next(k.args[-1] for k in method.kernels if k.op == "aten::mul.Scalar_out")
    row = 3 * 5 * 4
    starts = sorted({v.alias_offset for v in method.values if isinstance(v, TensorSpec) and v.alias_of == h})
    assert starts == [0, row, 2 * row, 3 * row]  # h itself, h[1:], rest[1:2] at row 2, h[3]
    for view in (v for v in method.values if isinstance(v, TensorSpec) and v.alias_of == h):
        assert view.offset == method.values[h].offset + view.alias_offset
        assert view.alias_offset + view.nbytes <= method.values[h].nbytes
    # inspect, seeing only offsets and lifetimes, infers the same storages and bound
    seen = devplan.inspect(result.data)["methods"][0]["buffers"]
    assert [b["lower_bound"] for b in seen] == [b.lower_bound for b in result.planned.buffers]
    for got, want in zip(run_executorch(result.data, args)[0], eager_outputs(Slices(), args)[0]):
        torch.testing.assert_close(got, want)


def test_a_slice_of_state_is_copied():
    class SliceOfState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("state", torch.arange(8.0).reshape(4, 2))

        def forward(self, x):
            head = self.state[:2]
            self.state.mul_(x)
            return head + self.state[2:]

    args = (torch.full((4, 2), 2.0),)
    result, method = compiled(SliceOfState(), args)
    (state,) = method.state
    assert all(v.alias_of != state for v in method.values if isinstance(v, TensorSpec))
    for got, want in zip(run_executorch(result.data, args, runs=2), eager_outputs(SliceOfState(), args, runs=2)):
        torch.testing.assert_close(got[0], want[0])
