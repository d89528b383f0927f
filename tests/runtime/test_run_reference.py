"""Issue 51: `devplan run --reference` holds a program's outputs against the model it was
compiled from, another program or saved outputs, and exits 1 where one is off; `--runs N`
times the warm runs. In process: these are about what run computes, not about the process."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import torch

import devplan
from devplan.errors import EXIT_FAILED, DevplanError
from devplan.ops import REGISTERED
from tests.inspection.runner import invoke
from tests.test_schemas import validate


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(16, 32)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x, y):
        return self.head(torch.relu(self.hidden(x))), (y * 2).sum(-1)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("reference")
    ep = torch.export.export(Classifier().eval(), (torch.randn(8, 16), torch.randn(8, 4)))
    torch.export.save(ep, folder / "model.pt2")
    devplan.compile(folder / "model.pt2", folder / "model.pte")
    return folder


def _run(*args):
    """In process: a user's error (DevplanError) is the exception, as the entry point would print it."""
    result = invoke("run", *map(str, args))
    assert result.exception is None or isinstance(result.exception, (SystemExit, DevplanError)), result.exception
    return result


def test_a_program_matches_the_model_it_was_compiled_from(files):
    result = _run(files / "model.pte", "--reference", files / "model.pt2", "--json")
    assert result.exit_code == 0, result.stdout
    reference = json.loads(result.stdout)["reference"]
    assert reference["passed"] and [o["index"] for o in reference["outputs"]] == [0, 1]
    logits, total = reference["outputs"]
    assert logits["allclose"] and logits["argmax_agreement"] == 1.0 and logits["max_abs"] < 1e-5
    assert total["argmax_agreement"] is None  # a 1-D output has no classes
    validate("run", json.loads(result.stdout))


def test_a_program_with_one_weight_changed_exits_1(files, tmp_path):
    broken = bytearray((files / "model.pte").read_bytes())
    # one of the head's weights, found by its bytes in the file, made 50
    weight = torch.export.load(files / "model.pt2").state_dict["head.weight"]
    at = bytes(broken).find(weight.detach().numpy().tobytes()[:16])
    assert at > 0
    broken[at : at + 4] = torch.tensor([50.0]).numpy().tobytes()
    (tmp_path / "broken.pte").write_bytes(bytes(broken))
    result = _run(tmp_path / "broken.pte", "--reference", files / "model.pt2")
    assert result.exit_code == EXIT_FAILED, result.stdout
    text = " ".join(result.stdout.split())  # the lines as one, wherever the console's width wrapped them
    assert "against model.pt2 (allclose, atol 0.0001, rtol 0.0001): FAIL, 1 of 2 outputs off" in text
    assert re.search(r"output 0: FAIL SQNR -?[\d.]+ dB max abs [\d.]+ mean abs [\d.]+ not allclose", text), text
    assert "output 1: ok exact" in text


def test_saved_outputs_and_another_program_are_references_too(files, tmp_path):
    saved = tmp_path / "outputs.pt"
    assert _run(files / "model.pte", "--save", saved).exit_code == 0
    assert _run(files / "model.pte", "--reference", saved).exit_code == 0
    assert _run(files / "model.pte", "--reference", files / "model.pte").exit_code == 0
    # other inputs, other outputs: judged by SQNR, a bound the outputs miss fails and a loose one passes
    other = _run(files / "model.pte", "--reference", saved, "--seed", "1", "--min-sqnr", "20", "--json")
    assert other.exit_code == EXIT_FAILED
    assert json.loads(other.stdout)["reference"]["outputs"][0]["sqnr_db"] < 20
    assert _run(files / "model.pte", "--reference", saved, "--seed", "1", "--min-sqnr", "-60").exit_code == 0


def test_a_reference_of_another_shape_or_count_is_named(files, tmp_path):
    torch.save([torch.zeros(8, 3), torch.zeros(8)], tmp_path / "shape.pt")
    result = _run(files / "model.pte", "--reference", tmp_path / "shape.pt")
    assert result.exit_code == EXIT_FAILED and "shape (8, 10) against the reference's (8, 3)" in result.stdout
    torch.save([torch.zeros(8, 10)], tmp_path / "one.pt")
    result = _run(files / "model.pte", "--reference", tmp_path / "one.pt")
    assert isinstance(result.exception, DevplanError) and "1 outputs against the program's 2" in str(result.exception)


def test_tolerances_without_a_reference_are_refused(files):
    result = _run(files / "model.pte", "--min-sqnr", "30")
    assert isinstance(result.exception, DevplanError) and "add --reference FILE" in str(result.exception)


