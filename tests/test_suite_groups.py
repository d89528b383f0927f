"""The suite's own grouping (tests/conftest.py): under pytest-xdist's loadgroup, tests that
share a module-scoped fixture, or a SHARE_BY parameter's value, carry one group and so run on
one worker. Run here on a small module under the suite's conftest, as xdist's workers see it."""

from __future__ import annotations

import json
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


# each worker notes the tests it ran and the group each carried, as pytest hands them to it
RECORD = """

def pytest_runtest_setup(item):
    import json, os
    groups = [mark.args[0] for mark in item.iter_markers("xdist_group")]
    with open(os.environ["GROUPS_RECORD"], "a") as record:
        record.write(json.dumps([os.environ["PYTEST_XDIST_WORKER"], item.name, groups]) + "\\n")
"""


def test_tests_sharing_work_carry_one_group_on_the_workers(pytester, monkeypatch):
    record = pytester.path / "groups.jsonl"
    monkeypatch.setenv("GROUPS_RECORD", str(record))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parents[1]))  # the suite's conftest imports testbed
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text() + RECORD)
    pytester.makepyfile(test_sharing=SHARING)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)
    ran = [json.loads(line) for line in record.read_text().splitlines()]
    assert {name: groups for _, name, groups in ran} == {
        "test_by_name[1-a]": ["test_sharing:a"],
        "test_by_name[2-a]": ["test_sharing:a"],
        "test_by_name[1-b]": ["test_sharing:b"],
        "test_by_name[2-b]": ["test_sharing:b"],
        "test_with_fixture": ["test_sharing:built:None"],
        "test_alone": [],
    }
    workers: dict[str, set[str]] = {}
    for worker, _, groups in ran:
        for group in groups:
            workers.setdefault(group, set()).add(worker)
    assert all(len(on) == 1 for on in workers.values()), workers
