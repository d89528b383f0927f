"""The kernels that write into their planned bytes on a GPU (runtime/device_kernels.py): each
computes what torch's out variant computes, writing the out tensor it is given (its storage
kept), checked here on the host by calling the device kernel directly; the GPU tier and
benchmarks/gpu.py show what they save on a device."""

from __future__ import annotations

import pytest
import torch

from devplan.runtime.device_kernels import IN_PLACE, OnDevice
from devplan.runtime.kernels import schema_op

aten = torch.ops.aten
torch.manual_seed(0)
X = torch.randn(2, 3, 4, 5)
IDS = torch.tensor([[0, 3, 2], [1, 1, 4]])
CALLS = {  # operator -> (args, keywords)
    "aten::relu.out": ((X,), {}),
    "aten::full_like.out": ((X, 0.5), {}),
    "aten::embedding.out": ((torch.randn(6, 8), IDS), {}),
    "aten::convolution.out": (
        (
            X[:, :, :4, :4].contiguous(),
            torch.randn(6, 3, 3, 3),
            torch.randn(6),
            [1, 1],
            [1, 1],
            [1, 1],
            False,
            [0, 0],
            1,
        ),
        {},
    ),
    "aten::add.Scalar_out": ((X, 2.0, 3), {}),
    "aten::sub.Scalar_out": ((X, 2.0, 0.5), {}),
    "aten::mul.Scalar_out": ((X, 3), {}),
    "aten::div.Scalar_out": ((X, 4.0), {}),
    "aten::transpose_copy.int_out": ((X, 1, 3), {}),
    "aten::permute_copy.out": ((X, [3, 1, 0, 2]), {}),
    "aten::expand_copy.out": ((X[:, :1], [2, 7, 4, 5]), {"implicit": False}),
    "aten::slice_copy.Tensor_out": ((X, 2, 1, 4, 2), {}),
    "aten::select_copy.int_out": ((X, 1, 2), {}),
    "aten::unsqueeze_copy.out": ((X, 2), {}),
    "aten::squeeze_copy.dims_out": ((X[:, :1], [1]), {}),
    "aten::view_copy.out": ((X, [6, 20]), {}),
    "aten::t_copy.out": ((X[0, 0],), {}),
    "aten::alias_copy.out": ((X,), {}),
}


def test_every_in_place_kernel_is_tested():
    assert set(CALLS) == set(IN_PLACE)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_an_in_place_kernel_writes_what_torchs_out_variant_writes_into_the_out_it_is_given(name):
    args, keywords = CALLS[name]
    op = schema_op(name)
    assert isinstance(op, OnDevice)  # what the runtime's steps call
    expected = op.op(*args, **keywords, out=torch.empty(0))
    out = torch.full(expected.shape, float("nan"))
    address = out.data_ptr()
    result = IN_PLACE[name](*args, **keywords, out=out)
    assert result.data_ptr() == address and out.data_ptr() == address
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)


def test_on_the_host_the_programs_own_op_runs():
    calls = []
    on_device = OnDevice(aten.relu.out._schema, lambda *a, **k: calls.append("op"), lambda *a, **k: calls.append("in"))
    on_device(X, out=torch.empty_like(X))
    assert calls == ["op"]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU tier needs a CUDA GPU")
@pytest.mark.parametrize("name", sorted(CALLS))
def test_on_a_gpu_an_in_place_kernel_matches_the_host_and_allocates_no_result(name):
    torch.backends.cudnn.allow_tf32 = False
    args, keywords = CALLS[name]
    expected = schema_op(name).op(*args, **keywords, out=torch.empty(0))
    on_gpu = [a.cuda() if isinstance(a, torch.Tensor) else a for a in args]
    out = torch.empty(expected.shape, device="cuda")
    schema_op(name)(*on_gpu, **keywords, out=out)  # warm-up: cuDNN's and cuBLAS's handles
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    schema_op(name)(*on_gpu, **keywords, out=out)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
    # what it may still allocate: a scalar wrapped as a tensor, cuDNN's workspace (not a result)
    assert extra < expected.numel() * expected.element_size() or name == "aten::convolution.out", extra
