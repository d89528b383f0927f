"""README as a new user reads it (issue 55.8): what devplan is and for whom, then the two set-up
commands, then a short tour, under LINES lines; the reference moved to docs/ pages that README
links, every link there and back pointing at a file and heading that exist; and the Python
section's examples doing what their text says (the summary is a dict; both golden-file APIs read
the test file's paths from its folder)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
from pathlib import Path

import devplan
from tests.test_pytest_plugin import pytest_in

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
LINES = 250
# reference detail README held before, and the page it lives on now (issue 55's list among them)
MOVED = {
    "conventions.md": ("## Exit codes", "written atomically through one writer", "two outputs on standard output"),
    "safety.md": ("against an allowlist of what `torch.export.save`", "benchmarks/fuzz.py", "zip bomb"),
    "compile.md": ("## Quantizing", "## External weights", "## Mixture of experts", "control flow and other"),
    "planning.md": ("## Memory planning", "## Constant folding", "selected_operators.yaml"),
    "ci.md": ("### Reports for CI", "```yaml", "--devplan-strict-goldens"),
    "run.md": ("--min-sqnr", "CUDA graph"),
    "llm.md": ("<!-- llm-example-export-llama -->", "## Long contexts", "WhitespaceSplit"),
    "python.md": ("memory_planning_algo", "DeviceAllocator", "--devplan-force-regen"),
    "inspect.md": ("--oplist", "--trace", "--delegate N"),
    "benchmarks.md": ("geometric mean",),
    "devtools.md": ("--etrecord", "calculate_numeric_gap", "--debug-buffer"),
}
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)  # a # in a block is no heading
    return {_slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def test_readme_opens_with_what_devplan_is_then_the_two_commands():
    text = README.read_text()
    title, opening, first, second, rest = re.match(
        r"(# devplan\n)\n((?:(?!```)[^\n]+\n)+)\n```bash\n(.*?)\n```\n\n```bash\n(.*?)\n```\n(.*)", text, re.DOTALL
    ).groups()
    sentences = [s for s in re.split(r"(?<=\.)\s+", " ".join(opening.split())) if s]
    assert len(sentences) == 2, sentences
    assert "ExecuTorch" in sentences[0] and "torch.export" in sentences[0] and sentences[1].startswith("It is for")
    # the quickstart and the test command, as tests/test_toolchain.py holds the second to .ci/run's steps
    assert first == (
        "pip install torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu && pip install . "
        "&& devplan compile samples/mlp.pt2 -o mlp.pte && devplan inspect mlp.pte"
    )
    assert second.endswith('pip install ".[test]" && python -m pytest -n auto')
    tour = re.findall(r"^### (.+)$", rest[rest.index("## A short tour") : rest.index("\n## Commands")], re.M)
    assert tour == ["Compile", "Inspect", "Check in CI", "Run", "LLMs"]


def test_readme_stays_short():
    count = len(README.read_text().splitlines())
    assert count <= LINES, f"README.md is {count} lines; move reference detail to docs/ (at most {LINES})"


def test_every_moved_section_is_reachable_from_readme():
    linked = set(LINK.findall(README.read_text()))
    for page, phrases in MOVED.items():
        assert f"docs/{page}" in linked, f"README links no docs/{page}"
        text = (DOCS / page).read_text()
        assert all(phrase in text for phrase in phrases), (page, [p for p in phrases if p not in text])
    pages = {path.name for path in DOCS.glob("*.md")}
    assert pages <= {target.removeprefix("docs/") for target in linked}, pages  # none left out


def test_every_link_in_readme_and_docs_exists():
    for page in (README, *DOCS.glob("*.md")):
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):  # a web address: not this checkout's
                continue
            path, _, anchor = target.partition("#")
            found = (page.parent / path).resolve() if path else page
            assert found.exists(), f"{page.relative_to(ROOT)}: {target} names no file"
            if anchor:
                assert anchor in _anchors(found), f"{page.relative_to(ROOT)}: {target} names no heading"


def _python_block(after: str) -> str:
    """README's python block that follows the line `after` (a heading or a marker) at once."""
    return re.search(rf"{re.escape(after)}\n+```python\n(.*?)```", README.read_text(), re.DOTALL)[1]


def test_the_python_sections_summary_is_the_dict_its_comment_says(tmp_path, monkeypatch):
    """Issue 55: `print(result.summary())` printed a dict where the text implied the CLI's lines."""
    block = _python_block("## Python")
    lines = block.splitlines()
    upto = next(i for i, line in enumerate(lines) if line.startswith("print("))
    shutil.copy(ROOT / "samples" / "mlp.pt2", tmp_path / "model.pt2")
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec("\n".join(lines[: upto + 1]), {})
    said = lines[upto].split("# ", 1)[1].rstrip(".]}")
    assert printed.getvalue().startswith(said.rstrip(", .")), (printed.getvalue(), said)


def test_the_pytest_snippets_two_ways_read_the_same_paths_from_any_folder(tmp_path):
    """Issue 55: `build/model.pte` was the working folder's in assert_matches_golden and the test
    file's in devplan_golden. As printed, both pass from the project's root and from tests/."""
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "build").mkdir()
    (project / "tests" / "test_plan.py").write_text(_python_block("<!-- pytest-example -->"))
    devplan.compile(ROOT / "samples" / "mlp.pt2", project / "build" / "model.pte")
    written = pytest_in(project, "tests", "--devplan-update-golden")
    assert written.returncode == 0, written.stdout
    assert (project / "tests" / "golden" / "model.json").exists()
    for cwd in (project, project / "tests"):
        again = pytest_in(project, cwd=cwd)
        assert again.returncode == 0 and "2 passed" in again.stdout, (os.fspath(cwd), again.stdout)
