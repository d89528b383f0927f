"""The reference runtime: runs devplan's and ExecuTorch's programs like the real runtime,
through a DeviceAllocator per device type, and shows a broken plan by its wrong outputs."""

from dataclasses import replace

import pytest
import torch
from torch.utils import _pytree as pytree

import devplan
from devplan.emit.program import to_program
from devplan.errors import DevplanError
from devplan.planning.plan_method import plan_method
from devplan.pte import dumps_pte
from devplan.pte.fb.NonConstBufferDevice import NonConstBufferDeviceT
from devplan.runtime import HostAllocator, registered, run
from devplan.spec import Device, TensorSpec
from testbed.lowerings import executorch_lowered
from testbed.models import assert_runs_match, eager_outputs, export


def assert_outputs(got_runs, want_runs):
    assert_runs_match(got_runs, want_runs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["cat_split_chunk", "rolling_cache", "transformer_encoder", "residual_cnn"])
def test_it_runs_programs_executorch_lowered(name):
    ep, module, args = export(name)
    assert_outputs(run(executorch_lowered(ep), pytree.tree_leaves(args), runs=2), eager_outputs(module, args, runs=2))


class Chain(torch.nn.Module):
    def forward(self, x):
        a = torch.relu(x @ x.mT)
        b = torch.sigmoid(x @ x.mT - 1.0)
        return (a.sum(0) + b.sum(0)) * 2


def planned(module, args, **options):
    result = devplan.compile(torch.export.export(module.eval(), args, strict=False), **options)
    return result.planned


def program_bytes(planned_method) -> bytes:
    return dumps_pte(*to_program(planned_method))


def test_a_plan_that_overlaps_live_tensors_gives_wrong_outputs():
    args = (torch.randn(6, 6),)
    good = planned(Chain(), args, inplace=False, reorder=False)  # exported order: a and b meet at the add
    method = good.method
    relu = next(k.args[-1] for k in method.kernels if k.op == "aten::relu.out")
    sigmoid = next(k.args[-1] for k in method.kernels if k.op == "aten::sigmoid.out")
    # both are alive at the add; put the sigmoid result on top of the relu result
    broken = method.with_specs({sigmoid: replace(method.values[sigmoid], offset=method.values[relu].offset)})
    want = eager_outputs(Chain(), args)
    assert_outputs(run(program_bytes(good), list(args)), want)
    with pytest.raises(AssertionError):
        assert_outputs(run(program_bytes(replace(good, method=broken)), list(args)), want)


class Recording(HostAllocator):
    """Host memory standing in for a device, with a log of every allocator call."""

    def __init__(self):
        self.calls = []

    def allocate(self, nbytes, device):
        self.calls.append(("allocate", nbytes, str(device)))
        return super().allocate(nbytes, device)

    def deallocate(self, arena):
        self.calls.append(("deallocate", arena.numel()))

    def copy_to_device(self, dst, src):
        self.calls.append(("to_device", tuple(src.shape)))
        super().copy_to_device(dst, src)

    def copy_to_host(self, src):
        self.calls.append(("to_host", tuple(src.shape)))
        return super().copy_to_host(src)


def on_cuda(planned_method):
    """The same program with every planned tensor on cuda:0, planned again."""
    method = planned_method.method
    cuda = Device("cuda", 0)
    moved = method.with_specs(
        {
            i: replace(v, device=cuda, lifetime=None, mem_id=None, offset=None)
            for i, v in enumerate(method.values)
            if isinstance(v, TensorSpec) and not v.constant
        }
    )
    return plan_method(moved, home=cuda)  # its kernels run on the device, as in a delegate payload


def test_a_cuda_program_goes_through_the_allocator_registered_for_cuda():
    args = (torch.randn(5, 3),)
    program = on_cuda(planned(Chain(), args))
    (buffer,) = program.buffers
    assert (buffer.mem_id, str(buffer.device)) == (1, "cuda:0")
    data = program_bytes(program)
    assert devplan.inspect(data)["methods"][0]["buffers"][0]["device"] == "cuda:0"
    with registered("cuda", Recording()) as device:
        assert_outputs(run(data, list(args)), eager_outputs(Chain(), args))
    assert device.calls == [
        ("allocate", buffer.size, "cuda:0"),
        ("to_device", (5, 3)),
        ("to_host", (5,)),
        ("deallocate", buffer.size),
    ]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_without_cuda_a_cuda_program_says_what_to_register():
    data = program_bytes(on_cuda(planned(Chain(), (torch.randn(5, 3),))))
    with pytest.raises(
        DevplanError,
        match=r"^<bytes>: method forward: the program places a buffer on cuda:0, but this "
        r"machine has no CUDA device; register a DeviceAllocator for 'cuda'",
    ):
        run(data, [torch.randn(5, 3)])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_program_runs_on_the_gpu():
    args = (torch.randn(5, 3),)
    assert_outputs(run(program_bytes(on_cuda(planned(Chain(), args))), list(args)), eager_outputs(Chain(), args))


def test_wrong_inputs_and_unknown_methods_are_one_clear_error():
    data = program_bytes(planned(Chain(), (torch.randn(5, 3),)))
    with pytest.raises(
        DevplanError, match=r"input 0 must be a \(5, 3\) torch.float32 tensor, got \(3, 5\) torch.float32"
    ):
        run(data, [torch.randn(3, 5)])
    with pytest.raises(DevplanError, match=r"takes 1 inputs, got 2"):
        run(data, [torch.randn(5, 3), torch.randn(5, 3)])
    with pytest.raises(DevplanError, match=r"no method 'backward'; the program has forward"):
        run(data, [torch.randn(5, 3)], method="backward")


def test_a_buffer_on_an_undefined_device_type_is_refused_by_name():
    program, segments = to_program(planned(Chain(), (torch.randn(5, 3),)))
    program.executionPlan[0].nonConstBufferDevice = [NonConstBufferDeviceT(bufferIdx=1, deviceType=9, deviceIndex=0)]
    with pytest.raises(
        DevplanError,
        match=r"^odd.pte: method forward: buffer 1 is on device_type\(9\):0, a device "
        r"type ET12 does not define; the program is damaged",
    ):
        run(devplan.read_pte(dumps_pte(program, segments), name="odd.pte"), [torch.randn(5, 3)])
