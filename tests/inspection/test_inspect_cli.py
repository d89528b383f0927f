"""`devplan inspect` as a person runs it: options, defaults, and one-line failures."""

from __future__ import annotations

import json
import os
import re

import pytest
from typer.testing import CliRunner

from devplan.cli import app
from devplan.inspection.sections import DEFAULT_SECTIONS, SECTIONS
from tests.inspection.runner import invoke, run_devplan


def headings(text: str) -> set[str]:
    # not the summary's own "segments" row (its value after the padding)
    return {section for section in SECTIONS if re.search(rf"^{section}\b(?! {{2,}}\S)", text, re.MULTILINE)} | (
        {"summary"} if "constant data" in text else set()
    )


def test_default_sections(hand_built):
    result = invoke("inspect", str(hand_built["cuda"]))
    assert result.exit_code == 0, result.output
    assert headings(result.stdout) == set(DEFAULT_SECTIONS)


def test_repeated_sections_and_all(hand_built):
    result = invoke("inspect", str(hand_built["cuda"]), "-s", "tensors", "--section", "instructions")
    assert headings(result.stdout) == {"tensors", "instructions"}
    result = invoke("inspect", str(hand_built["cuda"]), "-s", "all")
    assert headings(result.stdout) == set(SECTIONS)


def test_method_option_shows_one_method(hand_built):
    result = invoke("inspect", str(hand_built["lifetimes"]), "--method", "identity", "-s", "tensors")
    assert result.exit_code == 0, result.output
    assert "method identity" in result.stdout and "method forward" not in result.stdout


def test_bytes_option(lowered):
    path = str(lowered["transformer"])
    doc = json.loads(invoke("inspect", path, "--json").stdout)
    size = doc["methods"][0]["buffers"][0]["size"]
    assert f" {size} B " in invoke("inspect", path, "-s", "buffers", "--bytes").stdout
    assert f" {size} B " not in invoke("inspect", path, "-s", "buffers").stdout


def test_help_describes_every_option():
    result = invoke("inspect", "--help")
    assert result.exit_code == 0
    for option in ("--json", "--method", "--section", "--bytes", "PROGRAM.pte"):
        assert option in result.stdout, option
    for section in SECTIONS:
        assert section in result.stdout, section


@pytest.mark.parametrize("target", ["missing", "directory"])
def test_bad_path_is_one_line_and_exit_2(target, tmp_path):
    path = tmp_path / "nothing.pte" if target == "missing" else tmp_path
    result = run_devplan("inspect", str(path))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("devplan: error: ") and str(path) in lines[0]


def test_unknown_method_is_one_line_and_exit_2(hand_built):
    result = run_devplan("inspect", str(hand_built["lifetimes"]), "--method", "backward")
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert "backward" in line and "forward, identity" in line


def test_a_bad_file_fails_without_importing_torch(tmp_path):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"\x00" * 64)
    result = run_devplan("inspect", str(bad), env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 2
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert imported, "no import timings; is PYTHONPROFILEIMPORTTIME honoured?"
    assert not {name for name in imported if name.split(".")[0] in ("torch", "executorch", "rich")}
    (message,) = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert message.startswith("devplan: error: ")


def test_delegate_option_shows_the_program_inside_a_payload(tmp_path, lowered):
    import torch

    import devplan
    from samples.make_samples import sample_models

    module, args = sample_models()["two_io"]
    program = tmp_path / "two_io.pte"
    compiled = devplan.compile(torch.export.export(module, args), program, delegates=["cuda:0=aten::linear"])
    result = invoke("inspect", str(program), "--delegate", "0", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["file"]["name"] == "two_io.pte delegate 0"
    (payload,) = compiled.planned.method.delegates
    assert doc == devplan.inspect(payload.payload) | {"file": doc["file"]}
    # a lone linear plans no buffer: its input and result are the calling program's tensors on cuda:0
    assert doc["methods"][0]["buffers"] == []
    io = doc["methods"][0]["inputs"] + doc["methods"][0]["outputs"]
    assert {t["device"] for t in doc["methods"][0]["tensors"] if t["value"] in io} == {"cuda:0"}
    failed = run_devplan("inspect", str(program), "-d", "3")
    assert failed.returncode == 2 and "no such delegate; the plan has 1" in failed.stderr
    assert len(failed.stderr.splitlines()) == 1
    # ExecuTorch's XNNPACK payload is its graph's document (tests/inspection/test_xnngraph.py)
    assert devplan.inspect(lowered["xnnpack"], delegate=0)["format"] == "XNNGraph"


def test_no_color_drops_bold_and_dim_too(hand_built):
    """NO_COLOR means no styles at all (no-color.org); rich alone keeps bold and dim."""
    path = str(hand_built["lifetimes"])
    styled = CliRunner().invoke(app, ["inspect", path, "-s", "all"], env={"FORCE_COLOR": "1", "NO_COLOR": None})
    assert "\x1b[1m" in styled.stdout  # the terminal gets bold headings
    plain = CliRunner().invoke(app, ["inspect", path, "-s", "all"], env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert plain.exit_code == 0 and "\x1b[" not in plain.stdout, plain.stdout[:400]
