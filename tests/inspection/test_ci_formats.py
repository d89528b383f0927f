"""check's and diff's reports where reviewers read them (issue 37, item 2): --format markdown
(a step summary), --format github (workflow commands, shown as annotations) and --junit FILE,
each rendered against a real change: one layer widened from 64 to 128 features."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
import torch

import devplan
from devplan.errors import DevplanError
from devplan.inspection.reports_ci import _command
from tests.inspection.runner import invoke

COMMAND = re.compile(
    r"::(error|notice) file=(?P<file>[^,:]+),(?:line=(?P<line>\d+),)?title=(?P<title>[^:]+)::(?P<message>.+)"
)


class Tower(torch.nn.Module):
    """Widening `wide` grows the buffer at a peak that `wide.0` holds."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.narrow = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
        self.wide = torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.ReLU(), torch.nn.Linear(width, 16))

    def forward(self, x):
        return self.wide(self.narrow(x))


@pytest.fixture(scope="module")
def widened(tmp_path_factory):
    """The narrow program, the widened one, and the narrow one's golden file."""
    folder = tmp_path_factory.mktemp("widened")
    paths = {}
    for width in (64, 128):
        torch.manual_seed(0)
        paths[width] = folder / f"w{width}.pte"
        paths[width].write_bytes(devplan.compile(torch.export.export(Tower(width).eval(), (torch.randn(32, 16),))).data)
    golden = folder / "tower.golden.json"
    assert invoke("check", str(paths[64]), "--golden", str(golden), "--update").exit_code == 0
    return paths[64], paths[128], golden


def _check(widened, *options: str):
    _, wide, golden = widened
    return invoke("check", str(wide), "--golden", str(golden), *options)


def test_markdown_names_the_module_that_grew(widened):
    for result in (
        _check(widened, "--format", "markdown"),
        invoke("diff", *map(str, widened[:2]), "--format", "markdown"),
    ):
        assert result.exit_code == 1, result.output
        text = result.stdout
        heading = text.splitlines()[0]
        assert heading.startswith("### devplan ") and (
            heading.endswith(": FAIL") or ": 5 changes: 3 failing, 2 allowed" in heading
        ), heading
        assert "**What grew in forward buffer 1 (cpu)**: 10.0 KiB (10,240 bytes) -> 18.0 KiB" in text
        assert "| wide.0 | 8.0 KiB | 16.0 KiB | +8.0 KiB |" in text
        assert "| ❌ FAIL | forward | buffer 1 (cpu) size | 10.0 KiB (10,240 bytes) -> 18.0 KiB (18,432 bytes)" in text
        assert not any(line != line.rstrip() for line in text.splitlines())


def test_markdown_tables_the_buffers_checked(widened):
    text = _check(widened, "--budget", "cpu=16KiB", "--format", "markdown").stdout
    assert text.splitlines()[0] == f"### devplan check `{widened[1].name}`: FAIL"
    assert "| ❌ FAIL | forward cpu, 1 buffer | 18.0 KiB (18,432 bytes) | budget 16.0 KiB, over by 2.0 KiB" in text
    assert f"#### ❌ FAIL golden `{widened[2]}`: 5 changes: 3 failing, 2 allowed" in text


