"""The pytest plugin as a user's project meets it: a throwaway project whose one test calls
the `devplan_golden` fixture and the `assert_matches_golden` helper, run by pytest in a
subprocess (the plugin comes from devplan's `pytest11` entry point, as it would there)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import devplan

ROOT = Path(__file__).resolve().parents[1]

USER_TEST = """
from pathlib import Path

from devplan.testing import assert_matches_golden

HERE = Path(__file__).parent


def test_model_plan(devplan_golden):
    devplan_golden("build/model.pte", "golden/model.json")  # both from this file's folder


def test_model_plan_with_the_helper():
    assert_matches_golden(HERE / "build" / "model.pte", HERE / "golden" / "helper.json", tolerance="1%")
"""


def pytest_in(project: Path, *args: str, cwd: Path | None = None, **variables: str) -> subprocess.CompletedProcess:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "DEVPLAN_UPDATE_GOLDEN")
    } | variables
    # this checkout's devplan (and plugin, which the installed devplan's entry point names), wherever it runs
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=cwd or project,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_a_user_project_records_passes_and_fails_with_the_diff(tmp_path):
    project = tmp_path / "project"
    (project / "build").mkdir(parents=True)
    (project / "test_plan.py").write_text(USER_TEST)
    model = project / "build" / "model.pte"
    devplan.compile(ROOT / "samples" / "two_io.pt2", model)

    missing = pytest_in(project)
    assert (
        missing.returncode == 1
        and "no golden file yet" in missing.stdout
        and "--devplan-update-golden" in missing.stdout
    )

    # the flag reaches the helper too, the golden folder is created, and the summary lists both;
    # run from elsewhere, the fixture still finds the program beside its test file
    recorded = pytest_in(project, "--devplan-update-golden", str(project), cwd=tmp_path)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert sorted(p.name for p in (project / "golden").iterdir()) == ["helper.json", "model.json"]
    assert "wrote 2 golden file(s):" in recorded.stdout and "\n  project/golden/model.json" in recorded.stdout, (
        recorded.stdout
    )

    again = pytest_in(project)
    assert again.returncode == 0 and "2 passed" in again.stdout and "devplan goldens" not in again.stdout, again.stdout

    devplan.compile(ROOT / "samples" / "two_io.pt2", model, delegates=["cuda:0=aten::linear"])
    changed = pytest_in(project)
    assert changed.returncode == 1 and "2 failed" in changed.stdout, changed.stdout
    for line in (
        "golden/model.json: the program no longer plans as recorded",
        "FAIL  buffer 2 (cuda:0) added: 1.0 KiB",
        "FAIL  operators removed: aten::linear.out",
        "model.json -> model.pte: ",
        "helper.json -> model.pte: ",
        "(tolerance 1%)",
    ):
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
    golden.write_text(
        golden.read_text()
        .replace('"size": 768', '"size": 1024')
        .replace('"size_text": "768 B"', '"size_text": "1.0 KiB"')
    )
    smaller = pytest_in(project)
    assert smaller.returncode == 0 and "2 passed" in smaller.stdout, smaller.stdout
    assert "1 program(s) now plan smaller than their golden" in smaller.stdout, smaller.stdout
    assert "\n  golden/model.json: forward buffer 1 (cpu) size 1.0 KiB -> 768 B" in smaller.stdout, smaller.stdout


NAMED_TESTS = """
import pytest


def test_model(devplan_golden):
    devplan_golden("build/model.pte")


@pytest.mark.parametrize("size", ["small"])
def test_twice(devplan_golden, size):
    devplan_golden("build/model.pte")
    devplan_golden("build/model.pte", tolerance="1%")
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> dict[str, bytes]:
    """two_io's program as compiled, and with one delegate (a plan that differs)."""
    folder = tmp_path_factory.mktemp("models")
    devplan.compile(ROOT / "samples" / "two_io.pt2", folder / "plain.pte")
    devplan.compile(ROOT / "samples" / "two_io.pt2", folder / "delegated.pte", delegates=["cuda:0=aten::linear"])
    return {name: (folder / f"{name}.pte").read_bytes() for name in ("plain", "delegated")}


