"""Programs that ExecuTorch 1.5.1 (the reference writer) lowers for the inspector tests."""

from __future__ import annotations

import torch

from samples.make_samples import sample_models
from testbed.lowerings import executorch_lowered
from testbed.models import export

# Corpus models that add what the samples lack: tensor lists (cat), mutable state.
CORPUS_CASES = ("cat_split_chunk", "accumulator")
NAMES = (*sample_models(), *CORPUS_CASES, "xnnpack", "device")


def lower_all() -> dict[str, bytes]:
    """Name -> .pte bytes for every name in NAMES."""
    built = {
        name: executorch_lowered(torch.export.export(model, args)) for name, (model, args) in sample_models().items()
    }
    for name in CORPUS_CASES:
        built[name] = executorch_lowered(export(name)[0])
    built["xnnpack"] = _xnnpack_lowered()
    built["device"] = _device_lowered()
    return built


def _device_lowered() -> bytes:
    """ExecuTorch's own device program: adds delegated with target_device cuda:0, et_copy ops
    around them, their tensors in a CUDA buffer that only a sparse NonConstBufferDevice names."""
    from executorch.exir import to_edge_transform_and_lower
    from executorch.exir.backend.test.device_util import DeviceAwarePartitioner

    class AddTwice(torch.nn.Module):
        def forward(self, x, y):
            first = x + y
            return (first * 2) + x, first

    exported = torch.export.export(AddTwice(), (torch.randn(2, 4), torch.randn(2, 4)))
    lowered = to_edge_transform_and_lower(exported, partitioner=[DeviceAwarePartitioner("cuda:0")])
    return lowered.to_executorch().buffer


def _xnnpack_lowered() -> bytes:
    """A delegate whose payload ExecuTorch stores in a segment, beside portable kernels."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU()).eval()
    exported = torch.export.export(model, (torch.randn(2, 8),))
    lowered = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    return lowered.to_executorch().buffer
