"""Sizes past a float and streams without end (issue 52, item 7): a --budget of 400 digits
is a size like any other, and a program piped in is read no further than its first bytes allow."""

from __future__ import annotations

import io
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import devplan
from devplan.cli import app
from devplan.cli.app import program_source
from devplan.cli.gates import _stdin_side
from devplan.errors import DevplanError
from devplan.units import size_text

ROOT = Path(__file__).resolve().parents[2]
HUGE = "9" * 400
TOO_FAR = 64 << 20  # a test stream refuses to be read further: before the fix, reading went on to 16 GiB


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("limits") / "mlp.pte"
    devplan.compile(ROOT / "samples" / "mlp.pt2", path)
    return path


def test_a_size_past_a_float_is_printed():
    assert size_text(int(HUGE) << 40) == f"{HUGE}.0 TiB"
    assert size_text(-(3 << 39)) == "-1.5 TiB" and size_text(1280) == "1.2 KiB"  # half to even, as before


def test_a_budget_past_a_float_is_a_budget(program):
    # it was an internal error (OverflowError: integer division result too large for a float)
    result = CliRunner().invoke(app, ["check", str(program), "--budget", f"cpu={HUGE}TiB"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert f"{HUGE}.0 TiB" in result.output, result.output
    diff = CliRunner().invoke(app, ["diff", str(program), str(program), "--tolerance", f"{HUGE}TiB"])
    assert diff.exit_code == 0, (diff.output, diff.exception)


def test_a_percentage_past_a_float_is_one_line(program):
    result = CliRunner().invoke(app, ["diff", str(program), str(program), "--tolerance", f"{HUGE}%"])
    assert isinstance(result.exception, DevplanError), result.exception
    assert "a percentage too large" in str(result.exception), result.exception


class Endless(io.RawIOBase):
    """`start`'s bytes, then zeros without end (as /dev/zero); it counts what was read."""

    def __init__(self, start: bytes = b"") -> None:
        self.start, self.taken = start, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.taken > TOO_FAR:
            raise AssertionError(f"read {self.taken} bytes of an endless stream")
        n = len(buffer)
        kept = self.start[self.taken : self.taken + n]
        buffer[:n] = kept + bytes(n - len(kept))
        self.taken += n
        return n


def _piped(monkeypatch, stream: Endless) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(stream)))


@pytest.mark.parametrize("reader", ["program_source", "diff_side"])
def test_a_piped_stream_that_cannot_begin_a_program_is_refused_at_once(monkeypatch, reader):
    # inspect - < /dev/zero read 16 GiB before refusing it (5.5 GB where memory ran out first)
    zeros = Endless()
    _piped(monkeypatch, zeros)
    with pytest.raises(DevplanError, match=r"^<stdin>: not an ET12 program \(file identifier b'\\x00"):
        program_source(Path("-")) if reader == "program_source" else _stdin_side(None)
    assert zeros.taken <= 1 << 20, zeros.taken


def test_a_piped_program_is_read_to_its_headers_bound(monkeypatch, program):
    data = program.read_bytes()
    stream = Endless(data)
    _piped(monkeypatch, stream)
    with pytest.raises(DevplanError, match=f"^<stdin>: more than the {len(data)} bytes its header accounts for"):
        program_source(Path("-"))
    assert stream.taken <= len(data) + (1 << 20), stream.taken
    alone = CliRunner().invoke(app, ["inspect", "-", "--json"], input=data)
    assert alone.exit_code == 0, (alone.output, alone.exception)


def test_inspect_refuses_dev_zero_at_once():
    """As a user runs it: one line, exit 2, within a memory limit the old read ran into."""
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # noqa: E731
    with open("/dev/zero", "rb") as zeros:
        done = subprocess.run(
            [sys.executable, "-c", "from devplan.cli import main; main()", "inspect", "-"],
            stdin=zeros,
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=limit,
            cwd=ROOT,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("devplan: error: <stdin>: not an ET12 program"), done.stderr
