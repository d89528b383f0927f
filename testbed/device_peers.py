"""ExecuTorch's own device tests as scenarios (executorch/exir/tests/test_propagate_device_pass.py
in the executorch 1.5.1 wheel): each the small add model it builds, the partitioner it lowers
with and its PropagateDeviceConfig, and the devplan backends that give the same ops the same
devices (one backend per add node where its partitioner makes each add a delegate of its own),
with the counts devplan changes on purpose and why; and ExecuTorch's lowering of one, with its
non-CPU memory planning."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from devplan.backend import Backend
from devplan.spec import Device


@dataclass(frozen=True)
class _Nodes(Backend):
    """A backend taking the graph nodes it names: one add of several, as the per-add
    partitioner chooses them."""

    names: frozenset[str] = frozenset()

    def takes(self, node: torch.fx.Node) -> bool:
        return node.op == "call_function" and node.name in self.names


def _per_add(*devices: str) -> list[Backend]:
    names = ["add"] + [f"add_{i}" for i in range(1, len(devices))]  # torch.export's names, in graph order
    return [_Nodes(Device.parse(device), names=frozenset([name])) for device, name in zip(devices, names)]


class _Add(torch.nn.Module):
    def forward(self, a, b):
        return torch.add(a, b)


class _Chain(torch.nn.Module):
    def forward(self, a, b, c):
        return (a + b) + c


class _FanOut(torch.nn.Module):
    def forward(self, a, b):
        t = a + b
        return (t + a) + (t + b)


class _GpuAndCpu(torch.nn.Module):
    def forward(self, a, b):
        t = a + b
        return t + a, torch.relu(t)


class _SameAndCross(torch.nn.Module):
    def forward(self, a, b):
        t = a + b
        return t + a, t + b


class _AddThenSin(torch.nn.Module):
    def forward(self, a, b):
        return torch.sin(torch.add(a, b))


class _SinThenAdd(torch.nn.Module):
    def forward(self, a, b):
        return torch.add(torch.sin(a), b)


# Each input a tensor feeds two delegates on one device: ExecuTorch copies it once per delegate,
# devplan once per device (the copy is already there for the second).
_ONE_COPY_PER_DEVICE = "devplan copies an input to a device once, however many delegates there read it"


_BOTH_ENDS = "devplan's --device-io skips the copies at both ends of the method; ExecuTorch can skip one"


def peer_scenarios():
    from executorch.exir.backend.test.device_util import CpuOnlyPartitioner, DeviceAwarePartitioner
    from executorch.exir.tests.test_propagate_device_pass import PerAddDeviceDelegatePartitioner as PerAdd

    both = {"skip_h2d_for_method_inputs": True, "skip_d2h_for_method_outputs": True}
    # name: (model, inputs, ExecuTorch partitioner, its PropagateDeviceConfig, devplan backends,
    #        devplan device_io, {count: (devplan's, why)} where devplan differs on purpose)
    return {
        "h2d_d2h_inserted": (_Add(), 2, DeviceAwarePartitioner("cuda:0"), {}, ["cuda:0=aten::add"], False, {}),
        "no_device_spec_stays_on_cpu": (_Add(), 2, CpuOnlyPartitioner(), {}, ["cpu=aten::add"], False, {}),
        "redundant_same_device_copies_elided": (
            _Chain(),
            3,
            PerAdd(["cuda:0", "cuda:0"]),
            {},
            _per_add("cuda:0", "cuda:0"),
            False,
            {},
        ),
        "cross_device_copies_kept": (
            _Chain(),
            3,
            PerAdd(["cuda:0", "cuda:1"]),
            {},
            _per_add("cuda:0", "cuda:1"),
            False,
            {},
        ),
        "output_feeding_same_device_delegates": (
            _FanOut(),
            2,
            PerAdd(["cuda:0"] * 4),
            {},
            _per_add(*["cuda:0"] * 4),
            False,
            {"h2d": (2, _ONE_COPY_PER_DEVICE)},
        ),
        "output_feeding_gpu_and_cpu": (
            _GpuAndCpu(),
            2,
            PerAdd(["cuda:0"] * 2),
            {},
            _per_add("cuda:0", "cuda:0"),
            False,
            {"h2d": (2, _ONE_COPY_PER_DEVICE)},
        ),
        "output_feeding_same_and_cross_device": (
            _SameAndCross(),
            2,
            PerAdd(["cuda:0", "cuda:0", "cuda:1"]),
            {},
            _per_add("cuda:0", "cuda:0", "cuda:1"),
            False,
            {"h2d": (4, _ONE_COPY_PER_DEVICE)},
        ),
        "cuda_1": (_Add(), 2, DeviceAwarePartitioner("cuda:1"), {}, ["cuda:1=aten::add"], False, {}),
        "non_delegated_stays_on_cpu": (
            _AddThenSin(),
            2,
            DeviceAwarePartitioner("cuda:0"),
            {},
            ["cuda:0=aten::add"],
            False,
            {},
        ),
        "skip_h2d_and_d2h": (_Add(), 2, DeviceAwarePartitioner("cuda:0"), both, ["cuda:0=aten::add"], True, {}),
        "skip_h2d_for_method_inputs": (
            _Add(),
            2,
            DeviceAwarePartitioner("cuda:0"),
            {"skip_h2d_for_method_inputs": True},
            ["cuda:0=aten::add"],
            True,
            {
                "d2h": (0, _BOTH_ENDS),
                "outputs": (["cuda:0"], _BOTH_ENDS),
                "table": (["cuda:0"], "nothing is left on the host"),
            },
        ),
        "skip_d2h_for_method_outputs": (
            _Add(),
            2,
            DeviceAwarePartitioner("cuda:0"),
            {"skip_d2h_for_method_outputs": True},
            ["cuda:0=aten::add"],
            True,
            {
                "h2d": (0, _BOTH_ENDS),
                "inputs": (["cuda:0", "cuda:0"], _BOTH_ENDS),
                "table": (["cuda:0"], "nothing is left on the host"),
            },
        ),
        "skip_h2d_partial_with_intermediate_input": (
            _SinThenAdd(),
            2,
            DeviceAwarePartitioner("cuda:0"),
            both,
            ["cuda:0=aten::add"],
            True,
            {},
        ),
    }


SCENARIOS = (
    "h2d_d2h_inserted",
    "no_device_spec_stays_on_cpu",
    "redundant_same_device_copies_elided",
    "cross_device_copies_kept",
    "output_feeding_same_device_delegates",
    "output_feeding_gpu_and_cpu",
    "output_feeding_same_and_cross_device",
    "cuda_1",
    "non_delegated_stays_on_cpu",
    "skip_h2d_and_d2h",
    "skip_h2d_for_method_inputs",
    "skip_d2h_for_method_outputs",
    "skip_h2d_partial_with_intermediate_input",
)


def executorch_device_pte(model, inputs, partitioner, skips: dict) -> bytes:
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes.propagate_device_pass import PropagateDeviceConfig

    config = ExecutorchBackendConfig(
        enable_non_cpu_memory_planning=True, propagate_device_config=PropagateDeviceConfig(**skips)
    )
    return (
        to_edge_transform_and_lower(torch.export.export(model, inputs), partitioner=[partitioner])
        .to_executorch(config)
        .buffer
    )
