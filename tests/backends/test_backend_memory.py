"""ExecuTorch's backends allocate their own working memory at run time, outside every buffer
the program plans (issue 35, item 5): the CNN sample whole in one XNNPACK delegate plans its
input and output only. Compile's summary, inspect (text and JSON) and check (a line per such
delegate) say so, with XNNPACK's intermediates read from its payload's graph, and a budget on
`cpu+backends` counts them."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

import devplan
from devplan.backend import Partitioner
from testbed.cli import devplan as run_devplan

ROOT = Path(__file__).resolve().parents[2]
CNN = ROOT / "samples" / "cnn.pt2"


@pytest.fixture(scope="module")
def cnn(tmp_path_factory) -> tuple[Path, str]:
    """The CNN sample compiled whole into XNNPACK by the CLI: the program, and the summary printed
    (each line as it reads unwrapped: the CLI wraps them at the console's width)."""
    program = tmp_path_factory.mktemp("xnnpack") / "cnn.pte"
    result = run_devplan("compile", CNN, "-o", program, "--backend", "xnnpack")
    assert result.returncode == 0, result.stderr
    return program, re.sub(r"\n {8}(?=\S)", " ", result.stdout)


def _working(program) -> list[dict]:
    return [d["working_memory"] for d in devplan.inspect(program)["methods"][0]["delegates"]]


def test_the_working_memory_is_the_intermediates_executorch_serialized(monkeypatch):
    """The bytes read from the payload are those of the values ExecuTorch's XNNPACK
    preprocess defined that are neither constants nor the delegate's arguments, and they
    hold at least what the portable program plans beyond the XNNPACK program's buffer."""
    from executorch.backends.xnnpack import xnnpack_preprocess
    from executorch.backends.xnnpack.serialization.xnnpack_graph_schema import XNNDatatype, XNNQuantizedTensorValue

    graphs = []
    serialize = xnnpack_preprocess.serialize_xnnpack_binary
    monkeypatch.setattr(
        xnnpack_preprocess,
        "serialize_xnnpack_binary",
        lambda graph, *rest: graphs.append(graph) or serialize(graph, *rest),
    )
    ep = torch.export.load(CNN)
    lowered = devplan.compile(ep, backends=["xnnpack"])
    widths = {XNNDatatype.xnn_datatype_fp32: 4}
    values = [v.xvalue_union for v in graphs[0].xvalues]
    values = [v.tensor_value if isinstance(v, XNNQuantizedTensorValue) else v for v in values]
    inner = [v for v in values if v.constant_buffer_idx == 0 and not v.flags & 0x3]
    expected = sum(math.prod(v.dims) * widths[v.datatype] for v in inner)
    assert len(graphs) == 1 and expected > 0
    assert _working(lowered.data) == [{"bytes": expected, "values": len(inner), "bound": "upper"}]
    portable = devplan.inspect(devplan.compile(ep).data)["methods"][0]["buffers"][0]["lower_bound"]
    planned = devplan.inspect(lowered.data)["methods"][0]["buffers"][0]["size"]
    assert expected >= portable - planned > 0


def test_compile_summary_says_it(cnn):
    program, summary = cnn
    (memory,) = _working(program)
    line = next(line for line in summary.splitlines() if "delegate" in line and "XnnpackBackend" in line)
    assert "working memory outside the plan, allocated by the backend" in line
    assert f"({memory['bytes']:,} bytes), {memory['values']} intermediates" in line


def test_inspect_says_it_in_text_and_json(cnn):
    program, _ = cnn
    (memory,) = _working(program)
    text = run_devplan("inspect", program, "--bytes")
    assert text.returncode == 0, text.stderr
    flat = " ".join(text.stdout.split())
    assert (
        f"forward delegate 0 (XnnpackBackend, cpu): working memory outside the plan, allocated by the backend: "
        f"up to {memory['bytes']} B, {memory['values']} intermediates from its graph summed"
    ) in flat
    assert memory["bound"] == "upper" and memory["bytes"] > 0


def test_check_prints_a_line_per_delegate(tmp_path):
    """Two XNNPACK delegates (a cumulative sum, which XNNPACK does not take, between them): a
    note each, never failing the check, also under --max-ratio."""

    class TwoParts(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = torch.nn.Linear(8, 32), torch.nn.Linear(32, 4)

        def forward(self, x):
            return self.second(torch.cumsum(self.first(x), dim=1))

    ep = torch.export.export(TwoParts().eval(), (torch.randn(2, 8),))
    program = tmp_path / "two.pte"
    program.write_bytes(devplan.compile(ep, backends=["xnnpack"]).data)
    memories = _working(program)
    result = run_devplan("check", program, "--max-ratio", "1.05")
    notes = [line for line in result.stdout.splitlines() if line.startswith("note")]
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(memories) == len(notes) == 2
    for index, (memory, note) in enumerate(zip(memories, notes)):
        assert note.startswith(
            f"note  forward delegate {index} (XnnpackBackend) working memory (cpu): up to {memory['bytes']} B"
        )


def test_a_budget_on_cpu_and_backends_counts_it(cnn, tmp_path):
    program, _ = cnn
    (memory,) = _working(program)
    planned = devplan.inspect(program)["methods"][0]["devices"][0]["size"]
    between = planned + memory["bytes"] // 2  # the plan fits it, the plan with XNNPACK's memory does not
    assert run_devplan("check", program, "--budget", f"cpu={between}").returncode == 0
    result = run_devplan("check", program, "--budget", f"cpu+backends={between}")
    assert result.returncode == 1
    assert re.search(
        rf"FAIL  forward cpu, 1 buffer and backends' own memory: .*\({planned + memory['bytes']:,} bytes\)",
        result.stdout,
    )
    assert run_devplan("check", program, "--budget", f"cpu+backends={planned + memory['bytes']}").returncode == 0
    compiled = run_devplan(
        "compile", CNN, "-o", tmp_path / "x.pte", "--backend", "xnnpack", "--budget", f"cpu+backends={between}"
    )
    assert compiled.returncode == 1 and len(compiled.stderr.strip().splitlines()) == 1
    assert "memory cpu+backends needs" in compiled.stderr and not (tmp_path / "x.pte").exists()
    wrong = run_devplan("check", program, "--budget", "cpu+xnnpack=1MiB")
    assert wrong.returncode == 2 and "write DEVICE+backends" in wrong.stderr


def test_a_backend_whose_payload_does_not_say_is_told_and_refused_in_a_budget(tmp_path):
    class Adds(torch.nn.Module):
        def forward(self, x, y):
            return (x + y) * 2

    ep = torch.export.export(Adds(), (torch.randn(4), torch.randn(4)))
    program = tmp_path / "adds.pte"
    program.write_bytes(devplan.compile(ep, delegates=[Partitioner.parse_class("tests.partitioners:AddsTo")]).data)
    assert _working(program) == [{"bytes": None, "values": None, "bound": None}]
    told = run_devplan("check", program)
    assert "note  forward delegate 0 (ConcatBytes) working memory (cpu): not known" in told.stdout
    refused = run_devplan("check", program, "--budget", "cpu+backends=1MiB")
    assert refused.returncode == 2 and "its payload does not say how much" in refused.stderr
