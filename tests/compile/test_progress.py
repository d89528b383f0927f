"""A compile shows its stage and the bytes written on stderr when a person watches (a
terminal), and nothing on a pipe or with --quiet (issue 26)."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import devplan
from devplan.cli.progress import compile_progress
from devplan.files import write_atomic

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "samples" / "mlp.pt2"


def _terminal() -> tuple[Console, io.StringIO]:
    screen = io.StringIO()
    return Console(file=screen, force_terminal=True, width=120), screen


def test_the_progress_names_the_stage_and_the_bytes_written():
    console, screen = _terminal()
    with compile_progress(False, console) as progress:
        progress.stage("emit")
        progress.written(3 << 20, 8 << 20)
    assert "devplan compile: write 3.0 MiB of 8.0 MiB" in screen.getvalue()


def test_the_progress_counts_the_inputs_quantizing_calibrates_on():
    """--quantize on 100,000 calibration inputs showed nothing for minutes (issue 52, finding 5)."""
    console, screen = _terminal()
    with compile_progress(False, console) as progress:
        progress.stage("quantize")
        progress.calibrated(12, 1_000)
    assert "devplan compile: quantize, calibrating on input 12 of 1,000" in screen.getvalue()


def test_nothing_is_shown_off_a_terminal_or_when_quiet():
    piped = io.StringIO()
    console, screen = _terminal()
    for quiet, shown_on, seen in ((False, Console(file=piped), piped), (True, console, screen)):
        with compile_progress(quiet, shown_on) as progress:
            progress.stage("emit")
            progress.written(1, 2)
        assert seen.getvalue() == ""


def test_compile_reports_each_stage_and_the_bytes_as_they_go_out(tmp_path):
    stages, written = [], []
    result = devplan.compile(
        MLP, tmp_path / "mlp.pte", on_stage=stages.append, on_written=lambda done, total: written.append((done, total))
    )
    size = (tmp_path / "mlp.pte").stat().st_size
    assert stages[0] == "load" and stages[-1] == "write"
    assert written and written[-1] == (size, size) == (result.summary()["file"]["size"],) * 2
    assert [done for done, _ in written] == sorted({done for done, _ in written})


def test_a_large_piece_is_written_in_steps(tmp_path, monkeypatch):
    monkeypatch.setattr("devplan.files._STEP", 1000)
    written: list[int] = []
    write_atomic(tmp_path / "f", [b"x" * 10, bytearray(2500), b"y"], on_written=written.append)
    assert written == [10, 1010, 2010, 2510, 2511]
    assert (tmp_path / "f").read_bytes() == b"x" * 10 + bytes(2500) + b"y"


def _compile_on_a_terminal(tmp_path, *options: str) -> tuple[subprocess.CompletedProcess, str]:
    """devplan compile with stderr a pseudo-terminal: what it printed there, and the run."""
    leader, follower = pty.openpty()
    with open(os.devnull, "rb") as nothing:
        child = subprocess.Popen(
            [sys.executable, "-m", "devplan", "compile", str(MLP), "-o", str(tmp_path / "m.pte"), *options],
            stdin=nothing,
            stdout=subprocess.PIPE,
            stderr=follower,
            cwd=ROOT,
            env={**os.environ, "TERM": "xterm", "COLUMNS": "120"},
        )
    os.close(follower)
    screen = b""
    try:  # read as it goes, so that a full terminal never stops the child
        while chunk := os.read(leader, 1 << 16):
            screen += chunk
    except OSError:  # the child closed its end: all read
        pass
    os.close(leader)
    out = child.stdout.read() if child.stdout else b""
    done = subprocess.CompletedProcess(child.args, child.wait(timeout=300), out)
    return done, screen.decode(errors="replace")


@pytest.mark.sweep  # three fresh compiles; the fast tier keeps the tests above
def test_the_cli_shows_progress_on_a_terminal_only_unless_quiet(tmp_path):
    shown, screen = _compile_on_a_terminal(tmp_path)
    assert shown.returncode == 0 and "devplan compile: " in screen and b"wrote" in shown.stdout
    quiet, screen = _compile_on_a_terminal(tmp_path, "--quiet")
    assert quiet.returncode == 0 and screen == "" and quiet.stdout == b""
    piped = subprocess.run(
        [sys.executable, "-m", "devplan", "compile", str(MLP), "-o", str(tmp_path / "p.pte")],
        capture_output=True,
        cwd=ROOT,
        timeout=300,
    )
    assert piped.returncode == 0 and piped.stderr == b""
