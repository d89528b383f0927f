"""What reaches a user's terminal: never a program's bytes, FAIL in colour only where colour is
wanted, a file's escape sequences shown escaped, one line for a .ptd the program does not read,
for metadata that is not JSON text and for Ctrl-C; counts that agree with their nouns, and
compile's time saying what it counts."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

import devplan
from devplan.cli import app
from devplan.inspection.reports import compile_lines
from tests.inspection.runner import invoke

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"


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


def test_escape_sequences_from_files_reach_check_and_diff_output_escaped(tmp_path):
    """An operator name, a delegate id and a device from a golden file, and a method name in
    a program, holding ESC [31m and BEL."""
    doc = json.loads((GOLDEN / "two_io_cuda.golden.json").read_text())
    method = doc["methods"][0]
    method["operators"].append("evil\x1b[31m::op\x07")
    method["delegates"][0]["id"] = "Back\x1b[2Jend"
    method["buffers"][0]["device"] = "cpu\x1b]0;title\x07"
    odd = tmp_path / "odd.golden.json"
    odd.write_text(json.dumps(doc))
    runs = [
        invoke("diff", str(GOLDEN / "two_io_cuda.golden.json"), str(odd)),
        invoke("diff", str(odd), str(GOLDEN / "two_io_cuda.golden.json")),
    ]
    program = tmp_path / "two_io_cuda.pte"
    devplan.compile(GOLDEN.parent.parent / "samples" / "two_io.pt2", program, delegates=["cuda:0=aten::linear"])
    runs.append(invoke("check", str(program), "--golden", str(odd)))
    for run in runs:
        assert run.exit_code == 1, run.output
        assert "\x1b" not in run.output and "\x07" not in run.output, run.output
        assert "\\x1b[31m" in run.output or "\\x1b[2J" in run.output, run.output


def test_ctrl_c_exits_130_with_one_line(monkeypatch, capsys):
    from devplan.cli import exits as cli

    def interrupted(**_):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "app", interrupted)
    monkeypatch.setattr("sys.argv", ["devplan", "check", "x.pte"])
    monkeypatch.setattr("signal.signal", lambda *_: None)  # leave pytest's handlers alone
    with pytest.raises(SystemExit) as done:
        cli.main()
    assert done.value.code == 130 and capsys.readouterr().err == "devplan: interrupted\n"
