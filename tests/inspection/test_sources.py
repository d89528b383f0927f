"""Names back to the source (issue 16): devplan keeps where each instruction came from in
ET12's Chain.stacktrace, ExecuTorch's deserializer reads it back, devplan's reader reads the
frames ExecuTorch writes, and inspect names every instruction and tensor, explains the peak
and keeps the default view of a 32-layer GPT-2 to a couple of screens."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest
import torch

import devplan
from testbed import hf_models
from tests.inspection.runner import invoke, run_devplan


def _gpt2(layers: int = 2):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=hf_models.VOCAB,
        n_positions=64,
        n_embd=32,
        n_layer=layers,
        n_head=2,
        use_cache=False,
        bos_token_id=1,
        eos_token_id=2,
    )
    return hf_models._build(GPT2LMHeadModel, config), (hf_models._tokens(),)


@pytest.fixture(scope="module")
def gpt2_export():
    module, args = _gpt2()
    return torch.export.export(module, args)


@pytest.fixture(scope="module")
def gpt2_pte(gpt2_export, tmp_path_factory):
    path = tmp_path_factory.mktemp("sources") / "gpt2.pte"
    devplan.compile(gpt2_export, path)
    return path


def _executorch_program(data: bytes):
    from executorch.exir._serialize._program import deserialize_pte_binary

    loaded = deserialize_pte_binary(data)
    return getattr(loaded, "program", loaded)


def test_executorch_reads_devplans_frames_one_list_per_instruction(gpt2_pte):
    chain = _executorch_program(gpt2_pte.read_bytes()).execution_plan[0].chains[0]
    assert len(chain.stacktrace) == len(chain.instructions)
    frames = [frame for frames in chain.stacktrace for frame in frames.items]
    modules = {frame.name for frame in frames if frame.filename == "<module>"}
    assert "transformer.h.1.attn.c_attn (Conv1D)" in modules and "lm_head (Linear)" in modules
    names = {(frame.context, frame.name) for frame in frames if frame.filename == "<value>"}
    assert ("parameter", "transformer.h.0.attn.c_attn.weight") in names and ("input", "input_ids") in names
    # from the package down, whatever machine or environment compiled it
    assert any(frame.filename == "transformers/models/gpt2/modeling_gpt2.py" and frame.lineno > 0 for frame in frames)
    assert not any(frame.filename.startswith("/") for frame in frames)


def test_every_instruction_and_tensor_is_named(gpt2_pte):
    method = devplan.inspect(gpt2_pte)["methods"][0]
    assert all(row["source"] for row in method["instructions"])
    assert all(t["source"] for t in method["tensors"])
    sources = {t["source"] for t in method["tensors"]}
    assert "input input_ids" in sources and "parameter transformer.h.1.mlp.c_proj.weight" in sources
    (output,) = [t for t in method["tensors"] if t["value"] in method["outputs"]]
    assert re.fullmatch(r"output 0, lm_head \(Linear\) linear · linear\.py:\d+", output["source"])
    attention = [row for row in method["instructions"] if row["module"] == "transformer.h.0.attn.c_attn"]
    assert attention and all(
        row["source"].startswith("transformer.h.0.attn.c_attn (Conv1D) addmm · ") for row in attention
    )


def test_no_source_leaves_the_stacktrace_out_and_names_tensors_by_role(gpt2_export, gpt2_pte, tmp_path):
    result = devplan.compile(gpt2_export, tmp_path / "bare.pte", source=False)
    assert _executorch_program(result.data).execution_plan[0].chains[0].stacktrace is None
    assert len(result.data) < gpt2_pte.stat().st_size
    method = devplan.inspect(result.data)["methods"][0]
    assert all(row["source"] is None for row in method["instructions"])
    assert all(t["source"] for t in method["tensors"])
    sources = {t["source"] for t in method["tensors"]}
    assert "input 0" in sources and any(re.fullmatch(r"output 0, #\d+ aten::\S+", s) for s in sources)
    assert any(re.fullmatch(r"constant of #\d+ aten::\S+", s) for s in sources)


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_the_cli_leaves_sources_out_with_no_source(tmp_path):
    sample = Path(__file__).resolve().parents[2] / "samples" / "mlp.pt2"
    for flag, kept in (("--source", True), ("--no-source", False)):
        out = tmp_path / f"mlp{flag}.pte"
        assert run_devplan("compile", str(sample), "-o", str(out), flag).returncode == 0
        rows = devplan.inspect(out)["methods"][0]["instructions"]
        assert all(bool(row["source"]) == kept for row in rows)


def test_the_same_export_compiles_to_the_same_bytes(gpt2_export, gpt2_pte):
    assert devplan.compile(gpt2_export).data == gpt2_pte.read_bytes()


def test_devplan_reads_the_frames_executorch_writes(tmp_path):
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    module, args = hf_models.gpt2()[:2]
    with torch.no_grad():
        edge = to_edge_transform_and_lower(torch.export.export(module, args))
        data = edge.to_executorch(ExecutorchBackendConfig(emit_stacktrace=True)).buffer
    method = devplan.inspect(data)["methods"][0]
    kernels = [row for row in method["instructions"] if row["kind"] == "kernel"]
    assert kernels and all(row["source"] and row["module"] is None for row in kernels)
    assert any(re.match(r"modeling_gpt2\.py:\d+ \S", row["source"]) for row in kernels)
    assert all(t["source"] for t in method["tensors"])
    # no module names: the chart groups its many tensors by the instructions that made them
    (tmp_path / "executorch.pte").write_bytes(data)
    text = invoke("inspect", str(tmp_path / "executorch.pte")).stdout
    assert "by block: unknown, the program names no modules" in text
    assert re.search(r"^A made in #0-\d+ ×\d+ #\d+-\d+", text, re.MULTILINE)


def test_the_peak_names_its_tensors_and_blocks(gpt2_pte):
    method = devplan.inspect(gpt2_pte)["methods"][0]
    (buffer,), (peak,) = method["buffers"], method["peak"]
    assert peak["instruction"] == buffer["peak_instruction"] and peak["bytes"] == buffer["peak"]
    assert sum(t["own_bytes"] for t in peak["tensors"]) == peak["bytes"]
    assert sum(m["bytes"] for m in peak["modules"]) == peak["bytes"]
    sizes = [t["nbytes"] for t in peak["tensors"]]
    assert sizes == sorted(sizes, reverse=True)
    assert all(t["held"][0] <= peak["instruction"] <= t["held"][1] for t in peak["tensors"])
    assert re.fullmatch(r"transformer\.h\.\d|lm_head|transformer(\.\w+)?|\(inputs\)", peak["modules"][0]["module"])


def test_instructions_show_every_argument_and_shapes_on_request(gpt2_pte):
    text = invoke("inspect", str(gpt2_pte), "-s", "instructions").stdout
    assert re.search(r"aten::embedding\.out\(v\d+, v\d+, -1, False, False, v\d+\) -> v\d+", text)
    assert "transformer.wte (Embedding) embedding · sparse.py:" in text
    shaped = invoke("inspect", str(gpt2_pte), "-s", "instructions", "--shapes").stdout
    assert re.search(r"aten::embedding\.out\(v\d+:float32\[128×32\], v\d+:int64\[1×8\], -1,", shaped)


def _lines_at_80_columns(text: str) -> int:
    return sum(max(1, math.ceil(len(line) / 80)) for line in text.splitlines())


@pytest.mark.sweep  # at scale: 32 layers
def test_the_default_view_of_a_32_layer_gpt2_fits_two_screens(tmp_path):
    module, args = _gpt2(layers=32)
    path = tmp_path / "gpt2_32.pte"
    devplan.compile(torch.export.export(module, args), path)
    text = run_devplan("inspect", str(path), env={**os.environ, "COLUMNS": "80"}).stdout
    assert _lines_at_80_columns(text) <= 150
    assert re.search(r"^peak of buffer 1 \(cpu\): .* at #\d+", text, re.MULTILINE)
    assert re.search(r"by block: transformer\.h\.\d+ \d+%", text)
    legend = re.findall(r"transformer\.h\.(\d+) ×\d+ #\d+-\d+", text)
    assert sorted(map(int, legend)) == list(range(32))  # the chart's glyphs stand for the 32 blocks
    doc = devplan.inspect(path)
    assert all(t["source"] for t in doc["methods"][0]["tensors"])


def test_the_chrome_trace_names_instructions_and_tensors_by_source(gpt2_pte):
    from devplan.inspection.trace import memory_trace

    events = memory_trace(devplan.inspect(gpt2_pte))["traceEvents"]
    slices = [event for event in events if event["ph"] == "X"]
    assert all(event["args"]["source"] for event in slices)
    assert any(
        event["args"]["source"] == "parameter transformer.wte.weight"
        or event["args"]["source"].startswith("transformer.h.0.attn")
        for event in slices
    )
