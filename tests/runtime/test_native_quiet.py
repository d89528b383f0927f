"""One line from devplan on both runtimes (issue 35): ExecuTorch's C++ logs (cpuinfo's probing,
'external_data_map is null') and what imported libraries log (torchao's 'Failed to load')
stay off standard error unless --debug asks for them, and a program whose weights are in a
.ptd not given is refused before ExecuTorch's runtime fails on it with an error code."""

from __future__ import annotations

import pytest

from testbed.cli import assert_one_line_error, devplan, fresh_devplan
from tests.compile.test_cli import ROOT

pytest.importorskip("executorch.runtime")
MLP = ROOT / "samples" / "mlp.pt2"


@pytest.mark.sweep  # an XNNPACK compile and two runs in fresh processes: under a minute
def test_an_executorch_run_prints_devplans_lines_only(tmp_path):
    program = tmp_path / "mlp.pte"
    assert devplan("compile", MLP, "--backend", "xnnpack", "-o", program, "-q").returncode == 0
    run = fresh_devplan("run", program, "--executorch")  # where ExecuTorch's runtime first loads, as users run it
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert run.stdout.startswith("output 0: float32 (8, 10)")
    loud = fresh_devplan("--debug", "run", program, "--executorch")
    assert loud.returncode == 0 and "cpuinfo" in loud.stderr  # what --debug is for


def test_an_executorch_run_without_the_ptd_says_what_to_pass(tmp_path):
    program = tmp_path / "mlp.pte"
    assert devplan("compile", MLP, "-o", program, "--external-constants", tmp_path / "w.ptd", "-q").returncode == 0
    assert_one_line_error(devplan("run", program, "--executorch"), "keeps 8 weights in a .ptd", "--data FILE.ptd")
    assert devplan("run", program, "--executorch", "--data", tmp_path / "w.ptd").returncode == 0


def test_kernels_that_log_on_import_leave_a_quiet_compile_quiet(tmp_path):
    run = devplan(
        "compile", MLP, "-o", tmp_path / "mlp.pte", "-q", "--kernels", "executorch.extension.llm.custom_ops.custom_ops"
    )
    assert run.returncode == 0 and run.stderr == "", run.stderr
