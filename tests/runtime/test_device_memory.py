"""What a run's devices really held (issue 40): `run --json` reports per device the planned
bytes, the constants copied there and the allocator's peak, which a GPU's allocator measures
(benchmarks/gpu.py, the GPU tier) and a host-backed one cannot."""

from __future__ import annotations

import json

import torch

import devplan
from devplan.pte import read_pte
from devplan.runtime import HostAllocator, LoadedMethod, registered
from devplan.runtime.report import device_memory
from devplan.spec import Device
from testbed.cli import devplan as cli
from tests.compile.test_cli import ROOT

CUDA = Device.parse("cuda:0")


class CountingAllocator(HostAllocator):
    """Host memory that counts what it holds, as a device's allocator does."""

    def __init__(self) -> None:
        self.held = self.most = 0

    def allocate(self, nbytes: int, device: Device) -> torch.Tensor:
        self.held += nbytes
        self.most = max(self.most, self.held)
        return super().allocate(nbytes, device)

    def deallocate(self, arena: torch.Tensor) -> None:
        self.held -= arena.numel()

    def peak(self, device: Device) -> int | None:
        return self.most


def test_run_json_reports_each_devices_plan_and_a_peak_only_where_the_allocator_counts(tmp_path):
    program = tmp_path / "cnn.pte"
    assert cli("compile", ROOT / "samples" / "cnn.pt2", "--delegate", "cuda:0", "-o", program).returncode == 0
    run = cli("run", program, "--devices-on-host", "--json")
    assert run.returncode == 0, run.stderr
    rows = {row["device"]: row for row in json.loads(run.stdout)["memory"]}
    buffers = {(m["device"]): m["size"] for m in devplan.inspect(program.read_bytes())["methods"][0]["devices"]}
    assert set(rows) == {"cpu", "cuda:0"} and rows["cuda:0"]["planned"] == buffers["cuda:0"]
    assert rows["cuda:0"]["constants"] > 0  # the delegate's weights, copied to its device
    assert rows["cuda:0"]["peak"] is None and rows["cuda:0"]["beyond_plan"] is None


def test_a_counting_allocators_peak_is_the_plan_and_the_constants_it_gave():
    data = devplan.compile(ROOT / "samples" / "cnn.pt2", delegates=["cuda:0"], device_io=True).data
    counting = CountingAllocator()
    with registered("cuda", counting):
        loaded = LoadedMethod(read_pte(data))
        try:
            loaded.execute(loaded.sample_inputs())
            (row,) = [r for r in device_memory(loaded, {CUDA: counting.peak(CUDA)}) if r["device"] == "cuda:0"]
        finally:
            loaded.release()
    assert row["peak"] == row["planned"] + row["constants"] and row["beyond_plan"] == 0
    assert counting.held == 0  # every arena and constant went back