def test_runs_print_the_warm_latency(files):
    once = json.loads(_run(files / "model.pte", "--json").stdout)
    assert "latency" not in once  # one run is the warm-up alone
    timed = json.loads(_run(files / "model.pte", "--runs", "4", "--json").stdout)["latency"]
    validate("run", json.loads(_run(files / "model.pte", "--runs", "4", "--json").stdout))
    assert timed["runs"] == 3 and 0 < timed["min_ms"] <= timed["median_ms"] <= timed["max_ms"]
    text = _run(files / "model.pte", "--runs", "3").stdout
    assert "latency: median" in text and "over 2 warm runs" in text


def test_executorch_runtime_loads_without_its_compile_side():
    """run --executorch needs ExecuTorch's runtime and kernels, not exir or torch's inductor (which
    took 12 of the 15 s a run took); a compile later in the same process still gets all of exir."""
    pytest.importorskip("executorch")
    code = (
        "import sys; from devplan.runtime.executorch import load_runtime, registered_operators; "
        "names = registered_operators(); "
        "print(len(names), 'llama::custom_sdpa.out' in names, 'quantized_decomposed::embedding_byte.out' in names, "
        "sorted(m for m in sys.modules if m.startswith('executorch.exir') or m.startswith('torch._inductor'))); "
        "import executorch.exir; print(hasattr(executorch.exir, 'to_edge_transform_and_lower'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    loaded, exir = done.stdout.splitlines()
    count, sdpa, embedding, modules = loaded.split(" ", 3)
    assert int(count) == len(REGISTERED) and sdpa == embedding == "True"
    assert modules == "[]" and exir == "True"


def test_the_reference_verdict_in_the_ci_formats(files, tmp_path):
    saved = tmp_path / "outputs.pt"
    assert _run(files / "model.pte", "--save", saved).exit_code == 0
    program = str(files / "model.pte")
    off = ("--reference", str(saved), "--seed", "1")  # other inputs: output 0 differs, output 1 too
    github = _run(program, *off, "--format", "github")
    assert github.exit_code == EXIT_FAILED
    assert [line.split("::")[1] for line in github.stdout.splitlines()] == [
        f"error file={program},title=devplan run%3A output 0",
        f"error file={program},title=devplan run%3A output 1",
    ]
    markdown = _run(program, *off, "--format", "markdown").stdout
    assert (
        markdown.startswith("### devplan run `model.pte` against `outputs.pt`: FAIL") and "| ❌ FAIL | 0 |" in markdown
    )
    junit = tmp_path / "run.xml"
    assert _run(program, "--reference", str(saved), "--junit", str(junit)).exit_code == 0
    (suite,) = ET.parse(junit).getroot()
    assert [case.get("name") for case in suite] == ["output 0", "output 1"]
    assert all(case.find("failure") is None for case in suite)
    refused = _run(program, "--format", "github")
    assert isinstance(refused.exception, DevplanError) and "add --reference FILE" in str(refused.exception)


def test_a_device_buffer_executorch_cannot_allocate_is_named_as_devplan_names_it(tmp_path):
    """Issue 55: `Failed to allocate 3072 bytes for buffer 1 on device 1:0` is ExecuTorch's
    numbering; devplan says buffer 2 on cuda:0 and what runs the program."""
    pytest.importorskip("executorch")
    program = tmp_path / "cuda.pte"
    devplan.compile(torch.export.export(Classifier().eval(), (torch.randn(8, 16), torch.randn(8, 4))), program,
                    delegates=["cuda:0"])  # fmt: skip
    result = _run(program, "--executorch")
    assert isinstance(result.exception, DevplanError)
    said = str(result.exception)
    assert re.search(r"method forward plans buffer \d+ on cuda:0 \(\d+ bytes\)", said), said
    assert f"no allocator for cuda:0 memory; run it on devplan's runtime: devplan run {program}" in said


def test_an_output_value_equal_to_the_references_reads_equal():
    """A value output (not a tensor) has no error to measure: its line says it is equal
    rather than formatting the missing statistics (a TypeError before)."""
    from devplan.inspection.reports import reference_lines
    from devplan.runtime.compare import OutputTolerance, compare_outputs

    outputs = compare_outputs([3], [3], OutputTolerance())
    reference = {"file": {"name": "r.pt2"}, "atol": 1e-4, "rtol": 1e-4, "min_sqnr_db": None, "outputs": outputs}
    assert reference_lines(reference)[1:] == ["  output 0: ok    equal"]
