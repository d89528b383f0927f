"""Ops that keep their input's bytes (view, unsqueeze, clone, ...) run no kernel: the result
shares the input's storage, and that storage lives until the last view's last use."""
import torch

import devplan
from devplan.spec import TensorSpec
from tests.models import eager_outputs, run_executorch


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
    assert all(isinstance(v, TensorSpec) and v.mem_id is not None for v in method.values
               if isinstance(v, TensorSpec) and not v.constant)
    for index, view in views:
        root = method.values[view.alias_of]
        assert (view.mem_id, view.offset, view.nbytes) == (root.mem_id, root.offset, root.nbytes)
        assert root.alias_of is None
    # the relu result's storage stays reserved until the mul reads the last view of it
    relu = method.values[views[0][1].alias_of]
    mul_step = next(i for i, k in enumerate(method.kernels) if k.op == "aten::mul.Scalar_out")
    others = [v for i, v in enumerate(method.values) if isinstance(v, TensorSpec) and v.mem_id is not None
              and v.alias_of is None and v is not relu and v.lifetime[0] <= mul_step <= v.lifetime[1]]
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