def test_github_lines_annotate_the_golden_file_with_the_change(widened):
    _, wide, golden = widened
    result = _check(widened, "--budget", "cpu=16KiB", "--format", "github")
    assert result.exit_code == 1
    commands = [COMMAND.fullmatch(line) for line in result.stdout.splitlines()]
    assert all(commands), result.stdout
    errors = {(m["file"], m["title"]): m["message"] for m in commands if m[1] == "error"}
    size = errors[(str(golden), "devplan%3A forward buffer 1 (cpu) size")]
    assert size.startswith("10.0 KiB (10%2C240 bytes) -> 18.0 KiB".replace("%2C", ","))  # a message keeps its commas
    assert "(+80.0%25)%0Apeak: #" in size and "%0Awide.0 +8.0 KiB (8.0 KiB -> 16.0 KiB)" in size
    # the budget fails on the golden file, a file of the pull request, not on the built program
    # (issue 55.4), naming the block that holds the peak
    budget = errors[(str(golden), "devplan check%3A forward cpu%2C 1 buffer")]
    assert "budget 16.0 KiB" in budget and "wide.0" in budget, budget
    assert not [m for m in commands if m["file"] == str(wide)]
    # each at the line of the golden file that records the fact
    text = golden.read_text().splitlines()
    for match in commands:
        line = int(match["line"])
        fact = {"size": '"size": ', "constant bytes": '"constant_bytes": ', "lower bound": '"lower_bound": '}
        wanted = next((key for words, key in fact.items() if match["title"].endswith(words)), None)
        if wanted is not None:
            assert text[line - 1].strip().startswith(wanted), (match["title"], text[line - 1])
    size_line = next(m for m in commands if m["title"] == "devplan%3A forward buffer 1 (cpu) size")["line"]
    devices = [n for n, t in enumerate(text, 1) if t.strip().startswith('"cpu": {')]
    budget_line = next(m for m in commands if m["title"].startswith("devplan check%3A"))["line"]
    assert int(budget_line) == devices[0] + 4 and size_line != budget_line  # the device total's size
    diffed = invoke("diff", str(golden), str(wide), "--format", "github").stdout.splitlines()
    assert (
        all(
            line.startswith(f"::error file={golden},") or line.startswith(f"::notice file={golden},") for line in diffed
        )
        and diffed
    )


def test_github_escapes_as_its_toolkit_does():
    line = _command("error", "a,b:c.json", "t: 1, 2", "100%\r\nnext")
    assert line == "::error file=a%2Cb%3Ac.json,title=t%3A 1%2C 2::100%25%0D%0Anext"


def test_junit_fails_the_grown_buffer(widened, tmp_path):
    report = tmp_path / "reports" / "check.xml"
    report.parent.mkdir()
    assert _check(widened, "--junit", str(report)).exit_code == 1
    root = ET.parse(report).getroot()
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [f"devplan check {widened[1].name}", f"golden {widened[2]}"]
    failed = {
        case.get("name"): case.find("failure") for case in root.iter("testcase") if case.find("failure") is not None
    }
    assert set(failed) == {"constant bytes", "forward buffer 1 (cpu) size", "forward buffer 1 (cpu) lower bound"}
    assert "wide.0 +8.0 KiB" in failed["forward buffer 1 (cpu) size"].text
    assert root.get("failures") == "3" and suites[0].get("tests") == "1" and suites[0].get("failures") == "0"
    diffed = tmp_path / "diff.xml"
    assert invoke("diff", *map(str, widened[:2]), "--junit", str(diffed)).exit_code == 1
    cases = ET.parse(diffed).getroot().findall("testsuite/testcase")
    assert {c.get("classname") for c in cases} == {"devplan.diff"} and any(
        c.get("name") == "forward buffer 1 (cpu) size" and c.find("failure") is not None for c in cases
    )


def test_junit_of_a_passing_check_passes(widened, tmp_path):
    narrow, _, golden = widened
    report = tmp_path / "ok.xml"
    assert invoke("check", str(narrow), "--golden", str(golden), "--junit", str(report)).exit_code == 0
    root = ET.parse(report).getroot()
    assert (
        root.get("failures") == "0"
        and [c.get("name") for c in root.iter("testcase")][-1] == "the programs plan the same"
    )


def test_text_and_json_are_unchanged_by_the_new_options(widened, tmp_path):
    """--junit adds a file; what is printed stays the text (or --json) view, byte for byte."""
    for command in (["check", str(widened[1]), "--golden", str(widened[2])], ["diff", *map(str, widened[:2])]):
        for view in ([], ["--json"]):
            plain = invoke(*command, *view).stdout
            assert invoke(*command, *view, "--format", "text", "--junit", str(tmp_path / "r.xml")).stdout == plain


