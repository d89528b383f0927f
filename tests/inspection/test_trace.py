"""`devplan inspect --trace`: the plan as a Chrome trace, from devplan's programs and
ExecuTorch's alike."""

import json

import pytest

import devplan
from devplan.inspection.trace import STEP, memory_trace, trace_json
from testbed.cli import assert_one_line_error, devplan as cli
from testbed.models import export


def check_trace(doc: dict) -> None:
    events = memory_trace(doc)["traceEvents"]
    for pid, method in enumerate(doc["methods"], start=1):
        mine = [e for e in events if e["pid"] == pid]
        calls = [e for e in mine if e["ph"] == "X" and e["tid"] == 0]
        assert [e["ts"] // STEP for e in calls] == [row["index"] for row in method["instructions"]]
        assert [e["name"] for e in calls] == [
            row["op"] or f"delegate {row['delegate']}" for row in method["instructions"]
        ]
        slices = [e for e in mine if e["ph"] == "X" and e["tid"] != 0]
        for buffer in method["buffers"]:
            counter = [e for e in mine if e["ph"] == "C" and e["name"].startswith(f"buffer {buffer['mem_id']} ")]
            used = [e["args"]["bytes"] for e in counter]
            assert max(used) == buffer["peak"] and used[-1] == 0
            if buffer["peak_instruction"] is not None:
                assert used.index(buffer["peak"]) == buffer["peak_instruction"]
        planned = {b["mem_id"] for b in method["buffers"]}
        held = {t["value"]: t for t in method["tensors"] if t["held"] and t["nbytes"] and t["mem_id"] in planned}
        assert sorted(e["args"]["value"] for e in slices) == sorted(held)
        for e in slices:
            first, last = held[e["args"]["value"]]["held"]
            assert (e["ts"], e["dur"]) == (first * STEP, (last - first + 1) * STEP)
            assert e["args"]["offset"] == held[e["args"]["value"]]["offset"]
        for tid in {e["tid"] for e in slices}:  # a track's slices follow one another
            spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in slices if e["tid"] == tid)
            assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))


@pytest.mark.parametrize("name", ["transformer_encoder", "cat_split_chunk", "rolling_cache"])
def test_devplan_programs_trace_every_instruction_tensor_and_peak(name):
    data = devplan.compile(export(name)[0]).data
    check_trace(devplan.inspect(data))
    assert trace_json(devplan.inspect(data)) == trace_json(devplan.inspect(data))


def test_executorch_programs_trace_the_same_way(lowered):
    for name in ("transformer", "cat_split_chunk", "device"):
        check_trace(devplan.inspect(lowered[name]))


def test_the_command_writes_the_trace_and_still_prints(tmp_path):
    program = tmp_path / "p.pte"
    program.write_bytes(devplan.compile(export("multi_input_nested")[0]).data)
    run = cli("inspect", program, "--trace", tmp_path / "p.json", "-s", "buffers")
    assert run.returncode == 0, run.stderr
    assert "lower bound" in run.stdout
    trace = json.loads((tmp_path / "p.json").read_text())
    assert trace["displayTimeUnit"] == "ms" and any(e["ph"] == "C" for e in trace["traceEvents"])
    assert_one_line_error(cli("inspect", program, "--trace", tmp_path / "missing" / "p.json"), "missing")
