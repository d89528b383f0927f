"""The pytest plugin as a user's project meets it: a throwaway project whose one test calls
the `devplan_golden` fixture and the `assert_matches_golden` helper, run by pytest in a
subprocess (the plugin comes from devplan's `pytest11` entry point, as it would there)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import devplan

ROOT = Path(__file__).resolve().parents[1]

USER_TEST = '''
from pathlib import Path

from devplan.testing import assert_matches_golden

HERE = Path(__file__).parent


def test_model_plan(devplan_golden):
    devplan_golden(HERE / "build" / "model.pte", "golden/model.json")


def test_model_plan_with_the_helper(request):
    assert_matches_golden(HERE / "build" / "model.pte", HERE / "golden" / "helper.json",
                          update=request.config.getoption("--devplan-update-golden"), tolerance="1%")
'''


def pytest_in(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args], cwd=project,
                          capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_a_user_project_records_passes_and_fails_with_the_diff(tmp_path):
    project = tmp_path / "project"
    (project / "build").mkdir(parents=True)
    (project / "golden").mkdir()
    (project / "test_plan.py").write_text(USER_TEST)
    model = project / "build" / "model.pte"
    devplan.compile(ROOT / "samples" / "two_io.pt2", model)

    missing = pytest_in(project)
    assert missing.returncode == 1 and "no golden file yet" in missing.stdout and "--devplan-update-golden" in missing.stdout

    recorded = pytest_in(project, "--devplan-update-golden")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert sorted(p.name for p in (project / "golden").iterdir()) == ["helper.json", "model.json"]

    again = pytest_in(project)
    assert again.returncode == 0 and "2 passed" in again.stdout, again.stdout

    devplan.compile(ROOT / "samples" / "two_io.pt2", model, delegates=["cuda:0=aten::linear"])
    changed = pytest_in(project)
    assert changed.returncode == 1 and "2 failed" in changed.stdout, changed.stdout
    for line in ("golden/model.json: the program no longer plans as recorded",
                 "FAIL  buffer 2 (cuda:0) added: 512 B", "FAIL  operators removed: aten::linear.out",
                 "model.json -> model.pte: ", "helper.json -> model.pte: ", "(tolerance 1%)"):
        assert line in changed.stdout, (line, changed.stdout)