@pytest.mark.parametrize(
    "options, error",
    [
        (["--json", "--format", "markdown"], "--json and --format markdown: pick one"),
        (["--junit", "-"], "--junit would write standard output"),
        (["--junit", "PROGRAM"], "--junit would overwrite the input"),
        (["--junit", "GOLDEN"], "--junit would overwrite the input"),
    ],
)
def test_reports_refuse_what_they_cannot_write(widened, options, error):
    _, wide, golden = widened
    options = [{"PROGRAM": str(wide), "GOLDEN": str(golden)}.get(option, option) for option in options]
    before = wide.read_bytes(), golden.read_bytes()
    result = _check(widened, *options)
    assert isinstance(result.exception, DevplanError) and error in str(result.exception), result.output
    assert (wide.read_bytes(), golden.read_bytes()) == before


def test_a_plan_that_shrank_passes_with_how_to_record_it_or_fails_when_asked(widened, tmp_path):
    """Issue 55: a smaller plan passed saying only that every change was allowed; it now says how
    to record it, and --fail-on-shrink fails it as snapshot tools fail a stale snapshot. One
    vocabulary: 'N changes: F failing, A allowed' in check as in diff."""
    torch.manual_seed(0)
    ep = torch.export.export(Tower(64).eval(), (torch.randn(32, 16),))
    wide, narrow = tmp_path / "naive.pte", tmp_path / "best.pte"  # the same model, planned without reuse and with
    wide.write_bytes(devplan.compile(ep, planner="naive").data)
    narrow.write_bytes(devplan.compile(ep).data)
    golden = tmp_path / "naive.golden.json"
    assert invoke("check", str(wide), "--golden", str(golden), "--update").exit_code == 0
    shrank = invoke("check", str(narrow), "--golden", str(golden))
    assert shrank.exit_code == 0, shrank.stdout
    flat = " ".join(shrank.stdout.split())
    assert f"ok golden {golden}: 2 changes, each allowed" in flat
    assert f"the plan shrank; to record it: devplan check {narrow.name} --golden {golden} --update" in flat
    markdown = invoke("check", str(narrow), "--golden", str(golden), "--format", "markdown").stdout
    assert "The plan shrank; to record it:" in markdown
    strict = invoke("check", str(narrow), "--golden", str(golden), "--fail-on-shrink")
    assert strict.exit_code == 1
    assert re.search(r"FAIL golden \S+: 2 changes: 1 failing, 1 allowed", " ".join(strict.stdout.split())), (
        strict.stdout
    )
    plain = invoke("diff", str(wide), str(narrow)).stdout
    assert plain.startswith("naive.pte -> best.pte: 2 changes\n"), plain  # the count check gives


def test_a_budget_fails_on_the_workflow_line_that_declared_it(widened, tmp_path, monkeypatch):
    """In GitHub's runner (GITHUB_WORKFLOW_REF names the workflow file), a budget given on the
    command line fails on the line of the workflow that gives it; with neither that nor a golden
    file, on no file (the run), never on the .pte, a build artifact the pull request lacks."""
    _, wide, _ = widened
    workflow = tmp_path / ".github" / "workflows" / "ci.yml"
    workflow.parent.mkdir(parents=True)
    workflow.write_text(
        "jobs:\n  memory:\n    steps:\n      - run: devplan check model.pte --budget cpu=16KiB --format github\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GITHUB_WORKFLOW_REF", "octo/model/.github/workflows/ci.yml@refs/pull/7/merge")
    shown = invoke("check", str(wide), "--budget", "cpu=16KiB", "--format", "github").stdout
    assert shown.startswith("::error file=.github/workflows/ci.yml,line=4,title=devplan check%3A forward cpu"), shown
    assert "wide.0" in shown  # the block holding the peak
    monkeypatch.delenv("GITHUB_WORKFLOW_REF")
    bare = invoke("check", str(wide), "--budget", "cpu=16KiB", "--format", "github").stdout
    assert bare.startswith("::error title=devplan check%3A forward cpu"), bare


