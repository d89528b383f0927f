"""The compile command's help names exactly the planner's algorithms."""

import re

from typer.testing import CliRunner

from devplan.cli import app
from devplan.planning import ALGORITHMS


def test_help_lists_every_algorithm():
    text = CliRunner().invoke(app, ["compile", "--help"], terminal_width=200).output
    flat = re.sub(r"[\s│]+", " ", text)
    for name in ALGORITHMS:
        assert re.search(rf"\b{re.escape(name)}\b", flat), name
