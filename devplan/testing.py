"""One line in a project's own tests keeps a program's plan under review:

    from devplan.testing import assert_matches_golden

    def test_model_plan():
        assert_matches_golden("build/model.pte", "tests/golden/model.json")

With pytest, the `devplan_golden` fixture (devplan/pytest_plugin.py) does the same, reading
golden paths relative to the test file and rewriting them under --devplan-update-golden."""
from __future__ import annotations

import os
from pathlib import Path


def assert_matches_golden(pte, golden: str | os.PathLike, update: bool = False, tolerance=None,
                          exact: bool = False) -> None:
    """Raise AssertionError, with the diff's text, unless the program (a .pte path, its bytes,
    or a CompileResult) plans as the golden file records; with update, write the golden file
    instead. tolerance ('2%', '4KiB') and exact are those of `devplan check --golden`."""
    from devplan.inspect.check import check_golden

    __tracebackhide__ = True  # pytest shows the caller's line, not this helper's
    if not update and not Path(golden).exists():
        raise AssertionError(f"{golden}: no golden file yet; rerun with update=True "
                             f"(pytest --devplan-update-golden) to write it")
    result = check_golden(getattr(pte, "data", pte), golden, update=update, tolerance=tolerance, exact=exact)
    if not result.ok:
        raise AssertionError(f"{golden}: the program no longer plans as recorded; if that is intended, "
                             f"rerun with update=True (pytest --devplan-update-golden)\n{result.diff.text()}")