def _named_project(tmp_path: Path, program: bytes) -> Path:
    project = tmp_path / "project"
    (project / "build").mkdir(parents=True)
    (project / "test_plan.py").write_text(NAMED_TESTS)
    (project / "build" / "model.pte").write_bytes(program)
    return project


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_the_fixture_names_each_golden_from_the_test_and_reports_those_no_test_reads(tmp_path, model):
    project = _named_project(tmp_path, model["plain"])
    recorded = pytest_in(project, "--devplan-update-golden")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    kept = project / "golden" / "test_plan"
    assert sorted(p.name for p in kept.iterdir()) == [
        "test_model.golden.json",
        "test_twice[small].2.golden.json",
        "test_twice[small].golden.json",
    ]
    again = pytest_in(project)
    assert again.returncode == 0 and "2 passed" in again.stdout and "devplan goldens" not in again.stdout, again.stdout

    # a test removed leaves its golden behind: listed, and a failure under --devplan-strict-goldens
    (project / "test_plan.py").write_text(NAMED_TESTS.replace("def test_model(", "def _not_a_test("))
    listed = pytest_in(project)
    assert listed.returncode == 0, listed.stdout
    assert (
        "1 golden file(s) no test read" in listed.stdout
        and "\n  golden/test_plan/test_model.golden.json" in listed.stdout
    )
    strict = pytest_in(project, "--devplan-strict-goldens")
    assert strict.returncode == 1 and "1 passed" in strict.stdout and "test_model.golden.json" in strict.stdout
    # without xdist the plugin loads all the same (its xdist hook is optional)
    alone = pytest_in(project, "-p", "no:xdist")
    assert alone.returncode == 0 and "test_model.golden.json" in alone.stdout, alone.stdout + alone.stderr
    # under xdist, as the workers saw it (each sends what it read to the controller)
    spread = pytest_in(project, "--devplan-strict-goldens", "-n", "2")
    assert spread.returncode == 1 and "\n  golden/test_plan/test_model.golden.json" in spread.stdout, spread.stdout
    # a test that reads one golden fewer leaves that one unread
    (project / "test_plan.py").write_text(
        NAMED_TESTS.replace('    devplan_golden("build/model.pte", tolerance="1%")\n', "")
    )
    fewer = pytest_in(project, "--devplan-strict-goldens")
    assert fewer.returncode == 1 and "test_twice[small].2.golden.json" in fewer.stdout, fewer.stdout
    # but where only some of the file's tests ran, the others' goldens are not anyone's to judge
    picked = pytest_in(project, "--devplan-strict-goldens", "-k", "model")
    assert picked.returncode == 0 and "no test read" not in picked.stdout, picked.stdout


