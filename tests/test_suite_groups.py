"""The suite's own grouping (tests/conftest.py): under pytest-xdist's loadgroup, tests that
share a module-scoped fixture, or a SHARE_BY parameter's value, carry one group and so run on
one worker. Run here on a small module under the suite's conftest, as xdist's workers see it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("xdist")
pytest_plugins = ["pytester"]

SHARING = """
import pytest

SHARE_BY = "name"

@pytest.fixture(scope="module")
def built():
    return object()

@pytest.mark.parametrize("name", ["a", "b"])
@pytest.mark.parametrize("mode", [1, 2])
def test_by_name(name, mode):
    pass

def test_with_fixture(built):
    pass

def test_alone():
    pass
"""


def test_tests_sharing_work_carry_one_group_on_the_workers(pytester):
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(test_sharing=SHARING)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)
    groups = dict(re.findall(r"PASSED test_sharing\.py::(\S+?)@(\S+)", result.stdout.str()))
    assert groups == {
        "test_by_name[1-a]": "test_sharing:a",
        "test_by_name[2-a]": "test_sharing:a",
        "test_by_name[1-b]": "test_sharing:b",
        "test_by_name[2-b]": "test_sharing:b",
        "test_with_fixture": "test_sharing:built:None",
    }, result.stdout.str()
