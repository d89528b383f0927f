"""devplan's programs inside ExecuTorch's own tools (issue 54, points 1 and 2): compile
--etrecord writes the ETRecord that ExecuTorch's Inspector maps an ETDump's events with (to
devplan's ops and the model's modules) and compares intermediate outputs by; run --executorch
--etdump writes the ETDump; inspect --etdump shows its times beside the plan."""

from __future__ import annotations

import json
import sys

import pytest
import torch

import devplan
from devplan.errors import DevplanError
from devplan.pte import read_pte
from devplan.runtime.etdump_trace import Trace, debug_bytes
from tests.inspection.runner import invoke, run_devplan
from tests.test_schemas import validate

pytest.importorskip("executorch.devtools")


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))) + 1


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> dict:
    """Each program (portable, XNNPACK) compiled with its ETRecord and run twice by
    `devplan run --executorch --etdump --debug-buffer` on run's default inputs."""
    folder = tmp_path_factory.mktemp("etrecord")
    torch.manual_seed(0)
    ep = torch.export.export(_Mlp().eval(), (torch.randn(2, 8),))
    found = {}
    for name, backends in (("portable", []), ("xnnpack", ["xnnpack"])):
        program, record, dump = (folder / f"{name}{suffix}" for suffix in (".pte", ".etrecord", ".etdp"))
        devplan.compile(ep, program, etrecord=record, backends=backends)
        size = debug_bytes(read_pte(program), "forward") * 2
        run = invoke(
            "run", str(program), "--executorch", "--etdump", str(dump), "--debug-buffer", f"{size}B", "--runs", "2"
        )
        assert run.exit_code == 0, run.output
        found[name] = (program, record, dump)
    assert "debug_handle" not in next(n for n in ep.graph.nodes if n.op == "call_function").meta  # left as given
    return found


def _inspector(traced, name):
    from executorch.devtools import Inspector

    program, record, dump = traced[name]
    return Inspector(etdump_path=str(dump), etrecord=str(record), debug_buffer_path=f"{dump}.debug")


def _modules(event) -> set[str]:
    """The model's modules ExecuTorch's Inspector names for an event (its nn_module_stack paths)."""
    return {path for stack in event.module_hierarchy.values() for path, _ in stack.values() if path}


def test_inspector_names_the_modules_of_each_instruction_of_a_portable_program(traced):
    inspector = _inspector(traced, "portable")
    (runs,) = [block for block in inspector.event_blocks if block.name == "Execute"]  # both runs, merged
    calls = [event for event in runs.events if event.name == "OPERATOR_CALL"]
    assert [event._instruction_id for event in calls] == [0, 1, 2, 3]
    assert [event.op_types for event in calls] == [
        ["linear.default"],
        ["relu.default"],
        ["linear.default"],
        ["add.Tensor"],
    ]
    assert [_modules(event) for event in calls] == [{"fc1"}, set(), {"fc2"}, set()]
    assert all(len(event.perf_data.raw) == 2 for event in calls)


def test_inspector_names_every_module_an_xnnpack_delegate_call_ran(traced):
    inspector = _inspector(traced, "xnnpack")
    call = next(e for b in inspector.event_blocks if b.name == "Execute" for e in b.events if e.name == "DELEGATE_CALL")
    assert call.delegate_backend_name == "XnnpackBackend"
    assert sorted(call.op_types) == ["add.Tensor", "linear.default", "linear.default", "relu.default"]
    assert _modules(call) == {"fc1", "fc2"}


@pytest.mark.parametrize("name", ["portable", "xnnpack"])
def test_calculate_numeric_gap_compares_the_runs_outputs_with_the_export(traced, name):
    gaps = _inspector(traced, name).calculate_numeric_gap("MSE")
    expected = {
        "portable": [["linear"], ["relu"], ["linear_1"], ["add"]],
        "xnnpack": [["linear", "relu", "linear_1", "add"]],
    }
    assert [list(ops) for ops in gaps["aot_ops"]] == expected[name]
    assert all(gap[0] < 1e-10 for gap in gaps["gap"])  # the program computes what the export does


def test_inspect_etdump_shows_where_the_time_goes_by_module(traced):
    program, _, dump = traced["portable"]
    shown = invoke("inspect", str(program), "--etdump", str(dump), "-s", "peak", "-s", "instructions")
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert any(line.startswith("  where the time goes, by block: ") and "fc1" in line for line in lines)
    assert [line.split(" [")[0] for line in lines if line.startswith("#")] == [
        "#0 aten::linear.out",
        "#1 aten::relu.out",
        "#2 aten::linear.out",
        "#3 aten::add.Scalar_out",
    ]
    document = json.loads(invoke("inspect", str(program), "--etdump", str(dump), "--json").output)
    validate("inspect", document)
    timing = document["methods"][0]["timing"]
    assert (timing["runs"], timing["warm_runs"]) == (2, 1)
    assert [entry["index"] for entry in timing["instructions"]] == [0, 1, 2, 3]
    assert sorted(m["module"] for m in timing["modules"]) == ["(model)", "fc1", "fc2"]


