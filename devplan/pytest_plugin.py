"""devplan's pytest plugin, registered through the `pytest11` entry point, with the snapshot
tools' conventions (syrupy, pytest-regressions): the `devplan_golden` fixture names each golden
file from the test's id, `--devplan-update-golden` rewrites goldens and passes,
`--devplan-force-regen` rewrites those that differ and fails (so CI never accepts a change
silently), and the terminal summary lists the goldens written, those whose program now plans
smaller, and those under a golden/ folder that no test read, whatever their names, where the
run took the tests beside it whole (`--devplan-strict-goldens` fails the run for them).

    def test_model_plan(devplan_golden):
        devplan_golden("build/model.pte")   # golden/test_plan/test_model_plan.golden.json, beside this file"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from devplan.testing import Seen
from devplan.units import inert, printable

if TYPE_CHECKING:
    from devplan.compiler import CompileResult
    from devplan.inspection.changes import Tolerance

GOLDEN_FOLDER = "golden"  # beside the test file: golden/<its module>/<its test>.golden.json
SUFFIX = ".golden.json"
_KEY = pytest.StashKey[Seen]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("devplan")
    group.addoption(
        "--devplan-update-golden",
        action="store_true",
        dest="devplan_update_golden",
        help="write the golden files that devplan_golden and assert_matches_golden compare programs with, "
        "instead of comparing (DEVPLAN_UPDATE_GOLDEN=1 does the same)",
    )
    group.addoption(
        "--devplan-force-regen",
        action="store_true",
        dest="devplan_force_regen",
        help="compare, and rewrite each golden file that differs or is missing, failing its test once it has "
        "checked all its goldens: the files to review and commit, with no run that passes having accepted them",
    )
    group.addoption(
        "--devplan-strict-goldens",
        action="store_true",
        dest="devplan_strict_goldens",
        help="fail the run when a devplan golden file under a golden/ folder beside the tests is read by no "
        "test (a test renamed or removed) where the run took those tests whole; without it they are listed",
    )


def pytest_configure(config: pytest.Config) -> None:
    # the session is module state so that assert_matches_golden, which has no pytest request,
    # sees the flags and reports what it wrote and read
    from devplan import testing

    testing.session = testing.GoldenSession(
        update=config.getoption("devplan_update_golden"), force_regen=config.getoption("devplan_force_regen")
    )
    config.stash[_KEY] = Seen(partial=_named_alone(config))


def pytest_unconfigure(config: pytest.Config) -> None:
    from devplan import testing

    testing.session = None


def _named_alone(config: pytest.Config) -> set[str]:
    """Test files whose tests were picked one by one (path::test): their other tests did not run,
    so their goldens are not unused."""
    return {os.path.abspath(arg.split("::")[0]) for arg in config.args if "::" in arg}


def _given_whole(config: pytest.Config) -> list[str]:
    """The paths the run was given whole (test folders and files, not path::test), absolute;
    none where it was given modules (--pyargs) or told to leave out paths by pattern (--ignore-glob)."""
    if config.getoption("ignore_glob", None) or config.getoption("pyargs", False):
        return []
    here = config.invocation_params.dir
    return [os.path.abspath(here / arg) for arg in config.args if "::" not in arg]


def _left_out(config: pytest.Config) -> list[str]:
    """The paths --ignore leaves out, absolute: a folder holding one is not run whole."""
    here = config.invocation_params.dir
    return [os.path.abspath(here / path) for path in config.getoption("ignore", None) or ()]


def pytest_deselected(items: list[pytest.Item]) -> None:
    for item in items:  # -k, -m: the file's other tests did not run
        item.config.stash[_KEY].partial.add(os.fspath(item.path))


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    seen = session.config.stash[_KEY]
    for item in session.items:
        seen.collected.setdefault(os.fspath(item.path), []).append(_golden_name(item.name))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Under --devplan-force-regen a test goes on past each golden it rewrites, so that one run
    rewrites every golden of a test that checks several; the test fails at its end, saying
    each (beside its own failure, if it has one)."""
    from devplan import testing

    found = testing.session
    if found is None or not found.force_regen:
        return (yield)
    found.pending = []
    try:
        result = yield
    except BaseException as error:
        if found.pending and hasattr(error, "add_note"):  # Python 3.11's notes, which pytest shows
            error.add_note(testing.rewritten(found.pending))
        raise
    finally:
        told, found.pending = found.pending, None
    if told:
        pytest.fail(testing.rewritten(told), pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and report.passed:  # a test that passed read every golden it calls for
        item.config.stash[_KEY].passed.add((os.fspath(item.path), _golden_name(item.name)))
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    from devplan import testing

    seen = session.config.stash[_KEY]
    if testing.session is not None:
        seen.used |= testing.session.used
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller merges and reports
        workeroutput["devplan"] = seen.to_json(testing.session)
        return
    seen.unused = seen.unused_goldens(
        GOLDEN_FOLDER,
        SUFFIX,
        whole=_given_whole(session.config),
        left_out=_left_out(session.config),
        test_files=tuple(session.config.getini("python_files")),
    )
    if seen.unused and session.config.getoption("devplan_strict_goldens") and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)  # xdist's hook: without xdist, never called (and not an unknown hook)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist's controller: what a worker saw, merged into this session's."""
    from devplan import testing

    found = getattr(node, "workeroutput", {}).get("devplan")
    if found is not None:
        node.config.stash[_KEY].merge(found, testing.session)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    from devplan import testing

    found, seen = testing.session, config.stash.get(_KEY, None)
    unused = seen.unused if seen is not None else []
    if found is None or not (found.written or found.smaller or unused):
        return
    terminalreporter.section("devplan goldens")
    shown = functools.partial(_shown, here=config.invocation_params.dir)
    # names from the project (a golden's file name) escaped, and no line a CI runner's command

    def write(text: str, **markup: bool) -> None:
        terminalreporter.write_line(inert(printable(text)), **markup)

    if found.written:
        write(f"wrote {len(found.written)} golden file(s):")
        for path in found.written:
            write(f"  {shown(path)}")
    if found.smaller:
        write(
            f"{len(found.smaller)} program(s) now plan smaller than their golden; rerun "
            f"with --devplan-update-golden to record it, so growth back is caught:"
        )
        for path, what in found.smaller:
            write(f"  {shown(path)}: {what}")
    if unused:
        strict = config.getoption("devplan_strict_goldens")
        write(
            f"{len(unused)} golden file(s) no test read (a test renamed or removed); "
            f"delete them{'' if strict else ', or run with --devplan-strict-goldens to fail'}:",
            red=strict,
        )
        for path in unused:
            write(f"  {shown(path)}")


