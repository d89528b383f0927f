"""Golden files: each bundled sample compiled with default options (and one with a delegate),
as committed, twice over. NAME.golden.json is the reviewable golden document that users keep
(`devplan check --golden`), checked through the same helper users call; NAME.json is the whole
`devplan inspect --json` with the .pte's SHA-256, so that any change in the program bytes or
the document's keys shows up too. After checking that a change is intended, run
`python -m pytest tests/test_golden.py --devplan-update-golden` and commit."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import devplan
from devplan.testing import assert_matches_golden

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
CASES = {"mlp": (), "cnn": (), "transformer": (), "two_io": (), "two_io_cuda": ("cuda:0=aten::linear",)}


@pytest.fixture(scope="module", params=CASES)
def program(request, tmp_path_factory) -> tuple[str, Path]:
    """(case name, the .pte compiled from its sample, named as the CLI would have written it)."""
    name = request.param
    path = tmp_path_factory.mktemp(name) / f"{name}.pte"
    devplan.compile(ROOT / "samples" / f"{name.split('_cuda')[0]}.pt2", path, delegates=CASES[name])
    return name, path


def test_the_plan_matches_the_golden_file(program, request):
    name, path = program
    assert_matches_golden(
        path, GOLDEN / f"{name}.golden.json", update=request.config.getoption("devplan_update_golden")
    )


def test_inspect_json_matches_the_golden_file(program, request):
    name, path = program
    data = path.read_bytes()
    text = (
        json.dumps(
            {"pte_sha256": hashlib.sha256(data).hexdigest(), "inspect": devplan.inspect(path)}, sort_keys=True, indent=2
        )
        + "\n"
    )
    golden = GOLDEN / f"{name}.json"
    if request.config.getoption("devplan_update_golden"):
        golden.write_text(text)
    assert golden.exists(), f"{golden} is missing; run pytest with --devplan-update-golden to write it"
    assert text == golden.read_text(), (
        f"devplan's output for {name} changed; if intended, "
        f"run `python -m pytest tests/test_golden.py --devplan-update-golden`"
    )
