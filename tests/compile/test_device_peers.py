"""ExecuTorch's own device tests as a peer suite (issue 15).

executorch/exir/tests/test_propagate_device_pass.py (in the executorch 1.5.1 wheel) lowers
small add models with its device partitioners and checks where copies go. Each scenario here
builds the same model, lowers it with the partitioner that test uses (imported from it, or
from executorch.exir.backend.test.device_util) and ExecuTorch's non-CPU memory planning, and
compiles it with devplan giving the same ops the same device: `--delegate cuda:0=aten::add`
for DeviceAwarePartitioner, and for PerAddDeviceDelegatePartitioner one backend per add
node, so that each add is its own delegate as there. Then both programs, read by devplan's
inspect, must agree on the delegates, the device of every method input and output, the
devices in the NonConstBufferDevice table and the copies, and devplan must plan no more
bytes than ExecuTorch on any device. The counts devplan changes on purpose are listed with
each scenario, and why."""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

import devplan
from devplan.backend import Backend
from devplan.spec import Device

pytestmark = pytest.mark.sweep

_H2D, _D2H = "et_copy::_h2d_copy.out", "et_copy::_d2h_copy.out"


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
        "redundant_same_device_copies_elided": (_Chain(), 3, PerAdd(["cuda:0", "cuda:0"]), {},
                                                _per_add("cuda:0", "cuda:0"), False, {}),
        "cross_device_copies_kept": (_Chain(), 3, PerAdd(["cuda:0", "cuda:1"]), {},
                                     _per_add("cuda:0", "cuda:1"), False, {}),
        "output_feeding_same_device_delegates": (_FanOut(), 2, PerAdd(["cuda:0"] * 4), {},
                                                 _per_add(*["cuda:0"] * 4), False, {"h2d": (2, _ONE_COPY_PER_DEVICE)}),
        "output_feeding_gpu_and_cpu": (_GpuAndCpu(), 2, PerAdd(["cuda:0"] * 2), {}, _per_add("cuda:0", "cuda:0"),
                                       False, {"h2d": (2, _ONE_COPY_PER_DEVICE)}),
        "output_feeding_same_and_cross_device": (_SameAndCross(), 2, PerAdd(["cuda:0", "cuda:0", "cuda:1"]), {},
                                                 _per_add("cuda:0", "cuda:0", "cuda:1"), False,
                                                 {"h2d": (4, _ONE_COPY_PER_DEVICE)}),
        "cuda_1": (_Add(), 2, DeviceAwarePartitioner("cuda:1"), {}, ["cuda:1=aten::add"], False, {}),
        "non_delegated_stays_on_cpu": (_AddThenSin(), 2, DeviceAwarePartitioner("cuda:0"), {}, ["cuda:0=aten::add"],
                                       False, {}),
        "skip_h2d_and_d2h": (_Add(), 2, DeviceAwarePartitioner("cuda:0"), both, ["cuda:0=aten::add"], True, {}),
        "skip_h2d_for_method_inputs": (_Add(), 2, DeviceAwarePartitioner("cuda:0"),
                                       {"skip_h2d_for_method_inputs": True}, ["cuda:0=aten::add"], True,
                                       {"d2h": (0, _BOTH_ENDS), "outputs": (["cuda:0"], _BOTH_ENDS),
                                        "table": (["cuda:0"], "nothing is left on the host")}),
        "skip_d2h_for_method_outputs": (_Add(), 2, DeviceAwarePartitioner("cuda:0"),
                                        {"skip_d2h_for_method_outputs": True}, ["cuda:0=aten::add"], True,
                                        {"h2d": (0, _BOTH_ENDS), "inputs": (["cuda:0", "cuda:0"], _BOTH_ENDS),
                                         "table": (["cuda:0"], "nothing is left on the host")}),
        "skip_h2d_partial_with_intermediate_input": (_SinThenAdd(), 2, DeviceAwarePartitioner("cuda:0"), both,
                                                     ["cuda:0=aten::add"], True, {}),
    }


SCENARIOS = (
    "h2d_d2h_inserted", "no_device_spec_stays_on_cpu", "redundant_same_device_copies_elided", "cross_device_copies_kept",
    "output_feeding_same_device_delegates", "output_feeding_gpu_and_cpu", "output_feeding_same_and_cross_device",
    "cuda_1", "non_delegated_stays_on_cpu", "skip_h2d_and_d2h", "skip_h2d_for_method_inputs",
    "skip_d2h_for_method_outputs", "skip_h2d_partial_with_intermediate_input")


