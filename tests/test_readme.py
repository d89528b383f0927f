"""The sample outputs of README and docs/ are what devplan prints: each fenced block that a
`<!-- generated: SETUP -->` line introduces starts with `$ devplan ARGS`, and the rest of it is
that command's output, run in an empty folder after SETUP (`devplan ...` and `cp FILE NAME`
steps joined by ` && `, paths from the repository root). `DEVPLAN_UPDATE_README=1 python -m
pytest tests/test_readme.py` rewrites the blocks from the code.

The steps run in the test's own folder: each repository file a step reads is copied there
first, so a step's output never lands in the checkout (where the README's quickstart leaves
a `mlp.pte` of the user's)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

from typer.testing import CliRunner

from devplan.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# README and the docs/ pages it links, whose samples are printed as README's are
PAGES = (README, *sorted((ROOT / "docs").glob("*.md")))
BLOCK = re.compile(
    r"<!-- generated: (?P<setup>.*?) -->\n```\n\$ devplan (?P<command>.*?)\n(?P<output>.*?)```", re.DOTALL
)
OUTPUTS = frozenset({"-o", "--output", "--svg", "--trace", "--save", "--external-constants", "--dump-dir"})


def _devplan(args: list[str]) -> str:
    result = CliRunner().invoke(app, args, env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.exit_code in (0, 1), (args, result.output, result.exception)
    return result.stdout


def _staged(root: Path, words: list[str]) -> list[str]:
    """The words as they are, each repository file an input names copied into the working
    folder under the same relative path (an output's name is left alone: the step makes it)."""
    for before, word in zip(["", *words], words):
        if before not in OUTPUTS and (root / word).is_file() and not Path(word).exists():
            Path(word).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(root / word, word)
    return words


def _output(root: Path, setup: str, command: str) -> str:
    for step in setup.split(" && "):
        words = shlex.split(step)
        if words[0] == "cp":
            shutil.copy(root / words[1], words[2])
        else:
            assert words[0] == "devplan", step
            _devplan(_staged(root, words[1:]))
    return _devplan(shlex.split(command))


def _samples(root: Path, text: str) -> tuple[str, list[str]]:
    """The page with each sample as devplan prints it now, and the samples that differ."""
    blocks = list(BLOCK.finditer(text))
    pieces, end, stale = [], 0, []
    for block in blocks:
        printed = _output(root, block["setup"], block["command"])
        if printed != block["output"]:
            stale.append(f"$ devplan {block['command']}\n{printed}")
        pieces += [text[end : block.start("output")], printed]
        end = block.end("output")
    return "".join(pieces) + text[end:], stale


def test_the_readme_samples_are_what_devplan_prints(tmp_path, monkeypatch):
    stale, commands = [], []
    for page in PAGES:
        (tmp_path / page.name).mkdir()
        monkeypatch.chdir(tmp_path / page.name)
        text = page.read_text()
        commands += [block["command"].split()[0] for block in BLOCK.finditer(text)]
        rewritten, differ = _samples(ROOT, text)
        if os.environ.get("DEVPLAN_UPDATE_README"):
            page.write_text(rewritten)
        stale += [f"{page.relative_to(ROOT)}:\n{sample}" for sample in differ]
    assert {"check", "diff", "inspect", "run"} <= set(commands), commands
    assert not stale, (
        "samples differ from what devplan prints now (DEVPLAN_UPDATE_README=1 rewrites them):\n" + "\n".join(stale)
    )


def test_the_samples_leave_the_checkout_alone(tmp_path, monkeypatch):
    """Issue 37: after the README's quickstart, a checkout holds the user's mlp.pte; the samples
    ran `devplan compile ... -o mlp.pte` over it and then checked another file."""
    checkout, work = tmp_path / "checkout", tmp_path / "work"
    for name in ("README.md", "samples/mlp.pt2", "samples/cnn.pt2", "tests/golden/mlp.golden.json"):
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, checkout / name)
    users = {name: f"the user's {name}".encode() for name in ("mlp.pte", "yesterday.pte", "today.pte")}
    for name, data in users.items():
        (checkout / name).write_bytes(data)
    work.mkdir()
    monkeypatch.chdir(work)
    stale = [sample for page in PAGES for sample in _samples(checkout, page.read_text())[1]]
    assert not stale, stale
    assert {name: (checkout / name).read_bytes() for name in users} == users


def _plugin_flags() -> set[str]:
    """The flags devplan's pytest plugin adds, as pytest would be told them."""
    from devplan import pytest_plugin

    class Group:
        def __init__(self) -> None:
            self.flags: set[str] = set()

        def addoption(self, *names: str, **_) -> None:
            self.flags.update(names)

    group = Group()
    pytest_plugin.pytest_addoption(type("Parser", (), {"getgroup": lambda self, name: group})())
    return group.flags


def test_the_ci_job_runs_the_projects_tests_strictly_and_says_how_to_update():
    """Issue 37: the GitHub Actions job (docs/ci.md, which README links) shows the pytest plugin as
    CI uses it: the project's tests with --devplan-strict-goldens, and how to accept a change with
    --devplan-update-golden; every plugin flag README and docs/ name is one the plugin adds."""
    text = (ROOT / "docs" / "ci.md").read_text()
    assert "(docs/ci.md)" in README.read_text()
    ci = text[text.index("\n## CI\n") :]
    ci = ci[: ci.index("\n## ", 1)]
    job = re.search(r"```yaml\n(.*?)```", ci, re.DOTALL)
    assert job is not None, ci
    runs = [line.split("run:", 1)[1].strip() for line in job[1].splitlines() if line.strip().startswith("run:")]
    assert any(run.startswith("python -m pytest") and "--devplan-strict-goldens" in run.split() for run in runs), runs
    after = " ".join(ci[job.end() :].split())
    assert "python -m pytest --devplan-update-golden" in after, after
    named = {flag for page in PAGES for flag in re.findall(r"--devplan-[a-z-]+", page.read_text())}
    assert named and named <= _plugin_flags(), named - _plugin_flags()