def test_inspect_etdump_shows_what_the_backend_timed_inside_its_delegate(traced):
    program, _, dump = traced["xnnpack"]
    document = json.loads(invoke("inspect", str(program), "--etdump", str(dump), "--json").output)
    timing = document["methods"][0]["timing"]
    assert [m["module"] for m in timing["modules"]] == ["(delegate 0)"]
    assert {entry["instruction"] for entry in timing["delegated"]} == {0}
    assert any(entry["name"].startswith("Fully Connected") for entry in timing["delegated"])


def test_a_bad_or_foreign_etdump_is_refused_in_one_line(traced, tmp_path):
    program, _, dump = traced["portable"]
    other = traced["xnnpack"][2]
    garbage, cut = tmp_path / "garbage.etdp", tmp_path / "cut.etdp"
    garbage.write_bytes(b"not an etdump at all")
    cut.write_bytes(dump.read_bytes()[:200])
    for given, needle in ((garbage, "not an ETDump"), (cut, "truncated"), (other, "pass the ETDump of this program")):
        run = run_devplan("inspect", str(program), "--etdump", str(given))
        assert run.returncode == 2, run.stderr
        assert len(run.stderr.strip().splitlines()) == 1 and needle in run.stderr, run.stderr


def test_run_refuses_a_debug_buffer_the_outputs_could_outgrow(traced, tmp_path):
    program = read_pte(traced["portable"][0])
    with pytest.raises(DevplanError, match=r"--debug-buffer 64 B: .* give --debug-buffer \d+B or more"):
        Trace(tmp_path / "x.etdp", 64).check(program, "forward", 1)
    run = invoke("run", str(traced["portable"][0]), "--debug-buffer", "1MiB")
    assert isinstance(run.exception, DevplanError) and "add --etdump" in str(run.exception)


def test_etrecord_is_refused_in_one_line_without_the_extra_or_with_quantize(monkeypatch, tmp_path):
    with pytest.raises(DevplanError, match="--quantize"):
        devplan.compile(tmp_path / "m.pt2", tmp_path / "m.pte", etrecord=tmp_path / "m.etrecord", quantize="8a8w")
    monkeypatch.setitem(sys.modules, "executorch.devtools.etrecord", None)  # as if not installed
    with pytest.raises(
        DevplanError, match=r"--etrecord: cannot import executorch\.devtools\.etrecord .*devplan\[executorch\]"
    ):
        devplan.compile(tmp_path / "m.pt2", tmp_path / "m.pte", etrecord=tmp_path / "m.etrecord")


def test_every_instruction_a_decomposed_op_became_names_that_op(tmp_path):
    """linalg_vector_norm has no portable kernel: its pow, sum and pow all carry its handle,
    so Inspector compares the last of them with the op's output."""
    from devplan.etrecord import instruction_handles

    class Normalize(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.normalize(x, dim=-1) * 2

    ep = torch.export.export(Normalize(), (torch.randn(2, 8),))
    planned = devplan.compile(ep, tmp_path / "n.pte").planned
    nodes = [node for node in ep.graph.nodes if node.op == "call_function"]
    handles = {node.name: at for at, node in enumerate(nodes, start=1)}
    by_instruction, delegates = instruction_handles(planned, nodes, handles)
    ops = [kernel.op for kernel in planned.method.kernels]
    norm = [str(i) for i, op in enumerate(ops) if op in ("aten::pow.Tensor_Scalar_out", "aten::sum.IntList_out")]
    assert len(norm) == 3 and {tuple(by_instruction[i]) for i in norm} == {(handles["linalg_vector_norm"],)}
    assert by_instruction[str(ops.index("aten::div.out"))] == [handles["div"]] and delegates == {}


def test_devplans_runtime_writes_an_etdump_inspect_and_executorchs_inspector_read(traced, tmp_path):
    from executorch.devtools import Inspector

    program, record, _ = traced["portable"]
    dump = tmp_path / "own.etdp"
    run = invoke("run", str(program), "--etdump", str(dump), "--runs", "3")
    assert run.exit_code == 0, run.output
    timing = json.loads(invoke("inspect", str(program), "--etdump", str(dump), "--json").output)["methods"][0]["timing"]
    assert (timing["runs"], timing["warm_runs"]) == (3, 2) and timing["execute_ns"] > 0
    assert [entry["index"] for entry in timing["instructions"]] == [0, 1, 2, 3]
    (runs,) = [block for block in Inspector(etdump_path=str(dump), etrecord=str(record)).event_blocks]
    calls = [event for event in runs.events if event.name == "OPERATOR_CALL"]
    assert [_modules(event) for event in calls] == [{"fc1"}, set(), {"fc2"}, set()]
    assert all(len(event.perf_data.raw) == 3 for event in calls)
    refused = invoke("run", str(program), "--etdump", str(dump), "--debug-buffer", "1MiB")
    assert isinstance(refused.exception, DevplanError) and "add --executorch" in str(refused.exception)
