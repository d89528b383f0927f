"""Options for the whole test suite."""

import argparse
import os
import shutil
import sys
import tempfile

import pytest

from testbed.shared import FOLDER

# one thread in each process: the workers (one per core) and their children share the cores, and
# torch's threads waiting on each other there took 40% more CPU for the same tests
os.environ.setdefault("OMP_NUM_THREADS", "1")
# every compile the tests make, in this process or a child, checks each stage's result
# (devplan/wellformed.py), so that a pass breaking the IR fails where it breaks it
os.environ["DEVPLAN_CHECK_STAGES"] = "1"
# where PYTHONDONTWRITEBYTECODE is set (some images set it), each worker and each CLI child would
# compile devplan's modules, and pytest rewrite the suite's asserts, from source every time
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# the run's shared exports and lowerings (testbed/shared.py): made here, in the process that
# starts the workers, so that they and their children all inherit the one folder
_made_shared = FOLDER not in os.environ
if _made_shared:
    os.environ[FOLDER] = tempfile.mkdtemp(prefix="devplan-tests-")


def pytest_unconfigure(config):
    if _made_shared:
        shutil.rmtree(os.environ.pop(FOLDER), ignore_errors=True)


def pytest_addoption(parser):
    # one flag name everywhere: devplan's plugin's --devplan-update-golden rewrites tests/golden/ too;
    # the suite's old name stays, hidden, for muscle memory and old instructions
    parser.addoption("--update-golden", action="store_true", dest="devplan_update_golden", help=argparse.SUPPRESS)
    parser.addoption(
        "--release",
        action="store_true",
        help="also run the sweeps kept for releases (marked release; benchmarks/sweeps.py runs them)",
    )


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    """The release tier stays out of the suite unless --release asks for it (the suite keeps a
    CI-sized case of each family; tests/tiers.py).

    Tests that share work run on one worker (pytest-xdist's loadgroup, pyproject.toml): each
    worker would otherwise build a module-scoped fixture, or a model a module caches per
    process, for itself. A test taking a module-scoped fixture goes with that fixture's other
    tests; in a module that names a parameter in SHARE_BY, a test goes with the others of its
    value (the model whose export and compile they share)."""
    if not config.getoption("release"):
        release = [item for item in items if item.get_closest_marker("release")]
        if release:
            items[:] = [item for item in items if not item.get_closest_marker("release")]
            config.hook.pytest_deselected(items=release)
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
