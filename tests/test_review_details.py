"""The smaller points of a reviewer's first hour with devplan (issue 37, item 6): binary never
reaches a terminal, a .ptd that the program does not need is named, completion offers the
values it knows, FAIL in colour only where colour is wanted, a file that is not JSON text is
said to be so, counts agree with their nouns, and the help links what a pip install has."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import devplan
from devplan.cli import app
from devplan.inspection.reports import compile_lines

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, Path]:
    """two_io with one delegate, and mlp with its weights in a .ptd beside it."""
    folder = tmp_path_factory.mktemp("programs")
    devplan.compile(ROOT / "samples" / "two_io.pt2", folder / "two_io.pte", delegates=["cuda:0=aten::linear"])
    devplan.compile(ROOT / "samples" / "mlp.pt2", folder / "mlp.pte", external_constants=folder / "mlp.ptd")
    return {"two_io": folder / "two_io.pte", "mlp": folder / "mlp.pte", "ptd": folder / "mlp.ptd"}


def _devplan(*args, stdout=subprocess.PIPE, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "devplan", *map(str, args)],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        timeout=300,
        env=env,
    )


def test_compile_refuses_to_write_the_program_to_a_terminal(tmp_path):
    """As gzip does: binary on a terminal is noise, and may be read as terminal commands."""
    leader, follower = pty.openpty()
    shown = bytearray()
    reader = threading.Thread(target=_drain, args=(leader, shown), daemon=True)  # a full terminal would block
    reader.start()
    try:
        run = _devplan("compile", ROOT / "samples" / "mlp.pt2", "-o", "-", stdout=follower)
    finally:
        os.close(follower)
    reader.join(10)
    assert run.returncode == 2 and not shown, (run.stderr, bytes(shown[:80]))
    assert run.stderr.count("\n") == 1 and "-o -: standard output is a terminal" in run.stderr, run.stderr


def _drain(fd: int, into: bytearray) -> None:
    try:
        while chunk := os.read(fd, 1 << 16):
            into += chunk
    except OSError:  # the terminal's other end closed
        pass
    finally:
        os.close(fd)


def test_a_data_file_the_program_does_not_read_is_named(programs):
    run = _devplan("inspect", programs["two_io"], "--data", programs["ptd"], "-s", "summary")
    assert run.returncode == 0, run.stderr
    assert (
        f"note: {programs['two_io']} names no external weights; --data {programs['ptd']} is not read" in run.stderr
    ), run.stderr


def test_completion_offers_the_planners_and_backends():
    command = typer.main.get_command(app).commands["compile"]
    context = command.make_context("compile", [], resilient_parsing=True)

    def offered(option: str, incomplete: str = "") -> list[str]:
        param = next(param for param in command.params if option in param.opts)
        return [item.value for item in param.shell_complete(context, incomplete)]

    assert offered("--planner", "greedy") == ["greedy-order", "greedy-size", "greedy-breadth"]
    assert "hill-climb" in offered("--planner") and "best" in offered("--planner")
    assert offered("--backend") == ["xnnpack"]


def test_check_prints_fail_in_colour_only_on_a_colour_terminal(programs):
    args = ["check", str(programs["two_io"]), "--budget", "1=1B"]
    coloured = CliRunner().invoke(app, args, env={"FORCE_COLOR": "1", "NO_COLOR": None, "COLUMNS": "200"})
    assert coloured.exit_code == 1 and "\x1b[" in coloured.stdout and "FAIL" in coloured.stdout, coloured.stdout
    for env in ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, {"FORCE_COLOR": None, "NO_COLOR": None, "TERM": "dumb"}):
        plain = CliRunner().invoke(app, args, env={**env, "COLUMNS": "200"})
        assert plain.exit_code == 1 and "\x1b[" not in plain.stdout and "FAIL  forward buffer 1" in plain.stdout


def test_metadata_that_is_not_json_text_is_told_so(tmp_path):
    binary = tmp_path / "gpt2.pte"  # what json reads as UTF-32: a byte, then three zeros
    binary.write_bytes(b"\x1c\x00\x00\x00ET12\x00\x00\x00\x00" + bytes(range(256)))
    run = _devplan("compile", ROOT / "samples" / "mlp.pt2", "-o", tmp_path / "m.pte", "--metadata", binary)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert f"--metadata {binary}: not JSON text" in run.stderr and "codec" not in run.stderr, run.stderr


def test_counts_agree_with_their_nouns(programs):
    summary = {
        "methods": [
            {
                "name": "forward",
                "counts": {"instructions": 1, "operators": 1},
                "planner": "best",
                "buffers": [],
                "delegates": [],
                "kernels": [],
                "backends": [],
                "attention": [],
                "fallbacks": [],
            }
        ],
        "file": {"constant_bytes": 0, "size": 100},
        "folding": {"choices": []},
        "timings": {"seconds": 1.5},
    }
    first = compile_lines(summary, [], "m.pte", None)[0]
    assert first == "method forward: 1 instruction, 1 operator, planner best", first
    shown = _devplan("inspect", programs["two_io"], "-s", "summary")
    assert "8 instructions, 7 operators, 1 delegate\n" in shown.stdout, shown.stdout


def test_compile_says_what_its_time_counts():
    summary = {"methods": [], "file": {"constant_bytes": 0, "size": 100}, "timings": {"seconds": 3.4321}}
    last = compile_lines(summary, [], "m.pte", None)[-1]
    assert last == "wrote m.pte (100 B); compiling took 3.43 s (loading the model to writing the program)", last


def test_help_points_to_what_a_pip_install_has():
    """docs/ is not in the wheel: help names the JSON Schemas the package ships, each a file
    that is there."""
    import devplan

    named = set()
    for command in typer.main.get_command(app).commands.values():
        for param in command.params:
            assert "docs/" not in (param.help or ""), (command.name, param.help)
            named.update(re.findall(r"devplan/schemas/([\w.]+\.json)", param.help or ""))
    shipped = Path(devplan.__file__).parent / "schemas"
    assert named and all((shipped / name).is_file() for name in named), named


def test_the_fixtures_missing_program_is_one_line(tmp_path):
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_plan.py").write_text(
        "def test_plan(devplan_golden):\n    devplan_golden('../build/model.pte', 'golden/model.json')\n"
    )
    # this checkout's devplan, and its plugin through the entry point of the devplan installed
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 1, run.stdout
    failure = [line for line in run.stdout.splitlines() if "model.pte" in line]
    assert "files.py" not in run.stdout and "../" not in "".join(failure), run.stdout
    assert any("build/model.pte: no such program" in line for line in failure), run.stdout
