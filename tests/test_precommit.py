"""The pre-commit configuration runs what CI runs before its tests: each `python -m ruff` and
`python -m mypy` line of .ci/run is one local hook's entry, in the same order, over the whole
tree (no file names passed), with the tools the test extra installs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_hooks_are_what_ci_runs_before_its_tests():
    yaml = pytest.importorskip("yaml")  # transformers, in the test extra, brings it
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    (repo,) = config["repos"]
    assert repo["repo"] == "local"
    hooks = repo["hooks"]
    assert all(hook["language"] == "system" and hook["pass_filenames"] is False for hook in hooks)
    ci = [
        re.sub(r"\s+#.*", "", line).strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.startswith(("python -m ruff", "python -m mypy"))
    ]
    assert [hook["entry"] for hook in hooks] == ci
