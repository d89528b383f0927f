"""More ops through the whole pipeline and the ExecuTorch runtime: factory ops, dtype
casts, integer math, bool results, multi-output ops with named results, gathers."""

import pytest
import torch
import torch.nn.functional as F

import devplan
from testbed.models import eager_outputs, run_executorch


def m(fn):
    class Wrapped(torch.nn.Module):
        def forward(self, *args):
            return fn(*args)

    return Wrapped()


torch.manual_seed(0)
x, y, idx = torch.randn(4, 6), torch.randn(4, 6), torch.tensor([2, 0, 3])
cases = {
    "index": (m(lambda x, i: x[i]), (x, idx)),
    "where_cmp": (m(lambda x, y: torch.where(x > y, x, y * 2)), (x, y)),
    "clamp_masked": (m(lambda x: x.clamp(-0.5, 0.5).masked_fill(x > 0.2, 1.0)), (x,)),
    "cumsum": (m(lambda x: torch.cumsum(x, 1)), (x,)),
    "topk": (m(lambda x: torch.topk(x, 2, dim=1)), (x,)),
    "argmax": (m(lambda x: (x.argmax(1), x.amax(0))), (x,)),
    "stack_flip": (m(lambda x, y: torch.stack([x, y.flip(0)], 0)), (x, y)),
    "pad": (m(lambda x: F.pad(x, (1, 2, 0, 1), value=0.5)), (x,)),
    "expand_repeat": (m(lambda x: x[:, :1].expand(4, 6) + x.repeat(1, 1)), (x,)),
    "group_norm": (torch.nn.GroupNorm(2, 4).eval(), (torch.randn(1, 4, 5, 5),)),
    "leaky_elu": (m(lambda x: F.leaky_relu(x, 0.1) + F.elu(x)), (x,)),
    "unary": (m(lambda x: x.abs().neg().exp().log1p() + x.sin() * x.cos()), (x,)),
    "to_dtype": (m(lambda x: (x * 10).to(torch.int32).to(torch.float32)), (x,)),
    "to_same_dtype": (m(lambda x: (x.float(), (x * 2).to(torch.float32) + 1)), (x,)),
    # one decomposition traced once and spliced twice, then both results read by one op
    "two_splices_one_reader": (
        m(
            lambda q, k, v: F.scaled_dot_product_attention(
                q,
                torch.zeros(1, 2, 6, 4).index_copy(2, torch.tensor([1, 3]), k),
                torch.zeros(1, 2, 6, 4).index_copy(2, torch.tensor([1, 3]), v),
            )
        ),
        (torch.randn(1, 2, 3, 4), torch.randn(1, 2, 2, 4), torch.randn(1, 2, 2, 4)),
    ),
    "arange_full": (m(lambda x: x + torch.arange(6) + torch.full((4, 6), 2.0)), (x,)),
    "bool_out": (m(lambda x, y: (x > y) & (y > 0)), (x, y)),
    "mean_var": (m(lambda x: torch.var_mean(x, dim=1)), (x,)),
    "softplus_erf": (m(lambda x: F.softplus(x) + torch.erf(x)), (x,)),
    "bmm_baddbmm": (m(lambda a, b: torch.baddbmm(a @ b, a, b)), (torch.randn(2, 3, 3), torch.randn(2, 3, 3))),
    "conv1d": (torch.nn.Conv1d(4, 8, 3, padding=1).eval(), (torch.randn(1, 4, 10),)),
    "prelu_hardsigmoid": (m(lambda x: F.hardsigmoid(x) + F.mish(x)), (x,)),
    "scatter_gather": (m(lambda x: torch.gather(x, 1, torch.tensor([[0, 1], [1, 0], [2, 2], [5, 4]]))), (x,)),
    "tril_triu": (m(lambda x: torch.tril(x) + torch.triu(x, 1)), (torch.randn(5, 5),)),
    "int_math": (m(lambda i: (i * 3 + 1) // 2 % 5), (torch.arange(10),)),
}


@pytest.mark.parametrize("name", sorted(cases))
def test_runtime_matches_eager(name):
    module, args = cases[name]
    module.eval().requires_grad_(False)
    result = devplan.compile(torch.export.export(module, args, strict=False))
    got, want = run_executorch(result.data, args)[0], eager_outputs(module, args)[0]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
