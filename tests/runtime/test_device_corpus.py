"""Device programs at the size users run (issue 40): each model of testbed/device_corpus.py,
with every op on cuda:0 and with --device-io, runs host-backed and matches the CPU program of
the same export; a payload plans what CUDA's kernels write, not the host's; the GPU tier
(marked cuda) runs the corpus through TorchCudaAllocator where a GPU is at hand."""

from __future__ import annotations

import pytest
import torch

import devplan
from devplan.errors import DevplanError
from devplan.ops import DEVICE_SHAPED, kernel_name, out_schema, schema_name
from devplan.passes import AFTER_FOLD, BEFORE_FOLD
from devplan.passes.export.split import from_exported
from devplan.passes.graph.device_results import results_on_device
from devplan.passes.graph.fold import fold_constants
from devplan.pte import read_pte
from devplan.pte.decode import methods
from devplan.runtime import HostAllocator, registered
from devplan.spec import Device
from testbed.device_corpus import DEVICE_CORPUS
from tests.tiers import tiered

MODES = {"delegate": {"delegates": ["cuda:0"]}, "device-io": {"delegates": ["cuda:0"], "device_io": True}}
CASES = [(name, mode) for name in DEVICE_CORPUS for mode in MODES]
_built: dict[str, tuple] = {}


def _case(name: str):
    """(module, args, export, the CPU program's outputs), built once per worker."""
    if name not in _built:
        module, args = DEVICE_CORPUS[name]()
        ep = torch.export.export(module, args)
        (expected,) = devplan.run(devplan.compile(ep).data, list(args))
        _built[name] = module, args, ep, expected
    return _built[name]


@pytest.mark.parametrize("name, mode", tiered(CASES, fast={("convnet", "delegate"), ("batchnorm", "device-io")}))
def test_real_size_device_programs_run_host_backed_and_match_the_cpu_program(name, mode):
    module, args, ep, expected = _case(name)
    result = devplan.compile(ep, **MODES[mode])
    cuda = sum(b.size for b in result.planned.buffers if b.device.type == "cuda")
    assert cuda > 4 << 20  # large enough that the runtime's slack no longer hides its windows
    with registered("cuda", HostAllocator()):
        (outputs,) = devplan.run(result.data, list(args))
    torch.testing.assert_close(outputs, expected, rtol=0, atol=0)
    assert all(c.ok for c in devplan.check(result.data, max_ratio=1.05))


def test_a_buffer_far_beyond_its_tensors_and_windows_is_still_refused():
    """The windows count in a buffer's reach, and a damaged size beyond them is refused as before."""

    module, args, ep, _ = _case("convnet")
    data = bytearray(devplan.compile(ep, delegates=["cuda:0"], device_io=True).data)
    size = next(b.size for b in devplan.compile(ep, delegates=["cuda:0"], device_io=True).planned.buffers)
    at = bytes(data).find(size.to_bytes(8, "little"))
    assert at > 0
    data[at : at + 8] = (8 * size).to_bytes(8, "little")
    with registered("cuda", HostAllocator()), pytest.raises(DevplanError, match="reach only"):
        devplan.run(bytes(data), list(args))


def _bn_outs(data: bytes) -> list[tuple[int, ...]]:
    """The shapes of the saved statistics each batch norm of the program's payloads writes."""
    pte = read_pte(data)
    shapes = []
    for index in range(len(methods(pte)[0].delegates)):
        view = methods(pte.delegate_program(0, index))[0]
        for row in view.instructions:
            if row.kind == "kernel" and view.operator(row.op) in DEVICE_SHAPED:
                outs = row.args[-4:-1]  # out, save_mean, save_invstd, then the result list
                shapes += [tuple(view.tensors[i].shape) for i in outs[1:]]
    return shapes


