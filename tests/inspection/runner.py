"""Running `devplan` the two ways the tests need: in process, and as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from devplan.cli import app
from devplan.errors import DevplanError

REPO = Path(__file__).resolve().parents[2]


def invoke(*args: str):
    """`devplan ARGS` in process; the result has exit_code, stdout and exception."""
    return CliRunner().invoke(app, list(args))


def run_devplan(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`devplan ARGS` in a fresh interpreter through devplan.cli.main, as the console script runs it."""
    code = "import sys; from devplan.cli import main; sys.argv[0] = 'devplan'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, env=env, timeout=60
    )


def one_line(result, *needles: str) -> str:
    """The one-line DevplanError an in-process command ended with, holding each needle."""
    assert isinstance(result.exception, DevplanError), (result.exception, result.output)
    message = str(result.exception)
    assert "\n" not in message and all(needle in message for needle in needles), message
    return message
