"""The README's sample outputs are what devplan prints: each fenced block that a
`<!-- generated: SETUP -->` line introduces starts with `$ devplan ARGS`, and the rest of it is
that command's output, run in an empty folder after SETUP (`devplan ...` and `cp FILE NAME`
steps joined by ` && `, paths from the repository root). `DEVPLAN_UPDATE_README=1 python -m
pytest tests/test_readme.py` rewrites the blocks from the code."""
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
BLOCK = re.compile(r"<!-- generated: (?P<setup>.*?) -->\n```\n\$ devplan (?P<command>.*?)\n(?P<output>.*?)```", re.DOTALL)


def _devplan(args: list[str]) -> str:
    result = CliRunner().invoke(app, args, env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.exit_code in (0, 1), (args, result.output, result.exception)
    return result.stdout


def _output(setup: str, command: str) -> str:
    for step in setup.split(" && "):
        words = shlex.split(step)
        if words[0] == "cp":
            shutil.copy(ROOT / words[1], words[2])
        else:
            assert words[0] == "devplan", step
            _devplan([str(ROOT / word) if (ROOT / word).is_file() else word for word in words[1:]])
    return _devplan(shlex.split(command))


def test_the_readme_samples_are_what_devplan_prints(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = README.read_text()
    blocks = list(BLOCK.finditer(text))
    assert len(blocks) >= 2  # check --golden and diff
    pieces, end, stale = [], 0, []
    for block in blocks:
        printed = _output(block["setup"], block["command"])
        if printed != block["output"]:
            stale.append(f"$ devplan {block['command']}\n{printed}")
        pieces += [text[end:block.start("output")], printed]
        end = block.end("output")
    if os.environ.get("DEVPLAN_UPDATE_README"):
        README.write_text("".join(pieces) + text[end:])
    assert not stale, "README samples differ from what devplan prints now (DEVPLAN_UPDATE_README=1 rewrites them):\n" \
        + "\n".join(stale)
