"""Options for the whole test suite."""

import argparse
import os

import pytest

# every compile the tests make, in this process or a child, checks each stage's result
# (devplan/wellformed.py), so that a pass breaking the IR fails where it breaks it
os.environ["DEVPLAN_CHECK_STAGES"] = "1"


def pytest_addoption(parser):
    # one flag name everywhere: devplan's plugin's --devplan-update-golden rewrites tests/golden/ too;
    # the suite's old name stays, hidden, for muscle memory and old instructions
    parser.addoption("--update-golden", action="store_true", dest="devplan_update_golden", help=argparse.SUPPRESS)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups into the test ids
def pytest_collection_modifyitems(items):
    """Tests that share work run on one worker (pytest-xdist's loadgroup, pyproject.toml): each
    worker would otherwise build a module-scoped fixture, or a model a module caches per
    process, for itself. A test taking a module-scoped fixture goes with that fixture's other
    tests; in a module that names a parameter in SHARE_BY, a test goes with the others of its
    value (the model whose export and compile they share)."""
    for item in items:
        group = _fixture_group(item) or _parameter_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def _fixture_group(item) -> str | None:
    fixtures = getattr(item, "_fixtureinfo", None)
    callspec = getattr(item, "callspec", None)
    for name in sorted(fixtures.name2fixturedefs if fixtures else ()):
        made = fixtures.name2fixturedefs[name][-1]
        if made.scope == "module" and not getattr(made, "_autouse", False):  # not a module's clean-up
            param = callspec.params.get(name) if callspec else None
            return f"{item.module.__name__}:{name}:{param}"
    return None


def _parameter_group(item) -> str | None:
    by = getattr(getattr(item, "module", None), "SHARE_BY", None)
    callspec = getattr(item, "callspec", None)
    if by is None or callspec is None or by not in callspec.params:
        return None
    return f"{item.module.__name__}:{callspec.params[by]}"
