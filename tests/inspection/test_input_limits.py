"""Sizes past a float (issue 52, item 7): a --budget of 400 digits is a size like any other."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import devplan
from devplan.cli import app
from devplan.errors import DevplanError
from devplan.units import size_text

ROOT = Path(__file__).resolve().parents[2]
HUGE = "9" * 400


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
