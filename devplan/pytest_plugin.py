"""devplan's pytest plugin, registered through the `pytest11` entry point: the
`--devplan-update-golden` option and the `devplan_golden` fixture.

    def test_model_plan(devplan_golden):
        devplan_golden("build/model.pte", "golden/model.json")   # relative to this test file"""
from __future__ import annotations

from pathlib import Path

import pytest


def pytest_addoption(parser) -> None:
    parser.getgroup("devplan").addoption(
        "--devplan-update-golden", action="store_true",
        help="write the golden files that devplan_golden compares programs with, instead of comparing")


@pytest.fixture
def devplan_golden(request):
    """A callable (pte, golden, tolerance=None, exact=False) that asserts the program plans as
    the golden file records, or writes the file under --devplan-update-golden. A relative
    golden path is read from the requesting test file's folder, so it moves with the test."""
    from devplan.testing import assert_matches_golden

    update = request.config.getoption("--devplan-update-golden")

    def check(pte, golden, *, tolerance=None, exact: bool = False) -> None:
        __tracebackhide__ = True
        assert_matches_golden(pte, request.path.parent / Path(golden), update=update, tolerance=tolerance, exact=exact)

    return check