def executorch_device_pte(model, inputs, partitioner, skips: dict) -> bytes:
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes.propagate_device_pass import PropagateDeviceConfig

    config = ExecutorchBackendConfig(enable_non_cpu_memory_planning=True,
                                     propagate_device_config=PropagateDeviceConfig(**skips))
    return to_edge_transform_and_lower(torch.export.export(model, inputs), partitioner=[partitioner]).to_executorch(
        config).buffer


def facts(data: bytes) -> dict:
    """What the scenarios compare, read by devplan's inspect from either tool's program."""
    method = devplan.inspect(data)["methods"][0]
    ops = [row["op"] for row in method["instructions"]]
    device = {t["value"]: t["device"] for t in method["tensors"]}
    return {"h2d": ops.count(_H2D), "d2h": ops.count(_D2H), "delegates": len(method["delegates"]),
            "inputs": [device[i] for i in method["inputs"]], "outputs": [device[i] for i in method["outputs"]],
            "table": sorted({b["device"] for b in method["buffers"]}),
            "bytes": {d["device"]: d["size"] for d in method["devices"]}}


@pytest.fixture(scope="module")
def scenarios():
    return peer_scenarios()


@pytest.mark.parametrize("name", SCENARIOS)
def test_devplan_places_as_executorch_does_and_plans_no_more_on_any_device(name, scenarios):
    model, count, partitioner, skips, backends, device_io, differs = scenarios[name]
    torch.manual_seed(0)
    inputs = tuple(torch.randn(2, 2) for _ in range(count))
    theirs = facts(executorch_device_pte(model, inputs, partitioner, skips))
    compiled = devplan.compile(torch.export.export(model, inputs), delegates=backends, device_io=device_io)
    ours = facts(compiled.data)
    for key in ("h2d", "d2h", "delegates", "inputs", "outputs", "table"):
        expected = differs[key][0] if key in differs else theirs[key]
        assert ours[key] == expected, f"{name}: {key}: devplan {ours[key]}, ExecuTorch {theirs[key]}"
        if key in differs:
            assert theirs[key] != expected, f"{name}: {key} no longer differs ({differs[key][1]}); drop the note"
    assert set(ours["bytes"]) == set(ours["table"])
    for device, planned in ours["bytes"].items():
        assert planned <= theirs["bytes"][device], f"{name}: {device}: devplan {planned} > ExecuTorch {theirs['bytes'][device]}"
    if ours["table"] == ["cpu"]:  # as ExecuTorch writes it: no device table at all
        from devplan.pte import read_pte

        assert read_pte(compiled.data).program.executionPlan[0].nonConstBufferDevice is None
    from devplan.runtime import HostAllocator, registered

    with registered("cuda", HostAllocator()):
        (got,) = devplan.run(compiled.data, list(inputs))
    with torch.no_grad():
        expected = model(*inputs)
    for g, e in zip(got, expected if isinstance(expected, tuple) else (expected,)):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("name", SCENARIOS)
def test_inspect_reads_executorchs_device_programs_as_its_deserializer_does(name, scenarios):
    from executorch.exir._serialize._program import deserialize_pte_binary

    model, count, partitioner, skips, *_ = scenarios[name]
    data = executorch_device_pte(model, tuple(torch.randn(2, 2) for _ in range(count)), partitioner, skips)
    program = deserialize_pte_binary(data)
    plan = getattr(program, "program", program).execution_plan[0]
    table = {entry.buffer_idx: str(Device.from_code(int(entry.device_type), entry.device_index))
             for entry in plan.non_const_buffer_device or ()}
    method = devplan.inspect(data)["methods"][0]
    assert [(b["mem_id"], b["device"], b["size"]) for b in method["buffers"]] == [
        (i, table.get(i, "cpu"), size) for i, size in enumerate(plan.non_const_buffer_sizes) if i > 0]
    totals = {}
    for b in method["buffers"]:
        totals[b["device"]] = totals.get(b["device"], 0) + b["size"]
    assert {d["device"]: d["size"] for d in method["devices"]} == totals
    checks = devplan.check(data, budgets={device: size for device, size in totals.items()})
    assert all(c.ok for c in checks if c.mem_id is None) and {c.device for c in checks if c.mem_id is None} == set(totals)
