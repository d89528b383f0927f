"""The pytest plugin's list of goldens no test read, in process (tests/test_pytest_plugin.py
runs it end to end): what it reads of a golden/ folder, and how it prints what it found
(issue 52, items 2d and 6)."""

from __future__ import annotations

import os
import re
import signal
from types import SimpleNamespace

import pytest

from devplan import pytest_plugin, testing
from devplan.testing import Seen

GOLDEN = '{"document": "devplan-golden"}\n'


@pytest.fixture
def alarm():
    """A scan that hangs (a FIFO opened for reading) fails here instead of holding the suite."""

    def hung(signum, frame):
        raise TimeoutError("the scan hung")

    before = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, before)


def test_the_unused_golden_scan_reads_only_regular_files(tmp_path, alarm):
    """A link to /dev/zero under golden/ took 5.9 GB then MemoryError, a FIFO hung, a link to
    itself crashed pytest; none is a golden. A golden reached through a link still counts."""
    test = tmp_path / "test_x.py"
    test.write_text("")
    kept = tmp_path / "golden"
    (kept / "test_x").mkdir(parents=True)
    (kept / "old.json").write_text(GOLDEN)
    (kept / "linked.json").symlink_to(kept / "old.json")
    (kept / "zero.json").symlink_to("/dev/zero")
    os.mkfifo(kept / "fifo.json")
    (kept / "loop.json").symlink_to("loop.json")
    os.mkfifo(kept / "test_x" / "test_gone.golden.json")
    (kept / "test_x" / "test_loop.golden.json").symlink_to("test_loop.golden.json")
    seen = Seen(collected={str(test): ["test_a"]}, passed={(str(test), "test_a")})
    unused = seen.unused_goldens("golden", ".golden.json", whole=[str(tmp_path)])
    assert unused == [str(kept / "linked.json"), str(kept / "old.json")]


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


def test_a_golden_failure_prints_no_command(tmp_path, monkeypatch):
    """What a failing golden check says, which pytest prints: the golden's path and the diff's
    names escaped, no line a workflow command (pytest prints E before an assertion's lines,
    which leaves `##[`; a failure without its traceback, as the fixture's, has no prefix)."""
    import json

    from devplan.testing import Unreadable, assert_matches_golden
    from testbed.damage import workflow_commands
    from testbed.small_programs import compiled

    monkeypatch.setattr(testing, "session", None)  # this run's own summary is not the test's to write into
    program = compiled()
    missing = tmp_path / "a\n::add-mask::x.json"
    with pytest.raises(AssertionError) as absent:
        assert_matches_golden(program, missing, update=False)
    golden = tmp_path / "##[group]g.json"
    assert_matches_golden(program, golden, update=True)
    document = json.loads(golden.read_text())
    document["methods"][0]["operators"].append("##[group]op\n::set-output name=a::b")
    golden.write_text(json.dumps(document))
    with pytest.raises(AssertionError) as differs:
        assert_matches_golden(program, golden, update=False)
    golden.write_text('{"document": "devplan-golden", "schema_version": 1, "methods": [{"name": "##[x"}]}')
    with pytest.raises(Unreadable) as unreadable:
        assert_matches_golden(program, golden, update=False)
    for failure in (absent, differs, unreadable):
        assert workflow_commands(str(failure.value)) == [], str(failure.value)
    assert str(absent.value).startswith(f"{tmp_path}/a\\n::add-mask::x.json: no golden file yet")
