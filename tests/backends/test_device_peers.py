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
each scenario, and why (the scenarios: testbed/device_peers.py)."""

from __future__ import annotations

import pytest
import torch

import devplan
from devplan.spec import Device
from testbed.device_peers import SCENARIOS, executorch_device_pte, peer_scenarios

pytestmark = pytest.mark.sweep

_H2D, _D2H = "et_copy::_h2d_copy.out", "et_copy::_d2h_copy.out"


def facts(data: bytes) -> dict:
    """What the scenarios compare, read by devplan's inspect from either tool's program."""
    method = devplan.inspect(data)["methods"][0]
    ops = [row["op"] for row in method["instructions"]]
    device = {t["value"]: t["device"] for t in method["tensors"]}
    return {
        "h2d": ops.count(_H2D),
        "d2h": ops.count(_D2H),
        "delegates": len(method["delegates"]),
        "inputs": [device[i] for i in method["inputs"]],
        "outputs": [device[i] for i in method["outputs"]],
        "table": sorted({b["device"] for b in method["buffers"]}),
        "bytes": {d["device"]: d["size"] for d in method["devices"]},
    }


@pytest.fixture(scope="module")
def scenarios():
    return peer_scenarios()


@pytest.mark.parametrize("name", SCENARIOS)
def test_devplan_places_as_executorch_does_and_plans_no_more_on_any_device(name, scenarios):
    model, count, partitioner, skips, backends, device_io, differs = scenarios[name]
    torch.manual_seed(0)
    inputs = tuple(torch.randn(2, 2) for _ in range(count))
    theirs = facts(executorch_device_pte(model, inputs, partitioner, skips))
    # at ExecuTorch's alignment, 16 in every buffer: by default devplan's CUDA buffers are at 512
    compiled = devplan.compile(
        torch.export.export(model, inputs), delegates=backends, device_io=device_io, alignment=16
    )
    ours = facts(compiled.data)
    for key in ("h2d", "d2h", "delegates", "inputs", "outputs", "table"):
        expected = differs[key][0] if key in differs else theirs[key]
        assert ours[key] == expected, f"{name}: {key}: devplan {ours[key]}, ExecuTorch {theirs[key]}"
        if key in differs:
            assert theirs[key] != expected, f"{name}: {key} no longer differs ({differs[key][1]}); drop the note"
    assert set(ours["bytes"]) == set(ours["table"])
    for device, planned in ours["bytes"].items():
        assert planned <= theirs["bytes"][device], (
            f"{name}: {device}: devplan {planned} > ExecuTorch {theirs['bytes'][device]}"
        )
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
    table = {
        entry.buffer_idx: str(Device.from_code(int(entry.device_type), entry.device_index))
        for entry in plan.non_const_buffer_device or ()
    }
    method = devplan.inspect(data)["methods"][0]
    assert [(b["mem_id"], b["device"], b["size"]) for b in method["buffers"]] == [
        (i, table.get(i, "cpu"), size) for i, size in enumerate(plan.non_const_buffer_sizes) if i > 0
    ]
    totals = {}
    for b in method["buffers"]:
        totals[b["device"]] = totals.get(b["device"], 0) + b["size"]
    assert {d["device"]: d["size"] for d in method["devices"]} == totals
    checks = devplan.check(data, budgets={device: size for device, size in totals.items()})
    assert all(c.ok for c in checks if c.mem_id is None) and {c.device for c in checks if c.mem_id is None} == set(
        totals
    )
