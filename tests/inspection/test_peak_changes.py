"""Where in the model memory grew (issue 27, defect 2): golden files record each buffer's peak
(instruction, op, source) and each block's bytes there; `diff`, `check --golden`, the pytest
helper and a failing `check --budget` name the blocks that grew and where the peak moved."""

from __future__ import annotations

import json

import pytest
import torch

import devplan
from devplan.inspection.check import check, check_golden
from devplan.inspection.diff import diff
from devplan.testing import assert_matches_golden
from testbed.cli import devplan as devplan_cli


class Tower(torch.nn.Module):
    """Two blocks; widening `wide` grows the buffer at a peak that `wide` holds."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.narrow = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
        self.wide = torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.ReLU(), torch.nn.Linear(width, 16))

    def forward(self, x):
        return self.wide(self.narrow(x))


def program(width: int) -> bytes:
    torch.manual_seed(0)
    return devplan.compile(torch.export.export(Tower(width).eval(), (torch.randn(32, 16),))).data


@pytest.fixture(scope="module")
def pair():
    return program(32), program(128)


def test_golden_records_each_buffers_peak(tmp_path, pair):
    golden = tmp_path / "g.json"
    check_golden(pair[0], golden, update=True)
    (buffer,) = json.loads(golden.read_text())["methods"][0]["buffers"]
    peak = buffer["peak"]
    assert peak["bytes"] == buffer["size"] or peak["bytes"] <= buffer["size"]
    assert peak["op"].startswith("aten::") and "wide" in peak["source"]
    assert sum(peak["modules"].values()) == peak["bytes"] and any(m.startswith("wide") for m in peak["modules"])


def test_diff_names_the_blocks_that_grew(pair):
    changes = diff(*pair).changes
    (peak,) = [c for c in changes if c.fact == "peak"]
    assert not peak.fails  # reported: the sizes are what fail
    grown = {m["module"]: m["b"] - m["a"] for m in peak.detail["modules"]}
    assert grown and all(module.startswith("wide") for module in grown) and all(delta > 0 for delta in grown.values())
    size = next(c for c in changes if c.fact == "size")
    assert sum(grown.values()) == peak.b["bytes"] - peak.a["bytes"] and size.b - size.a > 0
    text = diff(*pair).text()
    assert "buffer 1 (cpu) peak:" in text and any(
        line.strip().startswith("wide") and "+" in line for line in text.splitlines()
    )


def test_check_golden_and_pytest_failure_name_the_blocks(tmp_path, pair):
    golden = tmp_path / "g.json"
    check_golden(pair[0], golden, update=True)
    result = check_golden(pair[1], golden)
    assert not result.ok and "peak" in {c.fact for c in result.diff.changes}
    with pytest.raises(AssertionError) as failure:
        assert_matches_golden(pair[1], golden, update=False)
    assert "peak:" in str(failure.value) and "\n        wide" in str(failure.value)


def test_a_golden_without_peaks_still_compares(tmp_path, pair):
    """Golden files written before peaks were recorded keep working: nothing to compare there."""
    golden = tmp_path / "old.json"
    check_golden(pair[0], golden, update=True)
    old = json.loads(golden.read_text())
    for buffer in old["methods"][0]["buffers"]:
        del buffer["peak"]
    golden.write_text(json.dumps(old))
    assert check_golden(pair[0], golden).ok


def test_failing_budget_names_what_its_peak_holds(tmp_path, pair):
    (row,) = [c for c in check(pair[1], budgets={"1": 64}) if c.mem_id == 1]
    assert not row.ok and row.peak is not None and any(m.startswith("wide") for m in row.peak["modules"])
    path = tmp_path / "p.pte"
    path.write_bytes(pair[1])
    shown = devplan_cli("check", path, "--budget", "1=64B")
    assert shown.returncode == 1
    assert "at its peak, #" in shown.stdout and "wide" in shown.stdout.split("at its peak", 1)[1]


def test_every_failing_size_says_its_exact_bytes_one_way(tmp_path, pair):
    """check's buffer lines, check --golden's and diff's size changes and the pytest failure all
    write a size whose bytes matter as '36.2 KiB (37,068 bytes)'."""
    from devplan.units import exact_size_text

    (old,), (new,) = (devplan.inspect(p)["methods"][0]["buffers"] for p in pair)
    grown = f"size: {exact_size_text(old['size'])} -> {exact_size_text(new['size'])}, +"
    assert grown in diff(*pair).text().replace("\n        ", " ")
    golden, path = tmp_path / "g.json", tmp_path / "p.pte"
    check_golden(pair[0], golden, update=True)
    path.write_bytes(pair[1])
    shown = devplan_cli("check", path, "--golden", golden, "--budget", "1=64B")
    assert grown in shown.stdout.replace("\n        ", " "), shown.stdout
    over = new["size"] - 64
    assert (
        f"1 (cpu): {exact_size_text(new['size'])}; budget 64 B, over by {exact_size_text(over)}"
        in shown.stdout.replace("\n        ", " ")
    )
    with pytest.raises(AssertionError) as failure:
        assert_matches_golden(pair[1], golden, update=False)
    assert grown in str(failure.value).replace("\n        ", " ")
