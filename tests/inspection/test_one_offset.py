"""30,000 tensors at one offset of one buffer, all held at once: inspect, --json, check, --svg
and --trace each finish in this process with the right numbers. Every pair of these tensors
shares bytes while both hold them, so comparing pairs (the old storage grouping, the bytes in
use summed over every tensor alive at each instruction) took minutes; the sweeps take each
tensor once. benchmarks/inspect_scale.py --overlap times it."""

from __future__ import annotations

import json

import pytest

from devplan.planning import Interval, lower_bound
from testbed.programs import one_offset_program
from tests.inspection.runner import invoke

TENSORS = 30_000


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    path = tmp_path_factory.mktemp("one_offset") / "one_offset.pte"
    path.write_bytes(one_offset_program(TENSORS))
    return path


def expected_bound() -> int:
    """One storage of 16 bytes (the tensors at offset 0) and the output, both held at #0."""
    return lower_bound([Interval(0, 16, 0, 0), Interval(1, 16 * TENSORS, 0, 0)], alignment=1)[1]


@pytest.mark.sweep
def test_every_command_finishes_with_the_bound(program, tmp_path):
    bound = expected_bound()
    assert bound == 16 + 16 * TENSORS
    result = invoke(
        "inspect",
        str(program),
        "--json",
        "--svg",
        str(tmp_path / "layout.svg"),
        "--trace",
        str(tmp_path / "trace.json"),
    )
    assert result.exit_code == 0, result.output
    buffer = json.loads(result.stdout)["methods"][0]["buffers"][0]
    assert (buffer["lower_bound"], buffer["peak"], buffer["peak_instruction"]) == (bound, bound, 0)
    assert f"lower bound: {bound} B" in (tmp_path / "layout.svg").read_text()
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert [e["args"]["bytes"] for e in events if e["ph"] == "C"] == [bound, 0]
    assert sum(1 for e in events if e["ph"] == "X" and e["cat"] == "tensor") == TENSORS + 1
    assert sum(1 for e in events if e["ph"] == "M" and e["name"] == "thread_name") == 1 + TENSORS + 1  # one track each
    text = invoke("inspect", str(program))
    assert text.exit_code == 0 and f"×{TENSORS + 1} #0-0" in text.stdout, text.output  # one glyph for them all
    checked = invoke("check", str(program), "--max-ratio", "1")
    assert checked.exit_code == 0 and checked.stdout.startswith("ok"), checked.output
