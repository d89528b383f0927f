"""One line in a project's own tests keeps a program's plan under review:

    from devplan.testing import assert_matches_golden

    def test_model_plan():
        assert_matches_golden("build/model.pte", "tests/golden/model.json")

`pytest --devplan-update-golden`, or DEVPLAN_UPDATE_GOLDEN=1 in the environment, rewrites the
golden files instead of comparing (creating their folders). With pytest, the `devplan_golden`
fixture (devplan/pytest_plugin.py) does the same, reading both paths relative to the test file;
the plugin lists the goldens written, and those whose program now plans smaller, at the end."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

UPDATE_VARIABLE = "DEVPLAN_UPDATE_GOLDEN"


@dataclass
class GoldenSession:
    """What the pytest plugin collects over a session, for its terminal summary. The plugin
    installs one as `session` while pytest runs; outside pytest there is none."""

    update: bool = False                                          # --devplan-update-golden was given
    written: list[str] = field(default_factory=list)              # goldens rewritten
    smaller: list[tuple[str, str]] = field(default_factory=list)  # (golden, what shrank) of passing checks


session: GoldenSession | None = None


def update_requested() -> bool:
    """Whether goldens are to be rewritten: pytest's --devplan-update-golden, or the variable
    (which also reaches tests that run outside pytest, or in subprocesses)."""
    return (session is not None and session.update) or os.environ.get(UPDATE_VARIABLE, "") not in ("", "0")


def assert_matches_golden(pte, golden: str | os.PathLike, update: bool | None = None, tolerance=None,
                          exact: bool = False) -> None:
    """Raise AssertionError, with the diff's text, unless the program (a .pte path, its bytes,
    or a CompileResult) plans as the golden file records; with update, write the golden file
    (and its folders) instead. update None follows --devplan-update-golden and
    DEVPLAN_UPDATE_GOLDEN. tolerance ('2%', '4KiB') and exact are those of `devplan check --golden`."""
    from devplan.inspection.check import check_golden

    __tracebackhide__ = True  # pytest shows the caller's line, not this helper's
    if update is None:
        update = update_requested()
    if not update and not Path(golden).exists():
        raise AssertionError(f"{golden}: no golden file yet; rerun with pytest --devplan-update-golden "
                             f"(or {UPDATE_VARIABLE}=1) to write it")
    result = check_golden(getattr(pte, "data", pte), golden, update=update, tolerance=tolerance, exact=exact)
    if not result.ok:
        raise AssertionError(f"{golden}: the program no longer plans as recorded; if that is intended, "
                             f"rerun with pytest --devplan-update-golden (or {UPDATE_VARIABLE}=1)\n"
                             f"{result.diff.text()}")
    if session is not None:
        if result.updated:
            session.written.append(os.fspath(golden))
        elif shrunk := _shrunk(result.diff):
            session.smaller.append((os.fspath(golden), shrunk))


def _shrunk(diff) -> str:
    """The sizes that are smaller now than the golden records ('' if none): a passing check
    whose golden would otherwise go stale, letting the program grow back unnoticed."""
    from devplan.inspection.difftext import SIZED
    from devplan.units import size_text

    return "; ".join(f"{c.method + ' ' if c.method else ''}{c.subject} {c.fact} {size_text(c.a)} -> {size_text(c.b)}"
                     for c in diff.changes if c.fact in SIZED and not c.fails and c.b < c.a)