def test_a_cuda_payload_plans_the_batch_norm_statistics_cudas_kernel_writes():
    """CUDA's batch norm writes its saved mean and inverse std with one element per channel,
    the CPU's none: a payload on cuda:0 plans the channels (the GPU refused (16,) into (0,))."""
    _, _, ep, _ = _case("batchnorm")
    assert _bn_outs(devplan.compile(ep, delegates=["cuda:0"]).data) == [(32,)] * 4
    assert _bn_outs(devplan.compile(ep, delegates=["cuda:0"], device_io=True).data) == [(32,)] * 4


def _device_shaped_nodes(ep: torch.export.ExportedProgram) -> set[str]:
    """The out kernels of the ops whose results torch's meta functions give other shapes or
    dtypes on cuda than on the host, in the graph a delegate's group is cut from."""
    low = from_exported(ep)
    for _, graph_pass in BEFORE_FOLD:
        low = graph_pass(low)
    low = fold_constants(low).program
    for _, graph_pass in AFTER_FOLD:
        low = graph_pass(low)
    before = {n: n.meta.get("val") for n in low.gm.graph.nodes}
    changed = set()
    for node in results_on_device(low, Device.parse("cuda:0")).gm.graph.nodes:
        if node.meta.get("val") is not before[node] and isinstance(node.target, torch._ops.OpOverload):
            schema = out_schema(node.target)
            changed.add(schema_name(schema) if schema is not None else kernel_name(node.target))
    return changed


def test_device_shaped_table_is_what_the_cuda_meta_functions_say_over_the_corpus():
    """ops.DEVICE_SHAPED, which the runtime reads, holds every op whose results differ on cuda
    over the device corpus, the samples and the model zoo's norms and dropouts."""
    from testbed.models import CORPUS as ZOO

    found = set()
    for name in ("batchnorm", "convnet", "llama"):
        found |= _device_shaped_nodes(_case(name)[2])
    for case in ZOO.values():
        module, args = case()[:2]
        found |= _device_shaped_nodes(torch.export.export(module, args))
    assert found and found <= set(DEVICE_SHAPED)


def test_a_bfloat16_layer_norm_on_cuda_runs_on_the_hosts_kernels_within_its_plan():
    """CUDA's layer norm keeps a bfloat16 input's statistics in float, the CPU's in bfloat16:
    the payload plans float, and the host's kernel writes bfloat16 within those bytes."""
    module, x = torch.nn.LayerNorm(64).bfloat16().eval(), torch.randn(8, 64).bfloat16()
    ep = torch.export.export(module, (x,))
    assert _device_shaped_nodes(ep) == {"aten::native_layer_norm.out"} <= set(DEVICE_SHAPED)
    for device_io in (False, True):
        data = devplan.compile(ep, delegates=["cuda:0"], device_io=device_io).data
        with registered("cuda", HostAllocator()):
            (outputs,) = devplan.run(data, [x])
            torch.testing.assert_close(outputs[0], module(x))


def test_results_on_a_cpu_delegate_are_the_traced_ones():
    _, _, ep, _ = _case("batchnorm")
    low = from_exported(ep)
    before = {n.name: n.meta.get("val") for n in low.gm.graph.nodes}
    after = results_on_device(low, Device.parse("cpu"))
    assert all(n.meta.get("val") is before[n.name] for n in after.gm.graph.nodes)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU tier needs a CUDA GPU")
@pytest.mark.parametrize("name, mode", CASES)
def test_device_programs_run_on_a_gpu_through_torch_cuda_allocator(name, mode):
    """The GPU tier: the first call runs step by step, the second captures a CUDA graph, the
    third replays it; each matches the CPU program, and the device holds the plan."""
    from devplan.runtime import LoadedMethod
    from devplan.runtime.graphs import captured

    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False  # the CPU's arithmetic
    _, args, ep, expected = _case(name)
    loaded = LoadedMethod(read_pte(devplan.compile(ep, **MODES[mode]).data))
    try:
        for _ in range(3):
            (output,) = loaded.execute(list(args))
            torch.testing.assert_close(output, expected[0], rtol=1e-4, atol=1e-4)
        assert captured(loaded)
        assert all(arena.is_cuda for arena, device in loaded.arenas.values() if device.type == "cuda")
    finally:
        loaded.release()