def test_a_budget_failure_names_the_block_holding_the_peak(widened):
    _, wide, _ = widened
    text = " ".join(invoke("check", str(wide), "--budget", "cpu=16KiB").stdout.split())
    assert "FAIL forward cpu, 1 buffer: 18.0 KiB" in text and "at its peak, #" in text and "wide.0" in text, text
    markdown = invoke("check", str(wide), "--budget", "cpu=16KiB", "--format", "markdown").stdout
    assert "**forward cpu, 1 buffer** at its peak:" in markdown and "wide.0" in markdown, markdown


def _grown(golden: dict, weights: float = 1.0, arena: float = 1.0) -> dict:
    """A golden document with its constants and its buffers' sizes scaled."""
    import copy

    grown = copy.deepcopy(golden)
    grown["file"]["constant_bytes"] = round(golden["file"]["constant_bytes"] * weights)
    for method in grown["methods"]:
        for buffer in method["buffers"]:
            buffer["size"] = round(buffer["size"] * arena)
    return grown


def test_weights_and_working_memory_have_tolerances_of_their_own(widened, tmp_path, devplan_golden):
    """Issue 55.4: a 2.9% weight growth failed a 2% tolerance meant for the arena. --tolerance
    still lets the planned memory grow (and the weights, where --weights-tolerance is not given);
    --weights-tolerance lets the weights grow by their own."""
    from devplan.inspection.golden import golden_document, golden_text

    narrow, _, _ = widened
    before = golden_document(devplan.inspect(narrow))
    heavier = _grown(before, weights=1.029)
    assert not devplan.diff(before, heavier, tolerance="2%").ok  # as before: --tolerance alone judges both
    assert devplan.diff(before, heavier, tolerance="2%", weights_tolerance="5%").ok
    assert not devplan.diff(before, heavier, tolerance="5%", weights_tolerance="1%").ok
    wider = _grown(before, arena=1.029)
    assert not devplan.diff(before, wider, tolerance="2%", weights_tolerance="5%").ok  # the arena keeps its own
    assert devplan.diff(before, wider, tolerance="5%", weights_tolerance="0%").ok
    judged = devplan.diff(before, heavier, tolerance="2%", weights_tolerance="5%")
    assert judged.document()["weights_tolerance"] == {"percent": 5.0, "bytes": None}
    assert "(tolerance 2%, weights 5%)" in judged.text().splitlines()[0]
    # the command line: a golden file that records the lighter program
    golden = tmp_path / "lighter.golden.json"
    golden.write_text(golden_text(_grown(before, weights=1 / 1.029)))
    assert invoke("check", str(narrow), "--golden", str(golden), "--tolerance", "2%").exit_code == 1
    passed = invoke("check", str(narrow), "--golden", str(golden), "--tolerance", "2%", "--weights-tolerance", "5%")
    assert passed.exit_code == 0, passed.stdout
    assert invoke("diff", str(golden), str(narrow), "--tolerance", "2%", "--weights-tolerance", "5%").exit_code == 0
    # a project's tests: the helper and the pytest plugin's fixture take it too
    from devplan.testing import assert_matches_golden

    with pytest.raises(AssertionError, match="constant bytes"):
        assert_matches_golden(narrow, golden, update=False, tolerance="2%")
    assert_matches_golden(narrow, golden, update=False, tolerance="2%", weights_tolerance="5%")
    devplan_golden(narrow, golden, tolerance="2%", weights_tolerance="5%")


def test_a_golden_file_laid_out_otherwise_gives_no_lines(widened):
    """Annotations name the golden file alone where its layout is not golden_text's (a file
    written by hand on one line), or where the fact is not in it."""
    import json

    from devplan.inspection.golden_lines import change_line, key_lines

    golden = widened[2]
    assert key_lines(json.dumps(json.loads(golden.read_text()))) == {}
    lines = key_lines(golden.read_text())
    assert change_line(lines, "forward", "buffer 1 (cpu)", "size") is not None
    assert change_line(lines, "backward", "buffer 1 (cpu)", "size") is None
