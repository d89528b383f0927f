"""The pytest plugin's list of goldens no test read, in process (tests/test_pytest_plugin.py
runs it end to end): what it reads of a golden/ folder, and how it prints what it found
(issue 52, item 2d)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from devplan import pytest_plugin, testing
from devplan.testing import Seen


class _Reporter:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def section(self, title: str) -> None:
        self.lines.append(title)

    def write_line(self, line: str, **markup) -> None:
        self.lines.append(line)


def test_the_unused_goldens_names_are_printed_escaped(tmp_path, monkeypatch):
    # a golden's file name is the project's: a newline in it would start a line of its own,
    # a workflow command in CI's log
    unused = [str(tmp_path / "golden" / name) for name in ("a\n::add-mask::x.json", "##[group]b.json", "::c.json")]
    stash = pytest.Stash()
    stash[pytest_plugin._KEY] = Seen(unused=unused)
    config = SimpleNamespace(stash=stash, invocation_params=SimpleNamespace(dir=tmp_path), getoption=lambda name: False)
    monkeypatch.setattr(testing, "session", testing.GoldenSession())
    reporter = _Reporter()
    pytest_plugin.pytest_terminal_summary(reporter, 0, config)
    assert reporter.lines[-3:] == [
        "  golden/a\\n::add-mask::x.json",
        "  golden/#\\u0023[group]b.json",
        "  golden/::c.json",
    ]
    shown = "\n".join(reporter.lines)
    assert not re.search(r"^\s*::|##\[", shown, re.M), shown
