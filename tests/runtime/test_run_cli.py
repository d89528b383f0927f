"""`devplan run` as a user runs it: a program and inputs in, output summaries or one error line out."""

import json

import pytest
import torch

from samples.make_samples import sample_models
from testbed.cli import assert_one_line_error, devplan, fresh_devplan
from tests.compile.test_cli import ROOT


def compiled(tmp_path, name="two_io"):
    program = tmp_path / f"{name}.pte"
    assert devplan("compile", ROOT / "samples" / f"{name}.pt2", "-o", program).returncode == 0
    return program


@pytest.mark.sweep  # end to end through the command line; the run command's other cases stay fast
def test_run_with_saved_inputs_matches_eager_and_saves_outputs(tmp_path):
    program = compiled(tmp_path)
    module, args = sample_models()["two_io"]
    torch.save(list(args), tmp_path / "inputs.pt")
    run = devplan("run", program, "--inputs", tmp_path / "inputs.pt", "--save", tmp_path / "out.pt", "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    saved = torch.load(tmp_path / "out.pt")
    with torch.no_grad():
        a, (b, c) = module(*args)
    for got, want, summary in zip(saved, (a, b, c), report["runs"][0]):
        torch.testing.assert_close(got, want)
        assert summary["shape"] == list(want.shape) and summary["dtype"] == "float32"
        assert abs(summary["max"] - float(want.max())) < 1e-5


@pytest.mark.sweep  # end to end through the command line; the full suite runs it
def test_run_twice_with_random_inputs_prints_each_output(tmp_path):
    run = devplan("run", compiled(tmp_path), "--runs", "2", "--seed", "3")
    assert run.returncode == 0, run.stderr
    # the outputs, then the warm run's time (which varies from run to run)
    *lines, timed = run.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == [f"run {r} output {i}" for r in (1, 2) for i in range(3)]
    assert "float32 (4, 16)" in lines[0] and "min" in lines[0] and "mean" in lines[0]
    assert timed.startswith("latency: median") and timed.endswith("over 1 warm run")
    again = devplan("run", compiled(tmp_path), "--runs", "2", "--seed", "3").stdout
    assert again.strip().splitlines()[:-1] == lines


@pytest.mark.sweep  # end to end through the command line; the full suite runs it
def test_run_errors_are_one_line(tmp_path):
    program = compiled(tmp_path)
    torch.save([torch.randn(4, 16)], tmp_path / "one.pt")
    assert_one_line_error(devplan("run", program, "-i", tmp_path / "one.pt"), "takes 2 inputs, got 1")
    assert_one_line_error(devplan("run", program, "-i", program), "not a file of tensors saved with torch.save")
    assert_one_line_error(devplan("run", program, "-i", tmp_path / "missing.pt"), "missing.pt: no such file")
    assert_one_line_error(devplan("run", tmp_path / "missing.pte"), "missing.pte")
    assert_one_line_error(devplan("run", ROOT / "samples" / "mlp.pt2"), "not an ET12 program")
    assert_one_line_error(devplan("run", program, "--method", "nope"), "no method 'nope'")


@pytest.mark.sweep  # end to end through the command line; the full suite runs it
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_a_device_program_without_the_device_says_how_to_run_it_anyway(tmp_path):
    program = tmp_path / "cuda.pte"
    assert devplan("compile", ROOT / "samples" / "two_io.pt2", "-o", program, "--delegate", "cuda:0").returncode == 0
    assert_one_line_error(devplan("run", program), "no CUDA device")
    assert "--devices-on-host" in devplan("run", program).stderr
    assert devplan("run", program, "--devices-on-host").returncode == 0


def test_a_warning_torch_prints_from_cpp_stays_off_stderr(tmp_path):
    """A kernel resizing an out tensor declared with fewer elements than its result makes torch
    warn from C++ (Resize.cpp, straight to stderr, where Python's warning filters cannot reach)
    before devplan refuses the program: stderr is the one error line alone. In a fresh
    interpreter, as torch reads its log level from the environment when first imported."""
    from testbed.small_programs import compiled as block
    from tests.runtime.damaged_programs import damaged, kernel_calls

    def change(plan):
        relu = next(i for i, op in enumerate(plan.operators) if op.name in (b"aten::relu", "aten::relu"))
        out = plan.values[next(i.instrArgs for i in kernel_calls(plan) if i.instrArgs.opIndex == relu).args[-1]].val
        out.sizes = [1, *list(out.sizes)[1:]]

    program = tmp_path / "resized.pte"
    program.write_bytes(damaged(block(), change))
    assert_one_line_error(fresh_devplan("run", program), "aten::relu.out", "where the plan holds (1, 6)")
