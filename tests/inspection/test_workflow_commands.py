"""No line devplan prints commands a GitHub runner (issue 52, item 2). The runner reads a line
of a job's output that starts, after its leading whitespace, with `::` as a workflow command
(`::add-mask::`, `::set-output`, `::stop-commands::`), and the legacy `##[` anywhere in one;
names from programs and golden files (operators, modules, sources, file names) reach devplan's
output in every format, and only devplan's own `--format github` annotations may be commands."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import devplan
from testbed.damage import workflow_commands as commands
from tests.inspection.runner import invoke

ROOT = Path(__file__).resolve().parents[2]
# 12 bytes, as aten::linear's in the program: a newline, a command, the legacy marker
OPERATOR = b"\n::x ##[a]::"
MODULE = b"::l\n##[y"  # 8 bytes, as layers.0's


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """mlp's program; the same with an operator and a module named to command the runner; and
    a golden file of mlp naming operators, a block and a source that do (long ones, which a
    wrapped line breaks before the command, without a control character)."""
    folder = tmp_path_factory.mktemp("workflow")
    program = folder / "mlp.pte"
    devplan.compile(ROOT / "samples" / "mlp.pt2", program)
    hostile = folder / "hostile.pte"
    data = program.read_bytes()
    assert data.count(b"aten::linear") == 1 and data.count(b"layers.0") == 3
    hostile.write_bytes(data.replace(b"aten::linear", OPERATOR).replace(b"layers.0", MODULE))
    golden = folder / "mlp.golden.json"
    assert invoke("check", str(program), "--golden", str(golden), "--update").exit_code == 0
    document = json.loads(golden.read_text())
    method = document["methods"][0]
    method["operators"] += ["x" * 70 + " ::add-mask::secret", "aten::y\n::set-output name=a::b", "##[group]op"]
    peak = method["buffers"][0]["peak"]
    peak["modules"]["blocks\n::warning::hi"] = 4096
    peak["source"] = "s" * 60 + " ::error::src"
    named = folder / "named.golden.json"
    named.write_text(json.dumps(document, indent=2))
    return {"program": program, "hostile": hostile, "golden": named}


def test_a_wrapped_name_in_checks_text_starts_no_command(files):
    # (a) a name that wraps onto a line of its own, at a space or at a newline made a space
    result = invoke("check", str(files["program"]), "--golden", str(files["golden"]))
    assert result.exit_code == 1 and "operators removed" in result.output, result.output
    assert commands(result.output) == [], result.output


def test_a_wrapped_name_in_diffs_text_starts_no_command(files):
    result = invoke("diff", str(files["golden"]), str(files["program"]))
    assert result.exit_code == 1 and "operators removed" in result.output, result.output
    assert commands(result.output) == [], result.output
    assert "aten::y\\n::set-output" in result.output  # the newline shown escaped, where it was


def test_a_newline_in_a_file_name_stays_in_diffs_header(files, tmp_path):
    # (b) the header was split into lines before it was escaped; splitlines also splits at
    # U+2028 and U+0085
    golden = tmp_path / "g\n::set-output name=a::b\u2028::c\x85::d.json"
    shutil.copy(files["golden"], golden)
    result = invoke("diff", str(golden), str(files["program"]))
    assert result.exit_code == 1, result.output
    assert commands(result.output) == [], result.output
    assert "g\\n::set-output name=a::b\\u2028::c\\x85::d.json -> mlp.pte: 2 changes" in result.output, result.output


def test_the_external_weights_note_escapes_the_file_name(tmp_path):
    # (c) the note on stderr for a program whose weights are outside it, given no --data
    program = tmp_path / "w\n::add-mask::x.pte"
    devplan.compile(ROOT / "samples" / "mlp.pt2", program, external_constants=tmp_path / "w.ptd")
    for args in (["check"], ["check", "--json"], ["check", "--format", "github"], ["diff", str(program)]):
        result = invoke(*args[:1], str(program), *args[1:])
        assert "weights external" in result.output, (args, result.output)
        assert commands(result.output) == [], (args, result.output)


@pytest.mark.parametrize(
    "args",
    [
        ["inspect", "{hostile}"],
        ["inspect", "{hostile}", "--json"],
        ["inspect", "{hostile}", "--bytes", "--shapes"],
        ["check", "{hostile}"],
        ["check", "{hostile}", "--json"],
        ["check", "{program}", "--golden", "{golden}"],
        ["check", "{program}", "--golden", "{golden}", "--json"],
        ["check", "{program}", "--golden", "{golden}", "--format", "markdown"],
        ["check", "{program}", "--golden", "{golden}", "--format", "github"],
        ["check", "{hostile}", "--golden", "{golden}", "--format", "github", "--tolerance", "1%"],
        ["diff", "{golden}", "{program}"],
        ["diff", "{golden}", "{hostile}", "--exact"],
        ["diff", "{program}", "{hostile}", "--json"],
        ["diff", "{golden}", "{hostile}", "--format", "markdown"],
        ["diff", "{golden}", "{hostile}", "--format", "github"],
        ["run", "{hostile}", "--json"],
        ["inspect", "{hostile}", "--svg", "-"],
        ["inspect", "{hostile}", "--trace", "-"],
        ["check", "{hostile}", "--golden", "-", "--update"],
        ["inspect", "{hostile}", "--method", "::add-mask::m ##[x]"],
        ["check", "{hostile}", "--budget", "::set-output name=a::b=1KiB"],
    ],
    ids=lambda args: "-".join(a.strip("{}-") for a in args),
)
def test_no_command_in_any_format(files, args):
    """Every command over the hostile program and golden file, in every format: no line but
    devplan's own annotations is a workflow command (errors included)."""
    result = invoke(*(arg.format(**files) for arg in args))
    assert result.exit_code in (0, 1, 2), (result.output, result.exception)
    assert commands(result.output) == [], result.output
