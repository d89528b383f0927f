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
    devplan_golden("build/model.pte", "golden/model.json")  # both from this file's folder


def test_model_plan_with_the_helper():
    assert_matches_golden(HERE / "build" / "model.pte", HERE / "golden" / "helper.json", tolerance="1%")
'''


def pytest_in(project: Path, *args: str, cwd: Path | None = None, **variables: str) -> subprocess.CompletedProcess:
    # PYTHONPATH and the rest pass on, so the subprocess imports this checkout's devplan
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "DEVPLAN_UPDATE_GOLDEN")} | variables
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
                          cwd=cwd or project, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_a_user_project_records_passes_and_fails_with_the_diff(tmp_path):
    project = tmp_path / "project"
    (project / "build").mkdir(parents=True)
    (project / "test_plan.py").write_text(USER_TEST)
    model = project / "build" / "model.pte"
    devplan.compile(ROOT / "samples" / "two_io.pt2", model)

    missing = pytest_in(project)
    assert missing.returncode == 1 and "no golden file yet" in missing.stdout and "--devplan-update-golden" in missing.stdout

    # the flag reaches the helper too, the golden folder is created, and the summary lists both;
    # run from elsewhere, the fixture still finds the program beside its test file
    recorded = pytest_in(project, "--devplan-update-golden", str(project), cwd=tmp_path)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert sorted(p.name for p in (project / "golden").iterdir()) == ["helper.json", "model.json"]
    assert "wrote 2 golden file(s):" in recorded.stdout and "\n  project/golden/model.json" in recorded.stdout, recorded.stdout

    again = pytest_in(project)
    assert again.returncode == 0 and "2 passed" in again.stdout and "devplan goldens" not in again.stdout, again.stdout

    devplan.compile(ROOT / "samples" / "two_io.pt2", model, delegates=["cuda:0=aten::linear"])
    changed = pytest_in(project)
    assert changed.returncode == 1 and "2 failed" in changed.stdout, changed.stdout
    for line in ("golden/model.json: the program no longer plans as recorded",
                 "FAIL  buffer 2 (cuda:0) added: 512 B", "FAIL  operators removed: aten::linear.out",
                 "model.json -> model.pte: ", "helper.json -> model.pte: ", "(tolerance 1%)"):
        assert line in changed.stdout, (line, changed.stdout)


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_the_variable_updates_and_a_smaller_plan_is_noted(tmp_path):
    project = tmp_path / "project"
    (project / "build").mkdir(parents=True)
    (project / "test_plan.py").write_text(USER_TEST)
    devplan.compile(ROOT / "samples" / "two_io.pt2", project / "build" / "model.pte")

    recorded = pytest_in(project, DEVPLAN_UPDATE_GOLDEN="1")
    assert recorded.returncode == 0 and "wrote 2 golden file(s):" in recorded.stdout, recorded.stdout + recorded.stderr

    golden = project / "golden" / "model.json"  # as if the program planned more when it was recorded
    golden.write_text(golden.read_text().replace('"size": 768', '"size": 1024'))
    smaller = pytest_in(project)
    assert smaller.returncode == 0 and "2 passed" in smaller.stdout, smaller.stdout
    assert "1 program(s) now plan smaller than their golden" in smaller.stdout, smaller.stdout
    assert "\n  golden/model.json: forward buffer 1 (cpu) size 1.0 KiB -> 768 B" in smaller.stdout, smaller.stdout
