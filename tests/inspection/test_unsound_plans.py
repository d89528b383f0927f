"""check, diff and golden files see a plan that is not sound: a delegate window moved under
tensors alive at its call fails diff and the golden check, and a peak below the bytes that must
be apart is flagged by inspect and fails check. Each test builds its bad program itself."""

from __future__ import annotations

import json

import devplan
from tests.inspection.runner import invoke


def test_a_moved_delegate_window_fails_diff_and_the_golden_check(blocks, tmp_path):
    result = devplan.diff(blocks["good"], blocks["moved"])
    windows = [c for c in result.changes if c.fact == "window"]
    assert not result.ok and [(c.subject, c.fails) for c in windows] == [("delegate 0", True), ("delegate 1", True)]
    assert windows[0].a == {"mem_id": 2, "offset": 1024, "size": 1024} and windows[0].b["offset"] == 0
    assert "FAIL  delegate 0 window: buffer 2 @1024 (1.0 KiB) -> buffer 2 @0 (1.0 KiB)" in result.text()
    golden = tmp_path / "blocks.golden.json"
    assert invoke("check", str(blocks["good"]), "--golden", str(golden), "--update").exit_code == 0
    assert not devplan.diff(golden, blocks["moved"]).ok  # a golden file as either side
    assert not devplan.diff(blocks["moved"], golden).ok
    checked = invoke("check", str(blocks["moved"]), "--golden", str(golden), "--tolerance", "50%")
    assert checked.exit_code == 1 and "delegate 0 window: buffer 2 @1024" in checked.stdout


def test_a_peak_below_the_bytes_that_must_be_apart_is_flagged_and_fails_check(blocks):
    (good, moved) = (devplan.inspect(blocks[name])["methods"][0]["buffers"][1] for name in ("good", "moved"))
    # the good plan is as small as its bound at CUDA's 512-byte alignment; its live bytes are fewer
    assert "problem" not in good and good["peak"] <= good["lower_bound"] == good["size"]
    assert moved["peak"] < moved["lower_bound"] and moved["problem"].startswith("unsound plan: peak 1024 bytes")
    text = invoke("inspect", str(blocks["moved"]), "--section", "buffers")
    assert text.exit_code == 0 and "buffer 2 (cuda:0): unsound plan: peak 1024 bytes" in text.stdout
    assert all(c.ok for c in devplan.check(blocks["good"]))
    (bad,) = [c for c in devplan.check(blocks["moved"]) if not c.ok]
    assert (bad.mem_id, bad.problem) == (2, moved["problem"])
    run = invoke("check", str(blocks["moved"]), "--json")
    report = json.loads(run.stdout)
    assert run.exit_code == 1 and report["ok"] is False and report["buffers"][1]["problem"] == moved["problem"]
