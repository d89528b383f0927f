"""Device programs devplan compiles with --delegate run in the reference runtime: copies go
through the DeviceAllocator registered for the device (host memory standing in for CUDA
here), payloads run on their device, and outputs match eager PyTorch. ExecuTorch reads them."""

from __future__ import annotations

import json
import re

import pytest
import torch

import devplan
from devplan.errors import DevplanError
from devplan.runtime import HostAllocator, registered, run
from samples.make_samples import sample_models
from testbed.cli import devplan as devplan_cli
from testbed.models import CORPUS, assert_runs_match, eager_outputs, export
from tests.compile.test_cli import ROOT
from tests.runtime.test_runtime import Recording

MODELS = ("mlp", "cnn", "transformer", "two_io", "rolling_cache", "cat_split_chunk", "gated_mlp", "embedding")
SPLITS = (["cuda:0"], ["cuda:0=aten::linear,aten::convolution", "cuda:1=aten::relu,aten::gelu"])


def case(name):
    if name in CORPUS:
        ep, module, args = export(name)
        return ep, module, args
    module, args = sample_models()[name]
    return torch.export.export(module, args, strict=False), module, args


@pytest.mark.parametrize("delegates", SPLITS, ids=("all-on-cuda0", "two-devices"))
@pytest.mark.parametrize("name", MODELS)
def test_delegated_programs_match_eager(name, delegates):
    ep, module, args = case(name)
    result = devplan.compile(ep, delegates=delegates)
    with registered("cuda", HostAllocator()):
        got = run(result.data, list(args), runs=2)
    assert_runs_match(got, eager_outputs(module, args, runs=2), rtol=1e-4, atol=1e-5)


def test_every_device_step_goes_through_the_allocator_and_every_arena_comes_back():
    ep, module, args = case("mlp")
    result = devplan.compile(ep, delegates=["cuda:0=aten::linear"])
    with registered("cuda", Recording()) as device:
        run(result.data, list(args))
    allocated = [call[1] for call in device.calls if call[0] == "allocate"]
    payloads = [devplan.inspect(d.payload)["methods"][0] for d in result.planned.method.delegates]
    weights = [t["nbytes"] for p in payloads for t in p["tensors"] if t["role"] == "constant"]
    # the program's cuda buffer (the payloads' buffers are windows of it, or they plan none:
    # their inputs and outputs are the program's tensors) and each payload's weights uploaded at load
    assert sorted(allocated) == sorted([b.size for b in result.planned.buffers if str(b.device) == "cuda:0"] + weights)
    assert sorted(allocated) == sorted(call[1] for call in device.calls if call[0] == "deallocate")
    copies = [k.op for k in result.planned.method.kernels if k.op.startswith("et_copy")]
    moves = [call[0] for call in device.calls if call[0] in ("to_device", "to_host")]
    assert moves == ["to_device"] * len(weights) + ["to_device" if "h2d" in op else "to_host" for op in copies]


def test_a_delegate_of_another_backend_is_named_and_its_arenas_go_back():
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    module, args = CORPUS["linear"]()
    edge = to_edge_transform_and_lower(
        torch.export.export(module, args, strict=False), partitioner=[XnnpackPartitioner()]
    )
    with registered("cpu", Recording()) as host:
        with pytest.raises(
            DevplanError,
            match=r"delegate 0 runs on ExecuTorch's backend 'XnnpackBackend', which "
            r"needs ExecuTorch's runtime: devplan run --executorch",
        ):
            run(edge.to_executorch().buffer, list(args))
    allocated = [call[1] for call in host.calls if call[0] == "allocate"]
    assert allocated and allocated == [call[1] for call in host.calls if call[0] == "deallocate"]


def test_executorch_reads_the_device_table_and_the_delegates():
    from executorch.exir._serialize._program import deserialize_pte_binary

    ep, _, _ = case("two_io")
    result = devplan.compile(ep, delegates=["cuda:0=aten::linear"])
    program = deserialize_pte_binary(result.data)
    plan = getattr(program, "program", program).execution_plan[0]
    assert [(e.buffer_idx, int(e.device_type), e.device_index) for e in plan.non_const_buffer_device] == [
        (b.mem_id, b.device.code, b.device.index) for b in result.planned.buffers
    ]
    assert [(d.id, [(c.key, bytes(c.value)) for c in d.compile_specs]) for d in plan.delegates] == [
        (
            d.backend,
            [("target_device", b"cuda:0")]
            + ([("memory_window", f"mem_id=2,offset={d.window[1]}".encode())] if d.window else []),
        )
        for d in result.planned.method.delegates
    ]


@pytest.mark.sweep  # end to end through the command line; the device programs run in-process above
def test_run_cli_proves_a_device_program_on_the_host(tmp_path):
    program = tmp_path / "mlp.pte"
    compiled = devplan_cli("compile", ROOT / "samples" / "mlp.pt2", "-o", program, "--delegate", "cuda:0=aten::linear")
    assert compiled.returncode == 0, compiled.stderr
    assert "buffer 2 (cuda:0)" in compiled.stdout
    assert re.search(r"^  4 delegates on cuda:0 \(DevplanDelegate\), payloads \d", compiled.stdout, re.MULTILINE)
    module, args = sample_models()["mlp"]
    torch.save(list(args), tmp_path / "inputs.pt")
    ran = devplan_cli("run", program, "-i", tmp_path / "inputs.pt", "--devices-on-host", "--save", tmp_path / "out.pt")
    assert ran.returncode == 0, ran.stderr
    with torch.no_grad():
        torch.testing.assert_close(torch.load(tmp_path / "out.pt")[0], module(*args), rtol=1e-4, atol=1e-5)


def test_a_bad_delegate_option_is_one_line_and_writes_nothing(tmp_path):
    target = tmp_path / "out.pte"
    for value in ("tpu:0", "cuda:0=aten::nope"):
        done = devplan_cli("compile", ROOT / "samples" / "mlp.pt2", "-o", target, "--delegate", value)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
        assert value in done.stderr and not target.exists()


def test_compile_json_lists_the_delegates(tmp_path):
    done = devplan_cli(
        "compile", ROOT / "samples" / "mlp.pt2", "-o", tmp_path / "m.pte", "--json", "--delegate", "cuda:0"
    )
    summary = json.loads(done.stdout)["methods"][0]
    assert [d["target_device"] for d in summary["delegates"]] == ["cuda:0"]
    assert summary["delegates"][0]["id"] == "DevplanDelegate" and summary["delegates"][0]["payload_size"] > 0


def test_with_device_io_the_caller_copies_in_and_out_through_the_allocator():
    ep, module, args = case("mlp")
    result = devplan.compile(ep, delegates=["cuda:0"], device_io=True)
    with registered("cuda", Recording()) as device:
        assert_runs_match(run(result.data, list(args)), eager_outputs(module, args), rtol=1e-4, atol=1e-5)
    (payload,) = result.planned.method.delegates
    weights = sum(t["role"] == "constant" for t in devplan.inspect(payload.payload)["methods"][0]["tensors"])
    moves = [call[0] for call in device.calls if call[0] in ("to_device", "to_host")]
    assert moves == ["to_device"] * weights + ["to_device", "to_host"]  # weights at load; then input, output


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("delegates", SPLITS[:1] + (["cuda:0=aten::linear"],), ids=("all", "linear"))
def test_delegated_programs_run_on_the_gpu(delegates):
    ep, module, args = case("transformer")
    result = devplan.compile(ep, delegates=delegates)
    assert_runs_match(run(result.data, list(args)), eager_outputs(module, args), rtol=1e-4, atol=1e-4)