def _shown(path: str | os.PathLike[str], here: Path) -> str:
    """`path` relative to where pytest ran, as pytest names test files (else as it is)."""
    return os.path.relpath(path, here) if Path(path).resolve().is_relative_to(here.resolve()) else os.fspath(path)


def _golden_name(test: str) -> str:
    """A test's name as a file name: its parameters' ids kept, what a file name cannot hold
    (a slash, a space) as _."""
    return re.sub(r"[^\w.,=+\[\]-]+", "_", test)


@pytest.fixture
def devplan_golden(request: pytest.FixtureRequest) -> Callable[..., None]:
    """A callable (pte, golden=None, tolerance=None, exact=False, runtime=None,
    weights_tolerance=None) that asserts the program plans as the golden file records (within
    tolerance of the planned memory, and of the weights unless weights_tolerance gives theirs), or writes the file under --devplan-update-golden,
    and with `runtime` (a selected_operators.yaml, read from the test file's folder like the
    golden) that the runtime build it names can load the program. The golden
    file is golden/<test file>/<test>.golden.json beside the test file (a second call in one test:
    <test>.2.golden.json); a path given instead is read, like the program's, from the test
    file's folder, so both move with the test whatever folder pytest runs from."""
    from devplan.testing import Unreadable, assert_fits_runtime, assert_matches_golden

    base = request.path.parent
    here = request.config.invocation_params.dir
    calls = [0]

    def check(
        pte: str | os.PathLike[str] | bytes | CompileResult,
        golden: str | os.PathLike[str] | None = None,
        *,
        tolerance: Tolerance | str | None = None,
        exact: bool = False,
        runtime: str | os.PathLike[str] | None = None,
        weights_tolerance: Tolerance | str | None = None,
    ) -> None:
        __tracebackhide__ = True
        calls[0] += 1
        if golden is None:
            number = f".{calls[0]}" if calls[0] > 1 else ""
            golden = Path(GOLDEN_FOLDER) / request.path.stem / f"{_golden_name(request.node.name)}{number}{SUFFIX}"
        if isinstance(pte, (str, os.PathLike)):  # bytes and CompileResults have no path to resolve
            pte = Path(_shown(os.path.normpath(base / pte), here))  # build/model.pte, not tests/../build/model.pte
            if not pte.exists():  # the test's own setup, not devplan, is what to fix: no traceback into devplan
                pytest.fail(
                    inert(
                        printable(
                            f"{pte}: no such program; build it before this test runs (devplan compile MODEL.pt2 -o {pte})"
                        )
                    ),
                    pytrace=False,
                )
        try:
            assert_matches_golden(
                pte,
                Path(_shown(os.path.normpath(base / golden), here)),
                tolerance=tolerance,
                exact=exact,
                weights_tolerance=weights_tolerance,
            )
            if runtime is not None:
                assert_fits_runtime(pte, Path(_shown(os.path.normpath(base / runtime), here)))
        except Unreadable as error:  # a damaged program or golden file: devplan's one line says what to do
            pytest.fail(str(error), pytrace=False)

    return check
