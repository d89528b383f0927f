"""devplan's pytest plugin, registered through the `pytest11` entry point: the
`--devplan-update-golden` option, the `devplan_golden` fixture, and a terminal summary of
the goldens written and of those whose program now plans smaller.

    def test_model_plan(devplan_golden):
        devplan_golden("build/model.pte", "golden/model.json")   # both relative to this test file"""
from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest


def pytest_addoption(parser) -> None:
    parser.getgroup("devplan").addoption(
        "--devplan-update-golden", action="store_true",
        help="write the golden files that devplan_golden and assert_matches_golden compare programs with, "
             "instead of comparing (DEVPLAN_UPDATE_GOLDEN=1 does the same)")


def pytest_configure(config) -> None:
    # the session is module state so that assert_matches_golden, which has no pytest request,
    # sees the flag and reports what it wrote
    from devplan import testing

    testing.session = testing.GoldenSession(update=config.getoption("--devplan-update-golden"))


def pytest_unconfigure(config) -> None:
    from devplan import testing

    testing.session = None


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    from devplan import testing

    found = testing.session
    if found is None or not (found.written or found.smaller):
        return
    terminalreporter.section("devplan goldens")
    here = config.invocation_params.dir

    shown = functools.partial(_shown, here=here)

    if found.written:
        terminalreporter.write_line(f"wrote {len(found.written)} golden file(s):")
        for path in found.written:
            terminalreporter.write_line(f"  {shown(path)}")
    if found.smaller:
        terminalreporter.write_line(f"{len(found.smaller)} program(s) now plan smaller than their golden; rerun "
                                    f"with --devplan-update-golden to record it, so growth back is caught:")
        for path, what in found.smaller:
            terminalreporter.write_line(f"  {shown(path)}: {what}")


def _shown(path: str | os.PathLike, here: Path) -> str:
    """`path` relative to where pytest ran, as pytest names test files (else as it is)."""
    return os.path.relpath(path, here) if Path(path).resolve().is_relative_to(here.resolve()) else os.fspath(path)


@pytest.fixture
def devplan_golden(request):
    """A callable (pte, golden, tolerance=None, exact=False) that asserts the program plans as
    the golden file records, or writes the file under --devplan-update-golden. Relative paths,
    the program's and the golden's, are read from the requesting test file's folder, so they
    move with the test whatever folder pytest runs from."""
    from devplan.errors import DevplanError
    from devplan.testing import assert_matches_golden

    base = request.path.parent
    here = request.config.invocation_params.dir

    def check(pte, golden, *, tolerance=None, exact: bool = False) -> None:
        __tracebackhide__ = True
        if isinstance(pte, (str, os.PathLike)):  # bytes and CompileResults have no path to resolve
            pte = Path(_shown(os.path.normpath(base / pte), here))  # build/model.pte, not tests/../build/model.pte
            if not pte.exists():  # the test's own setup, not devplan, is what to fix: no traceback into devplan
                pytest.fail(f"{pte}: no such program; build it before this test runs "
                            f"(devplan compile MODEL.pt2 -o {pte})", pytrace=False)
        try:
            assert_matches_golden(pte, Path(_shown(os.path.normpath(base / golden), here)), tolerance=tolerance,
                                  exact=exact)
        except DevplanError as error:  # a damaged program or golden file: devplan's one line says what to do
            pytest.fail(str(error), pytrace=False)

    return check
