"""check's and diff's results where reviewers read them in CI: Markdown for
$GITHUB_STEP_SUMMARY or a pull request's comment (`--format markdown`), GitHub's workflow
commands, which it shows as annotations on the files (`--format github`), and a JUnit XML
file for test reporters (`--junit FILE`). Each renders the same results that the text views
(reports.py, difftext.py) print, in the same words."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from devplan.documents import CheckedRuntime, OutputComparison, Reference
from devplan.errors import DevplanError
from devplan.inspection.changes import Change
from devplan.inspection.check import BufferCheck, GoldenCheck
from devplan.inspection.diff import Diff
from devplan.inspection.difftext import (
    change_label,
    change_values,
    outcome,
    peak_detail,
    peak_text,
    share_text,
    shares,
    signed_size,
)
from devplan.inspection.golden_lines import KeyPath, change_line, key_lines
from devplan.inspection.reports import buffer_facts, buffer_name, peak_words
from devplan.planning.budget import BACKENDS
from devplan.units import inert, printable, size_text

_MARK = {True: "✅ ok", False: "❌ FAIL"}
_MARKDOWN_SPECIAL = "\\|<`*"  # what would end a table cell, open HTML or a code span, or start emphasis


# Markdown


def check_markdown(
    checks: list[BufferCheck],
    matched: GoldenCheck | None,
    golden: str,
    name: str,
    runtime: CheckedRuntime | None = None,
) -> str:
    """A heading with the verdict, a table of the buffers, the golden file's changes, then what
    the runtime build lacks."""
    ok = all(c.ok for c in checks) and (matched is None or matched.ok) and (runtime is None or runtime["ok"])
    lines = [f"### devplan check {_code(name)}: {'ok' if ok else 'FAIL'}", ""]
    if checks:
        lines += ["| | buffer | size | limits |", "| --- | --- | ---: | --- |"]
        lines += [
            f"| {_MARK[c.ok]} | {_cell(buffer_name(c))} | {_cell(buffer_facts(c)[0])} | "
            f"{_cell('; '.join(buffer_facts(c)[1:]))} |"
            for c in checks
        ]
        peaks = [
            f"**{_cell(buffer_name(c))}** {peak_words(c)}: {_cell(peak_text(c.peak))}  "
            for c in checks
            if not c.ok and c.peak is not None
        ]
        lines += ["", *peaks] if peaks else []
    if matched is not None:
        verdict = (
            f"wrote it from {name}" if matched.diff is None else outcome(matched.diff)
        )  # updated: nothing compared
        lines += ["", f"#### {_MARK[matched.ok]} golden {_code(golden)}: {_cell(verdict)}", ""]
        lines += _changes_markdown(matched.diff) if matched.diff is not None else []
        if matched.ok and matched.diff is not None and matched.diff.shrank:
            lines += [
                "",
                f"The plan shrank; to record it: `devplan check {_cell(name)} --golden {_cell(golden)} --update`",
            ]
    if runtime is not None:
        verdict = "has what the program needs" if runtime["ok"] else f"lacks {len(runtime['missing'])}"
        lines += ["", f"#### {_MARK[runtime['ok']]} runtime build {_code(runtime['file']['name'])}: {verdict}", ""]
        lines += [
            f"- {_cell(m['method'])} needs {m['kind']} {_code(m['name'])}: {_cell(m['detail'])}"
            for m in runtime["missing"]
        ]
    return _joined(lines)


def run_markdown(reference: Reference, name: str) -> str:
    """A heading with the verdict against the reference, then a table of the outputs."""
    rows = [
        f"| {_MARK[o['passed']]} | {o['index']} | {_cell(_measure(o['sqnr_db'], ' dB', 'exact'))} | "
        f"{_cell(_measure(o['max_abs']))} | {_cell(_measure(o['mean_abs']))} | {'yes' if o['allclose'] else 'no'} | "
        f"{_share(o['argmax_agreement'])} | {_cell(o['note'] or '')} |"
        for o in reference["outputs"]
    ]
    return _joined(
        [
            f"### devplan run {_code(name)} against {_code(reference['file']['name'])}: "
            f"{'ok' if reference['passed'] else 'FAIL'}",
            "",
            "| | output | SQNR | max abs | mean abs | allclose | argmax | |",
            "| --- | ---: | ---: | ---: | ---: | --- | ---: | --- |",
            *rows,
        ]
    )


def _share(value: float | None) -> str:
    return "" if value is None else f"{value:.1%}"


def _measure(value: float | str | None, unit: str = "", none: str = "") -> str:
    if value is None:
        return none
    return f"{value:.6g}{unit}" if isinstance(value, float | int) else f"{value}{unit}"


def diff_markdown(d: Diff) -> str:
    """A heading with the outcome, what grew by module, then a table of every change."""
    return _joined([f"### devplan diff {_code(d.a)} -> {_code(d.b)}: {_cell(outcome(d))}", "", *_changes_markdown(d)])


def _changes_markdown(d: Diff) -> list[str]:
    """The cause first (each grown buffer's blocks at its peak), then one row per change."""
    lines = []
    for peak in (c for c in d.changes if c.fact == "peak"):
        lines += _grown_markdown(d, peak)
    if d.changes:
        lines += ["| | method | what | change |", "| --- | --- | --- | --- |"]
        lines += [
            f"| {_MARK[not c.fails]} | {_cell(c.method or 'program')} | {_cell(change_label(c))} | "
            f"{_cell(change_values(c))} |"
            for c in d.changes
        ]
    return lines


def _grown_markdown(d: Diff, peak: Change) -> list[str]:
    """'What grew in forward buffer 1 (cpu): 10.0 KiB ... -> 18.0 KiB ..., +8.0 KiB (+80.0%)', where its peak is, and a table of
    the blocks (or, where a side names no modules, the operators) whose bytes there changed,
    most changed first."""
    size = _size_change(d, peak)
    grew = f": {change_values(size)}" if size else ""
    detail = peak_detail(peak)
    lines = [
        f"**What grew in {_cell(f'{peak.method} {peak.subject}')}**{_cell(grew)}; peak: {_cell(change_values(peak))}",
        "",
        f"| {detail['by']} | before | after | change |",
        "| --- | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {_cell(name)} | {size_text(was)} | {size_text(now)} | {signed_size(now - was)} |"
        for name, was, now in shares(detail)
    ]
    if detail["more"]:
        lines.append(f"| and {detail['more']} more {'operators' if detail['by'] == 'operator' else 'blocks'} | | | |")
    return lines + [""]


def _size_change(d: Diff, peak: Change) -> Change | None:
    """The size change of the buffer whose peak changed, if its size changed."""
    return next((c for c in d.changes if (c.method, c.subject, c.fact) == (peak.method, peak.subject, "size")), None)


def _cell(text: str) -> str:
    """Text from files as one table cell: printable, and nothing Markdown would read as syntax."""
    return "".join("\\" + c if c in _MARKDOWN_SPECIAL else c for c in printable(text))


def _code(text: str) -> str:
    return f"`{printable(text).replace('`', chr(39))}`"  # a backtick would end the code span


def _joined(lines: list[str]) -> str:
    return "\n".join(line.rstrip() for line in lines).rstrip("\n") + "\n"


# GitHub's workflow commands


@dataclass(frozen=True)
class Declared:
    """Where check's limits were declared, for the annotations of the buffers that fail them: a
    file of the pull request, not the .pte (a build artifact it lacks). The workflow file GitHub
    runs (GITHUB_WORKFLOW_REF), at the line giving the --budget (or --max-ratio); else the
    golden file; else no file (the annotation is the run's)."""

    workflow: str | None = None  # its path from the repository's root
    lines: tuple[str, ...] = ()  # the workflow's lines
    golden: str | None = None
    budgets: Mapping[str, str] = field(default_factory=dict)  # budget key -> the --budget text giving it
    golden_lines: Mapping[KeyPath, tuple[int, str]] = field(default_factory=dict)  # its key_lines

    def at(self, c: BufferCheck) -> tuple[str | None, int | None]:
        """(file, line) for a failing buffer's annotation."""
        if self.workflow is None:  # the golden file, at the buffer's (or device's) size where it records it
            subject = f"buffer {c.mem_id} ()" if c.mem_id is not None else f"device {c.device} ()"
            return self.golden, change_line(self.golden_lines, c.method, subject, "size")
        key = str(c.mem_id) if c.mem_id is not None else c.device + (BACKENDS if c.backends else "")
        wanted = [self.budgets[key]] if key in self.budgets and c.budget is not None else []
        wanted += ["--max-ratio", "devplan check"]
        found = next((n for text in wanted for n, line in enumerate(self.lines, 1) if text in line), None)
        return self.workflow, found


WORKFLOW_BYTES = 1 << 20  # a workflow file is a few KiB; one past this is not read


def declared(budgets: list[str], golden: str | None) -> Declared:
    """Where the budgets given as `--budget` texts were declared (Declared), read from the
    workflow file that GITHUB_WORKFLOW_REF names (owner/repo/PATH@ref), found under
    GITHUB_WORKSPACE (else the current folder); outside GitHub's runner, the golden file."""
    from devplan.files import read_input
    from devplan.planning.budget import budget_key, parse_budget

    keys = {budget_key(parse_budget(text)[0]): text for text in budgets}
    lines = golden_lines(golden) if golden is not None else {}
    ref = os.environ.get("GITHUB_WORKFLOW_REF", "")
    path = "/".join(ref.partition("@")[0].split("/")[2:])
    root = Path(os.environ.get("GITHUB_WORKSPACE") or ".")
    if not path or ".." in Path(path).parts or not (root / path).is_file():
        return Declared(golden=golden, budgets=keys, golden_lines=lines)
    try:
        text = read_input(root / path, limit=WORKFLOW_BYTES, hint="").decode("utf-8", "replace")
    except DevplanError:  # unreadable: the annotations go where they would outside the runner
        return Declared(golden=golden, budgets=keys, golden_lines=lines)
    return Declared(path, tuple(text.splitlines()), golden, keys, lines)


def golden_lines(path: str) -> dict[KeyPath, tuple[int, str]]:
    """The golden file's key_lines, or none where it cannot be read as a file (standard input,
    a file not there yet): its annotations then name the file alone."""
    from devplan.files import STDIO, read_input
    from devplan.inspection.golden import MAX_GOLDEN_BYTES

    if path == STDIO or not Path(path).is_file():
        return {}
    try:
        return key_lines(read_input(path, limit=MAX_GOLDEN_BYTES, hint="").decode("utf-8", "replace"))
    except DevplanError:
        return {}


def check_github(
    checks: list[BufferCheck],
    matched: GoldenCheck | None,
    golden: str,
    where: Declared,
    runtime: CheckedRuntime | None = None,
    build: str = "",
) -> list[str]:
    """An error per failing buffer where its limit was declared (`where`); on the golden file,
    an error per difference and a notice per change allowed; on the runtime build's list
    (`build`, its path), an error per thing it lacks."""
    lines = []
    for c in checks:
        if not c.ok:
            file, line = where.at(c)
            lines.append(_command("error", file, f"devplan check: {buffer_name(c)}", _buffer_message(c), line))
    if matched is not None and matched.diff is not None:
        lines += diff_github(matched.diff, golden, where.golden_lines)
    for m in runtime["missing"] if runtime is not None else ():
        lines.append(
            _command("error", build, f"devplan check: {m['method']} needs {m['kind']} {m['name']}", m["detail"])
        )
    return lines


def run_github(reference: Reference, program: str) -> list[str]:
    """An error on the program per output that fails against the reference."""
    return [
        _command("error", program, f"devplan run: output {o['index']}", _output_message(reference, o))
        for o in reference["outputs"]
        if not o["passed"]
    ]


def _output_message(reference: Reference, o: OutputComparison) -> str:
    if o["note"] is not None:
        return f"against {reference['file']['name']}: {o['note']}"
    judged = (
        f"SQNR {_measure(o['sqnr_db'], ' dB', 'exact')}, under {reference['min_sqnr_db']:g} dB"
        if reference["min_sqnr_db"] is not None
        else f"not allclose (atol {reference['atol']:g}, rtol {reference['rtol']:g}): max abs {_measure(o['max_abs'])}"
    )
    return f"against {reference['file']['name']}: {judged}"


def diff_github(d: Diff, file: str, lines_of: Mapping[KeyPath, tuple[int, str]] | None = None) -> list[str]:
    """An error on `file` per difference, its cause (the blocks that grew at the buffer's peak)
    in the message, and a notice per change allowed; a peak told in an error is not repeated.
    Where `file` is a golden file, `lines_of` (its key_lines) puts each at its fact's line."""
    told = {(c.method, c.subject) for c in d.changes if c.fails and _peak_of(d, c) is not None}
    lines = []
    for change in d.changes:
        if change.fact == "peak" and not change.fails and (change.method, change.subject) in told:
            continue
        title = f"devplan: {change.method + ' ' if change.method else ''}{change_label(change)}"
        line = change_line(lines_of, change.method, change.subject, change.fact) if lines_of else None
        lines.append(_command("error" if change.fails else "notice", file, title, _change_message(d, change), line))
    return lines


def _buffer_message(c: BufferCheck) -> str:
    peak = f"\n{peak_words(c)}, {peak_text(c.peak)}" if not c.ok and c.peak is not None else ""
    return "; ".join(buffer_facts(c)) + peak


def _change_message(d: Diff, change: Change) -> str:
    """The change, then what its buffer's peak says of it: where, and which blocks grew."""
    lines = [change_values(change)]
    peak = change if change.fact == "peak" else _peak_of(d, change) if change.fails else None
    if peak is not None:
        if peak is not change:
            lines.append(f"peak: {change_values(peak)}")
        lines += [share_text(*share) for share in shares(peak_detail(peak))]
    return "\n".join(lines)


def _peak_of(d: Diff, change: Change) -> Change | None:
    """The peak change of the buffer a size change is about."""
    if change.fact != "size":
        return None
    return next(
        (c for c in d.changes if (c.method, c.subject, c.fact) == (change.method, change.subject, "peak")), None
    )


def _command(kind: str, file: str | None, title: str, message: str, line: int | None = None) -> str:
    """'::error file=F,line=N,title=T::M' (file and line where known), escaped as GitHub's
    toolkit escapes them (its command.ts): a message's %, CR and LF; a property's also : and ,
    (which would end it)."""
    where = (f"file={_property(file)}," if file is not None else "") + (f"line={line}," if line is not None else "")
    return f"::{kind} {where}title={_property(title)}::{_data(message)}"


def _data(text: str) -> str:
    # escaped first, CR and LF cannot start a command of their own; then printable escapes
    # the terminal controls that names from files may hold, and inert a legacy ##[ command
    return inert(printable(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")))


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


# JUnit XML


def check_junit(
    checks: list[BufferCheck],
    matched: GoldenCheck | None,
    golden: str,
    name: str,
    program: str,
    runtime: CheckedRuntime | None = None,
    build: str = "",
) -> bytes:
    """A test suite of the buffers (one test case each), one of the golden file's changes, and
    one of the runtime build's verdict (a failing case per thing it lacks)."""
    root = ET.Element("testsuites", name=f"devplan check {printable(name)}")
    suite = _suite(root, f"devplan check {name}")
    for c in checks:
        _case(suite, "devplan.check", buffer_name(c), program, None if c.ok else _buffer_message(c))
    if matched is not None:
        suite = _suite(root, f"golden {golden}")
        if matched.diff is not None:
            _changes_junit(suite, "devplan.golden", matched.diff, golden)
        else:  # --update: the golden file was written, which passes
            _case(suite, "devplan.golden", f"wrote it from {name}", golden, None)
    if runtime is not None:
        suite = _suite(root, f"runtime build {runtime['file']['name']}")
        for m in runtime["missing"]:
            _case(suite, "devplan.runtime", f"{m['method']} needs {m['kind']} {m['name']}", build, m["detail"])
        if runtime["ok"]:
            _case(suite, "devplan.runtime", "has what the program needs", build, None)
    return _xml(root)


def run_junit(reference: Reference, name: str, program: str) -> bytes:
    """One test suite, a test case per output held against the reference."""
    root = ET.Element("testsuites", name=f"devplan run {printable(name)}")
    suite = _suite(root, f"devplan run {name} against {reference['file']['name']}")
    for o in reference["outputs"]:
        _case(
            suite,
            "devplan.run",
            f"output {o['index']}",
            program,
            None if o["passed"] else _output_message(reference, o),
        )
    return _xml(root)


def diff_junit(d: Diff, file: str) -> bytes:
    """One test suite, a test case per change."""
    root = ET.Element("testsuites", name=f"devplan diff {printable(d.a)} -> {printable(d.b)}")
    _changes_junit(_suite(root, f"devplan diff {d.a} -> {d.b}"), "devplan.diff", d, file)
    return _xml(root)


def _changes_junit(suite: ET.Element, classname: str, d: Diff, file: str) -> None:
    """A test case per change, failing where it is a difference; one that passes when none."""
    for change in d.changes:
        name = f"{change.method + ' ' if change.method else ''}{change_label(change)}"
        _case(suite, classname, name, file, _change_message(d, change) if change.fails else None)
    if not d.changes:
        _case(suite, classname, outcome(d), file, None)


def _suite(root: ET.Element, name: str) -> ET.Element:
    return ET.SubElement(root, "testsuite", name=printable(name))


def _case(suite: ET.Element, classname: str, name: str, file: str, failure: str | None) -> None:
    case = ET.SubElement(suite, "testcase", classname=classname, name=printable(name), file=printable(file))
    if failure is not None:
        shown = _data_text(failure)
        ET.SubElement(case, "failure", message=shown.split("\n")[0], type="devplan").text = shown


def _data_text(text: str) -> str:
    # XML 1.0 holds no control characters but tab and line breaks: names from files are escaped
    return "\n".join(printable(line) for line in text.split("\n"))


def _xml(root: ET.Element) -> bytes:
    """The document, each suite counting its tests and failures as JUnit readers expect."""
    for suite in root:
        cases = list(suite)
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(case.find("failure") is not None for case in cases)))
        suite.set("errors", "0")
        suite.set("skipped", "0")
    root.set("tests", str(sum(int(s.get("tests", "0")) for s in root)))
    root.set("failures", str(sum(int(s.get("failures", "0")) for s in root)))
    ET.indent(root)
    written: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return written + b"\n"
