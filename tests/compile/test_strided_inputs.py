"""Issue 28 (2): pooling and view ops over non-contiguous inputs (a transpose, a permute, a
slice with a step, an expand). torch decomposes some of them on such inputs into restriding
views (adaptive pooling to 1 ends in `as_strided_`), which have no portable kernel: devplan
lowers them to the copy forms or to cheaper equivalents, never refuses them, and each program
runs on devplan's runtime and ExecuTorch's with eager's results. A tiny transformers Swin,
whose pooler pools `x.transpose(1, 2)`, compiles and plans no more than ExecuTorch."""

import pytest
import torch
import torch.nn.functional as F

import devplan
from testbed.models import eager_outputs, run_executorch

# each takes a (2, 6, 8, 10) tensor and makes it non-contiguous
VIEWS = {
    "transpose": lambda x: x.transpose(1, 3),  # (2, 10, 8, 6)
    "permute": lambda x: x.permute(0, 3, 1, 2),  # (2, 10, 6, 8)
    "step_slice": lambda x: x[:, :, ::2, 1::3],  # (2, 6, 4, 3)
    "expand": lambda x: x[:, :, :1, :].expand(2, 6, 5, 10),  # (2, 6, 5, 10)
}

# each takes a 4-D non-contiguous tensor; the 1-D ones pool its last dim over rows of dim 1
POOLS = {
    "adaptive_avg_pool1d_1": lambda x: F.adaptive_avg_pool1d(x.flatten(2).transpose(1, 2), 1),
    "adaptive_avg_pool1d_3": lambda x: F.adaptive_avg_pool1d(x.flatten(2).transpose(1, 2), 3),
    "adaptive_avg_pool1d_1_view": lambda x: F.adaptive_avg_pool1d(x[:, :, 0], 1),
    "adaptive_avg_pool2d_1": lambda x: F.adaptive_avg_pool2d(x, 1),
    "adaptive_avg_pool2d_2x3": lambda x: F.adaptive_avg_pool2d(x, (2, 3)),
    "avg_pool1d": lambda x: F.avg_pool1d(x[:, :, 0], 2),
    "avg_pool2d": lambda x: F.avg_pool2d(x, 2, stride=1),
    "max_pool1d": lambda x: F.max_pool1d(x[:, :, 0], 2),
    "max_pool2d": lambda x: F.max_pool2d(x, 2, stride=1),
    "mean_dim": lambda x: x.mean(-1),
}

# views over non-contiguous inputs, as functional results: restrides and reshapes
RESHAPES = {
    "as_strided": lambda x: x.as_strided((2, 3), (1, 2)) * 1.0,
    "as_strided_offset": lambda x: x.as_strided((4, 5), (5, 1), 7) * 1.0,
    "reshape": lambda x: x.reshape(x.shape[0], -1) * 1.0,
    "flatten_transpose": lambda x: x.flatten(1).transpose(0, 1).contiguous() * 1.0,
    "unfold": lambda x: x.unfold(-1, 2, 1) * 1.0,
    "narrow_select": lambda x: x.narrow(1, 1, 2).select(2, 0) * 1.0,
}


class Applied(torch.nn.Module):
    def __init__(self, view, op):
        super().__init__()
        self.view, self.op = view, op

    def forward(self, x):
        return self.op(self.view(torch.relu(x)))


def check(module, args, **compile_options):
    module.eval()
    result = devplan.compile(torch.export.export(module, args, strict=False), **compile_options)
    want = eager_outputs(module, args)[0]
    for runtime, got in (
        ("devplan", devplan.run(result.data, args)[0]),
        ("executorch", run_executorch(result.data, args)[0]),
    ):
        assert len(got) == len(want), runtime
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, msg=lambda m: f"{runtime}: {m}")
    return result


@pytest.mark.parametrize("op", list(POOLS) + list(RESHAPES))
@pytest.mark.parametrize("view", list(VIEWS))
def test_non_contiguous_inputs_lower_and_match_eager(view, op):
    torch.manual_seed(0)
    fn = POOLS.get(op) or RESHAPES[op]
    check(Applied(VIEWS[view], fn), (torch.randn(2, 6, 8, 10),))


def test_adaptive_pooling_to_one_is_a_mean():
    """What ExecuTorch runs for it, without as_strided_copy: the restride of a mean over
    size-1 dims is the identity."""
    result = check(Applied(VIEWS["transpose"], POOLS["adaptive_avg_pool1d_1"]), (torch.randn(2, 6, 8, 10),))
    ops = {k.op for k in result.planned.method.kernels}
    assert "aten::mean.out" in ops and "aten::as_strided_copy.out" not in ops


def _swin():
    from transformers import SwinConfig, SwinForImageClassification

    config = SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=2, num_labels=10
    )
    torch.manual_seed(0)
    return SwinForImageClassification(config).eval(), (torch.randn(1, 3, 32, 32),)


@pytest.mark.sweep  # a real model twice over; the strided-input kinds above stay in the fast tier
@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
def test_swin_compiles_matches_eager_and_plans_no_more_than_executorch(grad):
    pytest.importorskip("transformers")
    from testbed.executorch import executorch_pte, planned_bytes

    module, args = _swin()
    with torch.set_grad_enabled(grad):
        ep = torch.export.export(module, args, strict=False)
    result = devplan.compile(ep)
    want = [t for t in eager_outputs(module, args)[0]]
    for runtime, got in (
        ("devplan", devplan.run(result.data, args)[0]),
        ("executorch", run_executorch(result.data, args)[0]),
    ):
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4, msg=lambda m: f"{runtime}: {m}")
    theirs = min(planned_bytes(executorch_pte(ep, const_prop=const_prop)) for const_prop in (False, True))
    ours = planned_bytes(result.data)
    print(f"swin {'grad' if grad else 'no_grad'}: devplan {ours} planned bytes, executorch {theirs}")
    assert ours <= theirs
