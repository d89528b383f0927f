"""Blocks are listed as people count them, h.2 before h.10, wherever a list names them: the
peak's blocks in inspect, a golden file's per-block bytes, and the blocks that grew in diff
and check --golden."""

from __future__ import annotations

import json
from pathlib import Path

from devplan.inspection.diff import diff
from devplan.inspection.golden import golden_text
from devplan.inspection.peak import peak

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "transformer.golden.json"
BLOCKS = ["h.10", "h.2", "h.1", "h.11"]
COUNTED = ["h.1", "h.2", "h.10", "h.11"]


def test_the_peak_lists_blocks_of_equal_bytes_in_counting_order():
    placed = [
        {
            "value": i,
            "nbytes": 64,
            "held": [0, 0],
            "offset": 64 * i,
            "role": "activation",
            "source": "",
            "module": f"{block}.mlp",
        }
        for i, block in enumerate(BLOCKS)
    ]
    rows = [{"source": None, "op": "aten::add.out", "kind": "kernel"}]
    entry = peak({"mem_id": 1, "device": "cpu", "peak_instruction": 0, "peak": 256}, placed, rows)
    assert [m["module"] for m in entry["modules"]] == COUNTED


def _golden(modules: dict[str, int]) -> dict:
    golden = json.loads(GOLDEN.read_text())
    golden["methods"][0]["buffers"][0]["peak"]["modules"] = modules
    return golden


def test_a_golden_file_lists_blocks_in_counting_order():
    text = golden_text(_golden({block: 1024 for block in BLOCKS}))
    assert [block for block in sorted(BLOCKS, key=text.index)] == COUNTED


def test_diff_lists_blocks_that_grew_alike_in_counting_order(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(golden_text(_golden({block: 1024 for block in BLOCKS})))
    b.write_text(golden_text(_golden({block: 2048 for block in BLOCKS})))
    (change,) = [c for c in diff(a, b).changes if c.fact == "peak"]
    assert [m["module"] for m in change.detail["modules"]] == COUNTED
    shown = [line.split()[0] for line in diff(a, b).text().splitlines() if line.strip().startswith("h.")]
    assert shown == COUNTED
