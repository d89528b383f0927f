"""One line in a project's own tests keeps a program's plan under review:

    from devplan.testing import assert_matches_golden

    def test_model_plan():
        assert_matches_golden("build/model.pte", "tests/golden/model.json")

`pytest --devplan-update-golden`, or DEVPLAN_UPDATE_GOLDEN=1 in the environment, rewrites the
golden files instead of comparing (creating their folders). With pytest, the `devplan_golden`
fixture (devplan/pytest_plugin.py) does the same, reading both paths relative to the test file;
the plugin lists the goldens written, and those whose program now plans smaller, at the end."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, cast

from devplan.units import inert, printable

if TYPE_CHECKING:
    from devplan.compiler import CompileResult
    from devplan.inspection.changes import Comparison, Tolerance

UPDATE_VARIABLE = "DEVPLAN_UPDATE_GOLDEN"


@dataclass
class GoldenSession:
    """What the pytest plugin collects over a session, for its terminal summary. The plugin
    installs one as `session` while pytest runs; outside pytest there is none."""

    update: bool = False  # --devplan-update-golden was given
    force_regen: bool = False  # --devplan-force-regen was given
    written: list[str] = field(default_factory=list)  # goldens rewritten
    smaller: list[tuple[str, str]] = field(default_factory=list)  # (golden, what shrank) of passing checks
    used: set[str] = field(default_factory=set)  # goldens read or written, resolved
    # under --devplan-force-regen, while a test runs: what each golden it rewrote says, its
    # failure held to the test's end so that the test rewrites every golden it checks
    pending: list[str] | None = None


class SeenState(TypedDict):
    """What an xdist worker sends its controller of what it saw (Seen.to_json), as JSON."""

    partial: list[str]
    collected: dict[str, list[str]]
    passed: list[tuple[str, str]]  # lists of two after the trip through JSON
    used: list[str]
    written: list[str]
    smaller: list[tuple[str, str]]


@dataclass
class Seen:
    """What the plugin learns of a run to find the goldens no test reads: the tests collected
    (test file -> its tests' names as golden file names), the test files not run whole (-k,
    path::test), the tests that passed, and the goldens read. Under xdist each worker sends its
    own (to_json) and the controller merges them."""

    partial: set[str] = field(default_factory=set)
    collected: dict[str, list[str]] = field(default_factory=dict)
    passed: set[tuple[str, str]] = field(default_factory=set)
    used: set[str] = field(default_factory=set)
    unused: list[str] = field(default_factory=list)

    def to_json(self, golden: GoldenSession | None) -> SeenState:
        return {
            "partial": sorted(self.partial),
            "collected": self.collected,
            "passed": sorted(self.passed),
            "used": sorted(self.used),
            "written": golden.written if golden else [],
            "smaller": golden.smaller if golden else [],
        }

    def merge(self, found: SeenState, golden: GoldenSession | None) -> None:
        self.partial.update(found["partial"])
        for path, names in found["collected"].items():
            self.collected.setdefault(path, []).extend(names)
        self.passed.update((module, test) for module, test in found["passed"])
        self.used.update(found["used"])
        if golden is not None:
            golden.written += found["written"]
            golden.smaller += [(path, what) for path, what in found["smaller"]]

    def unused_goldens(
        self,
        folder: str,
        suffix: str,
        whole: list[str] | None = None,
        left_out: list[str] | None = None,
        test_files: tuple[str, ...] = ("test_*.py", "*_test.py"),
    ) -> list[str]:
        """The golden files under a FOLDER beside a test file that ran that no test read.

        Of the fixture's naming (FOLDER/<test file>/<test>[.N]SUFFIX): a passing test's golden it
        no longer asks for, or one named after no test of its file where the whole file ran.

        Any other devplan golden under FOLDER, where the run took every test below FOLDER's
        folder (it was given that folder or one above it in `whole`, the paths given without
        -k or path::test; it left out no path below it, `left_out`, --ignore; and deselected
        none of its tests): one in the folder of a test file since removed (FOLDER/<a name of
        `test_files` that no file has>/...SUFFIX), or, where every test below it passed, one
        named by path (a test that failed or was skipped may be the one that reads it)."""
        found = self._fixture_named(folder, suffix)
        for base in sorted({Path(module).parent for module in self.collected}):
            kept = base / folder
            if not kept.is_dir() or not self._whole(base, whole or [], left_out or []):
                continue
            for golden in sorted(kept.rglob("*.json")):
                if self._was_read(golden) or str(golden) in found or not _is_golden_file(golden):
                    continue
                fixture = golden.parent.parent == kept and golden.name.endswith(suffix)
                module = base / f"{golden.parent.name}.py"
                if fixture and os.fspath(module) in self.collected:
                    continue  # the fixture's naming, judged above
                # a removed test file's golden no test can read; one named by path, a test that did not pass may
                removed = fixture and not module.exists() and any(fnmatch(module.name, name) for name in test_files)
                if removed or self._all_passed(base):
                    found.append(str(golden))
        return sorted(found)

    def _fixture_named(self, folder: str, suffix: str) -> list[str]:
        found = []
        for module, names in sorted(self.collected.items()):
            kept = Path(module).parent / folder / Path(module).stem
            for golden in sorted(kept.glob(f"*{suffix}")) if kept.is_dir() else ():
                if self._was_read(golden) or not golden.is_file():  # a FIFO, a device, a broken link: no golden
                    continue
                owner = next(
                    (
                        name
                        for name in names
                        if golden.name == name + suffix
                        or re.fullmatch(re.escape(name) + r"\.\d+" + re.escape(suffix), golden.name)
                    ),
                    None,
                )
                if (module, owner) in self.passed if owner is not None else module not in self.partial:
                    found.append(str(golden))
        return found

    def _was_read(self, golden: Path) -> bool:
        # realpath, not Path.resolve: a link to itself raises there (RuntimeError, Python 3.11)
        return os.path.realpath(golden) in self.used

    def _whole(self, base: Path, whole: list[str], left_out: list[str]) -> bool:
        """Whether the run took every test below `base`: it was given `base` or a folder above
        it, and neither left out a path below it nor deselected any of its tests."""
        given = any(Path(path) == base or Path(path) in base.parents for path in whole)
        return given and not any(Path(path).is_relative_to(base) for path in [*left_out, *self.partial])

    def _all_passed(self, base: Path) -> bool:
        return all(
            (module, name) in self.passed
            for module, names in self.collected.items()
            if Path(module).is_relative_to(base)
            for name in names
        )


def _is_golden_file(path: Path) -> bool:
    """Whether `path` holds a devplan golden document (a folder of goldens may hold other JSON).
    Read as a golden is, a regular file within its bound: a link to /dev/zero never ends, a
    FIFO blocks, a link to itself cannot be opened."""
    from devplan.errors import DevplanError
    from devplan.files import read_input
    from devplan.inspection.golden import MAX_GOLDEN_BYTES, is_golden

    try:
        document = json.loads(read_input(path, limit=MAX_GOLDEN_BYTES, hint="a golden is a regular file"))
    except (DevplanError, ValueError, RecursionError):
        return False
    return isinstance(document, dict) and is_golden(document)


session: GoldenSession | None = None


class Unreadable(AssertionError):
    """A program or golden file devplan cannot read: its one line, which the fixture shows alone."""


def update_requested() -> bool:
    """Whether goldens are to be rewritten: pytest's --devplan-update-golden, or the variable
    (which also reaches tests that run outside pytest, or in subprocesses)."""
    return (session is not None and session.update) or os.environ.get(UPDATE_VARIABLE, "") not in ("", "0")


def assert_fits_runtime(pte: str | os.PathLike[str] | bytes | CompileResult, build: str | os.PathLike[str]) -> None:
    """Raise AssertionError, naming each operator, kernel variant and backend it lacks, unless the
    runtime build whose selective-build list is `build` (selected_operators.yaml) can load the
    program: `devplan check --runtime` as an assertion."""
    from devplan.errors import DevplanError
    from devplan.inspection.runtime_build import check_runtime

    __tracebackhide__ = True
    try:
        verdict = check_runtime(cast("str | os.PathLike[str] | bytes", getattr(pte, "data", pte)), build)
    except DevplanError as error:
        raise Unreadable(inert(str(error))) from None
    if not verdict["ok"]:
        lines = [f"{_shown(build)}: the runtime build lacks what the program needs"]
        lines += [f"  {m['method']} needs {m['kind']} {m['name']}: {m['detail']}" for m in verdict["missing"]]
        raise AssertionError(inert("\n".join(printable(line) for line in lines)))


def assert_matches_golden(
    pte: str | os.PathLike[str] | bytes | CompileResult,
    golden: str | os.PathLike[str],
    update: bool | None = None,
    tolerance: Tolerance | str | None = None,
    exact: bool = False,
    weights_tolerance: Tolerance | str | None = None,
) -> None:
    """Raise AssertionError, with the diff's text, unless the program (a .pte path, its bytes,
    or a CompileResult) plans as the golden file records; with update, write the golden file
    (and its folders) instead. update None follows --devplan-update-golden and
    DEVPLAN_UPDATE_GOLDEN. tolerance ('2%', '4KiB': of the planned memory, and of the weights
    unless weights_tolerance gives theirs) and exact are those of `devplan check --golden`."""
    from devplan.errors import DevplanError
    from devplan.inspection.check import check_golden

    __tracebackhide__ = True  # pytest shows the caller's line, not this helper's
    if update is None:
        update = update_requested()
    regen = session is not None and not update and session.force_regen
    if session is not None:
        session.used.add(str(Path(golden).resolve()))
    if not update and not regen and not Path(golden).exists():
        raise AssertionError(
            f"{_shown(golden)}: no golden file yet; rerun with pytest --devplan-update-golden "
            f"(or {UPDATE_VARIABLE}=1) to write it"
        )
    program = cast("str | os.PathLike[str] | bytes", getattr(pte, "data", pte))  # a CompileResult's program
    try:
        if update:
            result = check_golden(program, golden, update=True)
        elif regen and session is not None:
            _force_regen(session, program, golden, tolerance, exact, weights_tolerance)
            return
        else:
            result = check_golden(
                program, golden, tolerance=tolerance, exact=exact, weights_tolerance=weights_tolerance
            )
    except DevplanError as error:  # a damaged file: devplan's one line, no traceback into devplan
        raise Unreadable(inert(str(error))) from None
    if not result.ok:  # not updated, so compared: the diff says how
        raise AssertionError(
            f"{_shown(golden)}: the program no longer plans as recorded; if that is intended, "
            f"rerun with pytest --devplan-update-golden (or {UPDATE_VARIABLE}=1)\n"
            f"{inert(result.diff.text() if result.diff is not None else '')}"
        )
    if session is not None:
        if result.updated:
            session.written.append(os.fspath(golden))
        elif result.diff is not None and (shrunk := _shrunk(result.diff)):
            session.smaller.append((os.fspath(golden), shrunk))


def _force_regen(
    session: GoldenSession,
    program: str | os.PathLike[str] | bytes,
    golden: str | os.PathLike[str],
    tolerance: Tolerance | str | None,
    exact: bool,
    weights_tolerance: Tolerance | str | None = None,
) -> None:
    """--devplan-force-regen: a golden that differs, or is missing, is written as the program
    plans now and its test fails, so that no run accepts a change without a commit saying so."""
    from devplan.inspection.check import check_golden

    __tracebackhide__ = True
    result = (
        check_golden(program, golden, tolerance=tolerance, exact=exact, weights_tolerance=weights_tolerance)
        if Path(golden).exists()
        else None
    )
    if result is not None and result.ok:
        return
    check_golden(program, golden, update=True)
    session.written.append(os.fspath(golden))
    told = (
        f"{_shown(golden)}: {'written' if result is None else 'rewritten'} by --devplan-force-regen, "
        f"as the program plans now; review the change and commit it"
        + (f"\n{inert(result.diff.text())}" if result is not None and result.diff is not None else "")
    )
    if session.pending is None:  # outside a test's call (a fixture's setup): it fails here
        raise AssertionError(told)
    session.pending.append(told)  # the plugin fails the test at its end, once its other goldens are rewritten too


def _shown(golden: str | os.PathLike[str]) -> str:
    """A golden's path in a failure pytest prints: a newline in it would start a line of its
    own, and a CI runner reads `::` or `##[` there as a workflow command."""
    return inert(printable(os.fspath(golden)))


def rewritten(told: list[str]) -> str:
    """A test's failure under --devplan-force-regen: what each golden it rewrote says."""
    if len(told) == 1:
        return told[0]
    return (
        f"{len(told)} golden files rewritten by --devplan-force-regen; review the changes and commit them\n\n"
        + "\n\n".join(told)
    )


def _shrunk(diff: Comparison) -> str:
    """The sizes that are smaller now than the golden records ('' if none): a passing check
    whose golden would otherwise go stale, letting the program grow back unnoticed."""
    from devplan.inspection.difftext import SIZED
    from devplan.units import size_text

    return "; ".join(
        f"{c.method + ' ' if c.method else ''}{c.subject} {c.fact} {size_text(c.a)} -> {size_text(c.b)}"
        for c in diff.changes
        if c.fact in SIZED and not c.fails and isinstance(c.a, int) and isinstance(c.b, int) and c.b < c.a
    )
