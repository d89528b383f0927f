"""The `devplan` command, one module per command over the Python functions it calls: parse
options, call a stage, render. The app and what commands share are in app.py, the entry point
and its exit codes in exits.py; `devplan --help` lists the commands in Group.ORDER."""

from devplan.cli import compile, gates, generate, inspect, run  # noqa: F401  (registers the commands)
from devplan.cli.app import app
from devplan.cli.exits import main

__all__ = ["app", "main"]
