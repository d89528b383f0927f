"""A golden round trip as a user's project goes through it (issue 27's acceptance): a throwaway
project whose programs are compiled, recorded, checked and compared by `devplan` and pytest in
fresh processes. A widened layer is named by its module in `check --golden`, `diff` and the
pytest failure; a change that only adds one op reads as one added tensor; `--update` writes
into a new folder; a golden and an `-o` behind symbolic links keep their links; and `-o
/dev/stdout` piped into `devplan inspect -` shows the program."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.test_pytest_plugin import pytest_in

ROOT = Path(__file__).resolve().parents[1]

USER_TEST = """
from pathlib import Path

from devplan.testing import assert_matches_golden

HERE = Path(__file__).parent


def test_model_plan():
    assert_matches_golden(HERE / "build" / "model.pte", HERE / "golden.json")
"""


class Tower(torch.nn.Module):
    """Two blocks; `width` widens `wide`'s hidden layer, `double` adds one op between them."""

    def __init__(self, width: int, double: bool = False) -> None:
        super().__init__()
        self.narrow = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
        self.wide = torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.ReLU(), torch.nn.Linear(width, 16))
        self.double = double

    def forward(self, x):
        h = self.narrow(x)
        if self.double:
            h = h * 2
        return self.wide(h)


def _export(path: Path, width: int, double: bool = False) -> Path:
    torch.manual_seed(0)
    torch.export.save(torch.export.export(Tower(width, double).eval(), (torch.randn(32, 16),)), path)
    return path


def _devplan(project: Path, *args) -> subprocess.CompletedProcess:
    # this checkout's devplan, from the project's folder (where -m would find the installed one)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run(
        [sys.executable, "-m", "devplan", *map(str, args)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def _joined(text: str) -> str:
    """Output with the changes that wrapped past 80 columns joined back into one line each."""
    return text.replace("\n        ", " ")


@pytest.mark.sweep  # fresh processes end to end; the fast tier has each step's own test
def test_a_golden_round_trip_in_a_throwaway_project(tmp_path):
    project = tmp_path / "project"
    (project / "build").mkdir(parents=True)
    (project / "real").mkdir()
    (project / "test_plan.py").write_text(USER_TEST)
    base, wide, doubled = (
        _export(project / f"{name}.pt2", *shape)
        for name, shape in (("base", (32,)), ("wide", (128,)), ("doubled", (32, True)))
    )

    # -o behind a link writes its target and keeps the link
    (project / "build" / "model.pte").symlink_to(project / "real" / "model.pte")
    assert _devplan(project, "compile", base, "-o", "build/model.pte").returncode == 0
    assert (project / "build" / "model.pte").is_symlink() and (project / "real" / "model.pte").stat().st_size > 0
    assert _devplan(project, "compile", base, "-o", "base.pte").returncode == 0

    # --update into a new folder, then a golden behind a link, updated through it
    new = _devplan(project, "check", "build/model.pte", "--golden", "goldens/new/model.json", "--update")
    assert new.returncode == 0 and (project / "goldens" / "new" / "model.json").is_file(), new.stdout + new.stderr
    (project / "golden.json").symlink_to(project / "goldens" / "new" / "model.json")
    relinked = _devplan(project, "check", "build/model.pte", "--golden", "golden.json", "--update")
    assert relinked.returncode == 0 and (project / "golden.json").is_symlink(), relinked.stderr
    passed = pytest_in(project)
    assert passed.returncode == 0 and "1 passed" in passed.stdout, passed.stdout + passed.stderr

    # a widened layer: check --golden, diff and the pytest failure name its module
    assert _devplan(project, "compile", wide, "-o", "build/model.pte").returncode == 0
    assert (project / "build" / "model.pte").is_symlink()
    checked = _devplan(project, "check", "build/model.pte", "--golden", "golden.json")
    compared = _devplan(project, "diff", "base.pte", "build/model.pte")
    failed = pytest_in(project)
    assert (checked.returncode, compared.returncode, failed.returncode) == (1, 1, 1), checked.stderr + compared.stderr
    for shown in (checked.stdout, compared.stdout, failed.stdout.replace("\nE       ", "\n")):
        lines = _joined(shown).splitlines()
        assert any("buffer 1 (cpu) size: " in line and " bytes) -> " in line for line in lines), shown
        # the peak, where the model made it, and the block that grew, each on a line of its own
        assert any(line.strip().startswith("wide") and " +" in line for line in shown.splitlines()), shown
        assert any("buffer 1 (cpu) peak: " in line and "wide.0 (Linear)" in line for line in lines), shown

    # one more op: one added tensor, nothing resized, moved or relived
    assert _devplan(project, "compile", doubled, "-o", "doubled.pte").returncode == 0
    one_op = _devplan(project, "diff", "base.pte", "doubled.pte").stdout
    assert re.search(r"\n  placements: (\d+) -> \d+ tensors: 1 added\n", one_op), one_op  # no gate: no labels
    assert "operators added: aten::mul.Scalar_out" in one_op and "resized" not in one_op, one_op
    added = [line for line in one_op.splitlines() if " added: buffer " in line]
    assert len(added) == 1 and "mul" in added[0], one_op

    # the program on standard output, read back from standard input
    python = shlex.quote(sys.executable)
    pipeline = subprocess.run(
        f"{python} -m devplan compile base.pt2 -o /dev/stdout 2>/dev/null | {python} -m devplan inspect -",
        shell=True,
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert pipeline.returncode == 0, pipeline.stderr
    assert pipeline.stdout.startswith("<stdin>") and "ET12" in pipeline.stdout and "peak" in pipeline.stdout
