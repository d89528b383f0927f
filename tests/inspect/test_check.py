"""`devplan check`: planned memory against budgets and lower bounds, for CI."""
import json

import pytest
import torch

import devplan
from devplan.errors import DevplanError
from tests.compile.test_cli import assert_one_line_error, devplan as cli
from tests.models import executorch_lower, export
from tests.runtime.test_runtime import Chain, on_cuda, planned, program_bytes


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("check")
    ep, _, _ = export("gated_mlp")
    paths = {"devplan": folder / "devplan.pte", "executorch": folder / "executorch.pte"}
    paths["devplan"].write_bytes(devplan.compile(ep).data)
    paths["executorch"].write_bytes(executorch_lower(export("gated_mlp")[0]))
    return paths


def test_budgets_and_ratios_pass_and_fail_by_buffer(programs):
    (mine,) = devplan.check(programs["devplan"])
    assert mine.ok and mine.size == mine.lower_bound and mine.budget is None
    assert devplan.check(programs["devplan"], budgets={"cpu": mine.size})[0].ok
    over = devplan.check(programs["devplan"], budgets={"1": mine.size - 16})[0]
    assert not over.ok and over.budget == mine.size - 16
    (theirs,) = devplan.check(programs["executorch"], max_ratio=1.0)
    assert theirs.size > theirs.lower_bound and not theirs.ok      # ExecuTorch's default plan is above its bound
    assert devplan.check(programs["executorch"], max_ratio=theirs.ratio)[0].ok


def test_a_device_buffer_is_budgeted_by_its_device():
    data = program_bytes(on_cuda(planned(Chain(), (torch.randn(5, 3),))))
    (buffer,) = devplan.check(data, budgets={"cuda:0": 1 << 20})
    assert (buffer.device, buffer.budget, buffer.ok) == ("cuda:0", 1 << 20, True)
    with pytest.raises(DevplanError, match=r"--budget cpu: <bytes> has no such buffer; budget one of: 1, cuda:0"):
        devplan.check(data, budgets={"cpu": 1 << 20})


def test_the_command_exits_0_1_or_2(programs):
    ok = cli("check", programs["devplan"], "--budget", "cpu=1MiB", "--max-ratio", "1.0")
    assert ok.returncode == 0 and ok.stdout.startswith("ok    forward buffer 1 (cpu)"), ok.stderr
    fail = cli("check", programs["executorch"], "--max-ratio", "1.0", "--json")
    assert fail.returncode == 1, fail.stderr
    report = json.loads(fail.stdout)
    assert report["ok"] is False and report["buffers"][0]["ratio"] > 1.0 and report["file"] == "executorch.pte"
    text = cli("check", programs["executorch"], "--budget", "1=1KiB")
    assert text.returncode == 1 and text.stdout.startswith("FAIL") and "over by" in text.stdout
    assert_one_line_error(cli("check", programs["devplan"], "--budget", "7=1KiB"), "--budget 7", "no such buffer")
    assert_one_line_error(cli("check", programs["devplan"], "--max-ratio", "0.5"), "ratio of 1 or more")
    assert_one_line_error(cli("check", programs["devplan"].with_name("missing.pte")), "missing.pte")


def test_buffers_planned_inside_devplan_delegates_are_checked_too(tmp_path):
    ep, _, _ = export("gated_mlp")
    result = devplan.compile(ep, delegates=["cuda:0=aten::linear"])
    checks = devplan.check(result.data, budgets={"cuda:0": 1 << 20})
    own = [c for c in checks if c.method == "forward"]
    inside = [c for c in checks if c.method != "forward"]
    assert [(c.mem_id, c.device) for c in own] == [(b.mem_id, str(b.device)) for b in result.planned.buffers]
    assert [c.method for c in inside] == [f"forward delegate {i}" for i in range(len(result.planned.method.delegates))]
    assert all(c.device == "cuda:0" and c.budget == 1 << 20 and c.ok for c in inside)
    smallest = min(c.size for c in inside)
    assert not all(c.ok for c in devplan.check(result.data, budgets={"cuda:0": smallest - 16}))
    program = tmp_path / "gated.pte"
    program.write_bytes(result.data)
    text = cli("check", program, "--budget", "cuda:0=1MiB")
    assert text.returncode == 0 and "ok    forward delegate 0 buffer 1 (cuda:0)" in text.stdout, text.stderr
