"""Golden files: `devplan inspect --json` of each bundled sample compiled with default options
(and one with a delegate), as committed. A change in devplan's output, whether in the plan,
the program or the document's keys, shows up here as a file diff; after checking that the
change is intended, run `python -m pytest tests/test_golden.py --update-golden` and commit."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import devplan

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
CASES = {"mlp": (), "cnn": (), "transformer": (), "two_io": (), "two_io_cuda": ("cuda:0=aten::linear",)}


@pytest.mark.parametrize("name", CASES)
def test_inspect_json_matches_the_golden_file(name, request):
    delegates = CASES[name]
    result = devplan.compile(ROOT / "samples" / f"{name.split('_cuda')[0]}.pt2", delegates=delegates)
    doc = devplan.inspect(result.data)
    doc["file"]["name"] = f"{name}.pte"  # compiled in memory; name it as the CLI would have written it
    text = json.dumps({"pte_sha256": hashlib.sha256(result.data).hexdigest(), "inspect": doc},
                      sort_keys=True, indent=2) + "\n"
    path = GOLDEN / f"{name}.json"
    if request.config.getoption("--update-golden"):
        path.write_text(text)
    assert path.exists(), f"{path} is missing; run pytest with --update-golden to write it"
    assert text == path.read_text(), (f"devplan's output for {name} changed; if intended, "
                                      f"run `python -m pytest tests/test_golden.py --update-golden`")
