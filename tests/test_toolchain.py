"""Issue 58: the README's test command passes on a fresh machine because what it installs is
what the suite last passed with. Its steps are .ci/run's, in order; every tool of the test
extra is pinned to one version."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("pytest", "pytest-xdist", "hypothesis", "ruff", "mypy", "jsonschema", "transformers")


def _readme_test_command() -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)
    return [shlex.split(step) for step in blocks[1].split(" && ")]


def _ci_commands() -> list[list[str]]:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return [shlex.split(line, comments=True) for line in lines if line.startswith(("pip ", "python -m pytest"))]


def test_ci_runs_the_readme_test_command_step_by_step():
    readme = _readme_test_command()
    ci = _ci_commands()
    # .ci/run adds only quiet output and the slowest tests' report to each step
    quiet = [[word for word in step if word not in ("--quiet", "--durations=30")] for step in ci]
    assert quiet == readme


def test_ci_installs_into_an_environment_of_its_own():
    text = (ROOT / ".ci" / "run").read_text()
    venv = text.index("python -m venv")
    assert venv < text.index("source ") < text.index("pip install")
    assert "--user" not in text and "--system-site-packages" not in text


def test_every_test_tool_is_pinned_to_one_version():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    pins = dict(re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", spec).groups() for spec in extra)
    assert set(TOOLS) <= set(pins), extra
    assert all(version[0].isdigit() for version in pins.values())
