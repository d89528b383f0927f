"""Output as a CI log or a narrow terminal shows it (issue 37, item 5): check's, diff's,
compile's and run's lines wrap at the console's width (rich's: the terminal's, COLUMNS, or 80
in a pipe), inspect's lines carry no padding past their text, and the summary folds a long
list of segments into a count that `-s segments` lists."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

import devplan
from devplan.cli import app
from devplan.inspection.render import render

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("width")
    devplan.compile(ROOT / "samples" / "two_io.pt2", folder / "two_io.pte", delegates=["cuda:0=aten::linear"])
    devplan.compile(ROOT / "samples" / "two_io.pt2", folder / "plain.pte")
    return {"delegated": folder / "two_io.pte", "plain": folder / "plain.pte"}


@pytest.fixture(scope="module")
def program(programs) -> Path:
    return programs["delegated"]


@pytest.mark.parametrize("colour", [{"NO_COLOR": "1"}, {"FORCE_COLOR": "1", "NO_COLOR": None}])
def test_inspect_prints_no_trailing_spaces(program, colour):
    shown = CliRunner().invoke(app, ["inspect", str(program), "-s", "all"], env={"COLUMNS": "120", **colour})
    assert shown.exit_code == 0, shown.output
    padded = [line for line in shown.stdout.splitlines() if re.search(r" (\x1b\[[0-9;]*m)*$", line)]
    assert not padded and "buffers" in shown.stdout, padded[:3]


def _many_segments(program: Path) -> dict:
    doc = devplan.inspect(program)
    doc["file"]["segments"] = [{"index": i, "size": 4096, "offset": 8192 + 4096 * i} for i in range(28)]
    return doc


def _rendered(doc: dict, sections: tuple[str, ...]) -> str:
    out = io.StringIO()
    render(doc, Console(file=out, width=100, color_system=None), sections)
    return out.getvalue()


def test_the_summary_folds_many_segments_into_a_count(program):
    summary = _rendered(_many_segments(program), ("summary",))
    (line,) = [line for line in summary.splitlines() if line.startswith("segments")]
    assert line.split(None, 1)[1].rstrip() == "28 segments, 112.0 KiB (-s segments lists them)", line
    listed = _rendered(_many_segments(program), ("segments",))
    assert all(f"{8192 + 4096 * i}" in listed for i in range(28)) and "4.0 KiB" in listed, listed
    few = _rendered(devplan.inspect(program), ("summary",))
    assert "#0 0 B at byte" in few  # a few segments stay on the summary's line


def _widths(args: list[str], columns: int) -> list[int]:
    """The lines' widths, but the command that accepts a golden's change: it stays whole to copy."""
    shown = CliRunner().invoke(app, args, env={"COLUMNS": str(columns), "NO_COLOR": "1"})
    assert shown.exit_code == 1, shown.output
    return [len(line) for line in shown.stdout.splitlines() if not line.startswith("  to accept this plan: ")]


def test_check_and_diff_lines_wrap_at_the_consoles_width(programs, tmp_path, monkeypatch):
    monkeypatch.chdir(programs["plain"].parent)  # short names: a word (a path) is never cut, however long
    devplan.check_golden("plain.pte", tmp_path / "plain.golden.json", update=True)
    shutil.copy(tmp_path / "plain.golden.json", "plain.golden.json")
    for args in (
        ["check", "two_io.pte", "--budget", "1=1B", "--golden", "plain.golden.json"],
        ["diff", "plain.pte", "two_io.pte"],
    ):
        assert max(_widths(args, 60)) <= 60, args
        assert max(_widths(args, 200)) > 80, args  # not wrapped at 80 whatever the console


def test_a_long_path_is_never_cut(programs, tmp_path):
    golden = tmp_path / ("a" * 90 + ".golden.json")
    shown = CliRunner().invoke(
        app,
        ["check", str(programs["plain"]), "--golden", str(golden), "--update"],
        env={"COLUMNS": "60", "NO_COLOR": "1"},
    )
    assert shown.exit_code == 0 and f"\n        {golden}:\n" in shown.stdout, shown.stdout  # on a line of its own


def test_compile_and_run_lines_wrap_at_the_consoles_width(tmp_path, monkeypatch):
    """compile's summary and run's outputs follow the console's width as check's lines do:
    within 60 columns at 60, none ending in a space, and unwrapped where the console is wide."""
    monkeypatch.chdir(tmp_path)  # short names: a word (a path) is never cut, however long
    shutil.copy(ROOT / "samples" / "two_io.pt2", "two_io.pt2")
    compile_args = ["compile", "two_io.pt2", "-o", "two_io.pte", "--delegate", "cuda:0=aten::linear"]
    shown: dict[tuple[int, str], list[str]] = {}
    for columns in (200, 60):
        for args in (compile_args, ["run", "two_io.pte", "--devices-on-host"]):
            printed = CliRunner().invoke(app, args, env={"COLUMNS": str(columns), "NO_COLOR": "1"})
            assert printed.exit_code == 0, printed.output
            shown[columns, args[0]] = printed.stdout.splitlines()
    for command in ("compile", "run"):
        narrow, wide = shown[60, command], shown[200, command]
        assert max(map(len, narrow)) <= 60 and len(narrow) > len(wide), narrow
        assert not [line for line in narrow + wide if line.endswith(" ")], narrow + wide
        assert not [line for line in wide if line.startswith(" " * 8)], wide  # nothing wrapped at 200
    assert max(map(len, shown[200, "compile"])) > 80  # not wrapped at 80 whatever the console


@pytest.mark.parametrize("columns", [0, 1, 4])
def test_a_terminal_a_few_columns_wide_still_gets_every_table(programs, columns):
    """At 4 columns or fewer, `inspect -s tensors` never returned (a cell folded at width 0 or
    less never got shorter), and at 0 every command printed nothing. Each finishes and prints
    its tables at devplan's narrowest width (a child process with a timeout, so that a loop
    fails the test instead of hanging it)."""
    import os
    import subprocess
    import sys

    from devplan.inspection.tables import MIN_FOLD, fold

    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1"}
    shown = {}
    for args in (["inspect", programs["delegated"], "-s", "all"], ["check", programs["plain"]]):
        done = subprocess.run(
            [sys.executable, "-m", "devplan", *map(str, args)], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 0 and not done.stderr, (args, done.stderr)
        shown[args[0]] = done.stdout
    assert "\ntensors\n" in shown["inspect"] and "delegate_0" in shown["inspect"], shown["inspect"]
    assert shown["check"].startswith("ok"), shown["check"]
    assert fold(("x" * 25,), columns - 4) == ["x" * MIN_FOLD, "x" * MIN_FOLD, "x" * 5]


def test_the_delegates_table_fits_80_columns_as_the_others_do(program):
    """Issue 55: the delegates table of a device program was 141 columns at 80 while every other
    table wrapped; its compile specs go under each row, as the tensors' sources do."""
    narrow = CliRunner().invoke(
        app, ["inspect", str(program), "-s", "delegates"], env={"COLUMNS": "80", "NO_COLOR": "1"}
    )
    lines = narrow.stdout.splitlines()
    assert max(map(len, lines)) <= 80, lines
    row = lines.index(next(line for line in lines if line.startswith("0  DevplanDelegate")))
    assert lines[row + 1].startswith("    target_device=cuda:0")
    wide = CliRunner().invoke(
        app, ["inspect", str(program), "-s", "delegates"], env={"COLUMNS": "200", "NO_COLOR": "1"}
    )
    assert any(
        line.startswith("0  DevplanDelegate") and "target_device=cuda:0" in line for line in wide.stdout.splitlines()
    )
