"""The read side touches only the FlatBuffer, the segment table and what a command shows (issue
26): a program whose constant segment claims 2 GB (a sparse file, so that the test costs no disk)
is inspected, inspected as JSON, checked against a golden file and diffed, each by the CLI in a
child process whose own peak memory (VmHWM) stays far below the file's size: the weights are
never read. Before, each command read the whole file, twice."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import devplan
from devplan.pte import read_pte
from devplan.pte.writer import Spread, pte_image
from testbed.peak import run_measured

ROOT = Path(__file__).resolve().parents[2]
SEGMENT = 2 << 30
PEAK = 200 << 20  # the commands' own footprint is about 60 MB


@pytest.fixture(scope="module")
def big_program(tmp_path_factory) -> Path:
    """mlp's program with its constant segment grown to 2 GB of zeros the file system never stores."""
    small = read_pte(devplan.compile(ROOT / "samples" / "mlp.pt2").data)
    image = pte_image(small.program, [Spread((), SEGMENT), *small.segments[1:]])
    path = tmp_path_factory.mktemp("big") / "big.pte"
    with open(path, "wb") as file:
        for part in image.parts:
            file.write(part)
        file.truncate(image.size)
    return path


@pytest.mark.parametrize(
    "command",
    [["inspect"], ["inspect", "--json"], ["check"], ["diff", "{big}"], ["check", "--golden", "{golden}", "--update"]],
)
def test_commands_never_read_the_weights(big_program: Path, command: list[str], tmp_path) -> None:
    argv = [part.format(big=big_program, golden=tmp_path / "golden.json") for part in command]
    done, peak = run_measured(
        ["-m", "devplan", argv[0], str(big_program), *argv[1:]], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert big_program.stat().st_size > SEGMENT
    assert peak is not None and peak < PEAK, f"devplan {' '.join(command)} peaked at {peak} bytes"


def test_the_constant_total_comes_from_the_segment_table(big_program: Path) -> None:
    assert devplan.inspect(big_program)["file"]["constant_bytes"] == SEGMENT


@pytest.mark.parametrize("command", [["inspect"], ["inspect", "--json"], ["check"], ["diff", "{big}"]])
def test_reading_a_program_never_imports_torch(big_program: Path, command: list[str]) -> None:
    argv = [part.format(big=big_program) for part in command]
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "devplan", argv[0], str(big_program), *argv[1:]],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "devplan.pte.reader" in imported
    assert not {name for name in imported if name.split(".")[0] in ("torch", "executorch", "transformers")}