ANY_NAMES = """
def test_model(devplan_golden):
    devplan_golden("build/model.pte", "golden/model.json")


def test_named(devplan_golden):
    devplan_golden("build/model.pte")
"""


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_every_golden_under_the_folder_that_no_test_read_is_reported(tmp_path, model):
    """Not only the fixture's names: a golden a test named by path, or one in the folder of a
    test file since removed, is reported where the run covered the folder's tests whole (a
    test that did not run through might be the one that reads a golden named by path)."""
    project = _named_project(tmp_path, model["plain"])
    (project / "test_plan.py").write_text(ANY_NAMES)
    assert pytest_in(project, "--devplan-update-golden").returncode == 0
    golden = project / "golden"
    (golden / "test_gone").mkdir()
    (golden / "models").mkdir()  # a folder of goldens named by path, not a test file's
    shutil.copy(golden / "model.json", golden / "old.json")
    shutil.copy(golden / "model.json", golden / "models" / "big.golden.json")
    shutil.copy(golden / "model.json", golden / "test_gone" / "test_x.golden.json")
    (golden / "notes.json").write_text('{"not": "a devplan golden"}\n')

    listed = pytest_in(project)
    assert listed.returncode == 0 and "2 passed" in listed.stdout, listed.stdout
    assert "3 golden file(s) no test read" in listed.stdout, listed.stdout
    for name in ("models/big.golden.json", "old.json", "test_gone/test_x.golden.json"):
        assert f"\n  golden/{name}\n" in listed.stdout, (name, listed.stdout)
    assert "notes.json" not in listed.stdout and "golden/model.json" not in listed.stdout, listed.stdout
    strict = pytest_in(project, "--devplan-strict-goldens", "-n", "2")  # under xdist too
    assert strict.returncode == 1 and "3 golden file(s) no test read" in strict.stdout, strict.stdout
    # one test file named: others beside it, not run, may read any of them
    one = pytest_in(project, "--devplan-strict-goldens", "test_plan.py")
    assert one.returncode == 0 and "no test read" not in one.stdout, one.stdout
    picked = pytest_in(project, "--devplan-strict-goldens", "-k", "model")
    assert picked.returncode == 0 and "no test read" not in picked.stdout, picked.stdout
    ignored = pytest_in(project, "--devplan-strict-goldens", "--ignore", "build")
    assert ignored.returncode == 0 and "no test read" not in ignored.stdout, ignored.stdout
    # a test that was skipped may read a golden named by path; none reads a removed file's
    (project / "test_later.py").write_text('import pytest\n\n\ndef test_later():\n    pytest.skip("not here")\n')
    skipped = pytest_in(project, "--devplan-strict-goldens")
    assert skipped.returncode == 1 and "1 golden file(s) no test read" in skipped.stdout, skipped.stdout
    assert "\n  golden/test_gone/test_x.golden.json\n" in skipped.stdout, skipped.stdout
    assert "old.json" not in skipped.stdout and "big.golden.json" not in skipped.stdout, skipped.stdout


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_force_regen_rewrites_what_differs_and_fails(tmp_path, model):
    project = _named_project(tmp_path, model["plain"])
    assert pytest_in(project, "--devplan-update-golden").returncode == 0
    golden = project / "golden" / "test_plan" / "test_model.golden.json"
    before = golden.read_text()
    same = pytest_in(project, "--devplan-force-regen")
    assert same.returncode == 0 and "2 passed" in same.stdout and "devplan goldens" not in same.stdout, same.stdout

    (project / "build" / "model.pte").write_bytes(model["delegated"])
    regen = pytest_in(project, "--devplan-force-regen")
    assert regen.returncode == 1 and "2 failed" in regen.stdout, regen.stdout
    assert (
        "rewritten by --devplan-force-regen, as the program plans now; review the change and commit it" in regen.stdout
    )
    assert golden.read_text() != before
    # a test that checks two goldens rewrites both before it fails, so one run regenerates them all
    assert "wrote 3 golden file(s):" in regen.stdout, regen.stdout
    for name in ("test_model.golden.json", "test_twice[small].golden.json", "test_twice[small].2.golden.json"):
        assert f"\n  golden/test_plan/{name}" in regen.stdout, (name, regen.stdout)
    assert "2 golden files rewritten by --devplan-force-regen; review the changes" in regen.stdout, regen.stdout
    again = pytest_in(project, "--devplan-force-regen")
    assert again.returncode == 0 and "2 passed" in again.stdout and "devplan goldens" not in again.stdout, again.stdout
    after = pytest_in(project)
    assert after.returncode == 0 and "2 passed" in after.stdout, after.stdout


FAILS_AFTER = """
def test_then_fails(devplan_golden):
    devplan_golden("build/model.pte")
    assert False, "the test's own failure"
"""


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_force_regen_keeps_the_tests_own_failure(tmp_path, model):
    """A test failing after force-regen rewrote its golden fails with its own error, the
    golden's rewrite said beside it."""
    project = _named_project(tmp_path, model["delegated"])
    (project / "test_plan.py").write_text(FAILS_AFTER)
    regen = pytest_in(project, "--devplan-force-regen")
    assert regen.returncode == 1 and "1 failed" in regen.stdout, regen.stdout
    assert "the test's own failure" in regen.stdout and "written by --devplan-force-regen" in regen.stdout
    assert (project / "golden" / "test_plan" / "test_then_fails.golden.json").exists()


def test_one_update_flag_name_everywhere():
    """Users and devplan's own suite rewrite goldens with --devplan-update-golden; the suite's
    old --update-golden is a hidden alias of it, named in no instructions."""
    import re

    for path in (ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "tests").rglob("*.py"))):
        if path.name in ("conftest.py", "test_pytest_plugin.py"):
            continue
        assert not re.search(r"(?<!devplan)-update-golden", path.read_text()), path
    shown = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "--devplan-update-golden" in shown and "--update-golden" not in shown.replace("--devplan-update-golden", "")


def test_the_fixtures_missing_program_is_one_line(tmp_path):
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_plan.py").write_text(
        "def test_plan(devplan_golden):\n    devplan_golden('../build/model.pte', 'golden/model.json')\n"
    )
    # this checkout's devplan, and its plugin through the entry point of the devplan installed
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 1, run.stdout
    failure = [line for line in run.stdout.splitlines() if "model.pte" in line]
    assert "files.py" not in run.stdout and "../" not in "".join(failure), run.stdout
    assert any("build/model.pte: no such program" in line for line in failure), run.stdout
