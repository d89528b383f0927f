"""Device plans: the bytes each device's buffers take, devplan against ExecuTorch 1.5.1,
with the same ops delegated to the same device, and devplan against the device's bound.

    python benchmarks/device_plan_vs_executorch.py [--models two_io,peer:fan_out,hf:gpt2] [--json]

Three kinds of rows. A corpus model (`two_io`): ExecuTorch delegates every aten.add.Tensor
with its device-aware test partitioner (`executorch.exir.backend.test.device_util.
DeviceAwarePartitioner`, target_device=cuda:0, non-CPU memory planning on); devplan compiles
it with `--delegate cuda:0=aten::add`. `peer:NAME`: a scenario of ExecuTorch's own device
tests (testbed/device_peers.py), each tool lowering it as that suite does.
`hf:FAMILY`: a transformers model (testbed/hf_models.py) with every linear on cuda:0: ExecuTorch
through `LinearsOnDevice` below (its demo backend, linears kept whole), devplan through
`--delegate cuda:0=aten::linear`. For each tool: delegates and the bytes planned on each
device (the method's buffers; a devplan delegate's working memory is a window of the device
buffer, so it is counted; an ExecuTorch demo delegate's is its backend's, and is not), the
ratios devplan / ExecuTorch, and devplan's cuda bytes against the device's lower bound (the
most bytes alive there at once, a running delegate's included). devplan plans at ExecuTorch's
alignment, 16 bytes in every buffer (`--alignment 16`), so the rows compare placement: by
default devplan puts CUDA tensors at 512 bytes, where torch's kernels run as fast as on eager's
tensors (README's device section), at most 496 bytes more per CUDA tensor."""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import devplan  # noqa: E402
from benchmarks.harness import catalogue, choose, export, geometric_mean, table  # noqa: E402

ALIGNMENT = 16  # ExecuTorch's planner's, in every buffer

HEADERS = (
    "model",
    "dp delegates",
    "et delegates",
    "dp cpu",
    "et cpu",
    "dp cuda",
    "et cuda",
    "cpu ratio",
    "cuda ratio",
    "total ratio",
    "dp cuda bound",
    "cuda/bound",
)
PEERS = (
    "h2d_d2h_inserted",
    "redundant_same_device_copies_elided",
    "cross_device_copies_kept",
    "output_feeding_same_device_delegates",
    "output_feeding_gpu_and_cpu",
    "output_feeding_same_and_cross_device",
    "skip_h2d_and_d2h",
    "skip_h2d_partial_with_intermediate_input",
)
FAMILIES = ("gpt2", "llama", "qwen3", "bert", "t5_encoder", "vit", "whisper_encoder")
DEFAULT = (
    "two_io",
    "transformer",
    "residual_cnn",
    "transformer_encoder",
    "multi_input_nested",
    "scalar_arithmetic",
    "transformer_2",
    "transformer_8",
    *(f"peer:{name}" for name in PEERS),
    *(f"hf:{name}" for name in FAMILIES),
)


def by_device(data: bytes) -> tuple[int, dict[str, int], dict[str, int]]:
    """(delegates, device -> planned bytes, device -> its lower bound) of a program's first method."""
    method = devplan.inspect(data)["methods"][0]
    return (
        len(method["delegates"]),
        {d["device"]: d["size"] for d in method["devices"]},
        {d["device"]: d["lower_bound"] for d in method["devices"]},
    )


def executorch_device_pte(ep) -> bytes:
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.backend.test.device_util import DeviceAwarePartitioner

    return (
        to_edge_transform_and_lower(ep, partitioner=[DeviceAwarePartitioner("cuda:0")])
        .to_executorch(ExecutorchBackendConfig(enable_non_cpu_memory_planning=True))
        .buffer
    )


def linears_on_device(device: str = "cuda:0"):
    """An ExecuTorch partitioner giving every aten.linear (kept whole through edge lowering) to
    its demo backend with compile spec target_device=device."""
    from executorch.exir.backend.canonical_partitioners.pattern_op_partitioner import generate_pattern_op_partitions
    from executorch.exir.backend.compile_spec_schema import CompileSpec
    from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
    from executorch.exir.backend.test.backend_with_compiler_demo import BackendWithCompilerDemo
    from executorch.exir.backend.utils import tag_constant_data
    from executorch.exir.dialects._ops import ops as exir_ops
    from torch.fx.passes.operator_support import OperatorSupportBase

    class Linears(OperatorSupportBase):
        def is_node_supported(self, submodules, node) -> bool:
            return node.op == "call_function" and node.target == exir_ops.edge.aten.linear.default

    class LinearsOnDevice(Partitioner):
        def __init__(self) -> None:
            super().__init__()
            self.delegation = DelegationSpec(
                BackendWithCompilerDemo.__name__, [CompileSpec("target_device", device.encode())]
            )

        def ops_to_not_decompose(self, ep):
            return [torch.ops.aten.linear.default], None

        def partition(self, ep) -> PartitionResult:
            tags = {}
            for group in generate_pattern_op_partitions(ep.graph_module, op_support=Linears()):
                for node in group.nodes:
                    node.meta["delegation_tag"] = f"tag{group.id}"
                tags[f"tag{group.id}"] = self.delegation
            tag_constant_data(ep)  # the weights go into the delegate, as a real backend's do
            return PartitionResult(tagged_exported_program=ep, partition_tags=tags)

    return LinearsOnDevice()


def _lowerings(name: str):
    """(devplan's lowering, ExecuTorch's lowering), each from nothing to program bytes."""
    if name.startswith("peer:"):
        from testbed.device_peers import executorch_device_pte as peer_pte, peer_scenarios

        model, count, partitioner, skips, backends, device_io, _ = peer_scenarios()[name.removeprefix("peer:")]
        torch.manual_seed(0)
        inputs = tuple(torch.randn(2, 2) for _ in range(count))
        return (
            lambda: (
                devplan.compile(
                    torch.export.export(model, inputs), delegates=backends, device_io=device_io, alignment=ALIGNMENT
                ).data
            ),
            lambda: peer_pte(model, inputs, partitioner, skips),
        )
    if name.startswith("hf:"):
        from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

        from testbed.hf_models import FAMILIES as BUILDERS

        module, args, kwargs = BUILDERS[name.removeprefix("hf:")]()
        ep = torch.export.export(module, args, kwargs, strict=False)
        return (
            lambda: devplan.compile(copy.deepcopy(ep), delegates=["cuda:0=aten::linear"], alignment=ALIGNMENT).data,
            lambda: (
                to_edge_transform_and_lower(copy.deepcopy(ep), partitioner=[linears_on_device()])
                .to_executorch(ExecutorchBackendConfig(enable_non_cpu_memory_planning=True))
                .buffer
            ),
        )
    ep = export(name)
    return (
        lambda: devplan.compile(copy.deepcopy(ep), delegates=["cuda:0=aten::add"], alignment=ALIGNMENT).data,
        lambda: executorch_device_pte(copy.deepcopy(ep)),
    )


def measure(name: str) -> dict:
    row: dict = {"model": name}
    for tool, lower in zip(("devplan", "executorch"), _lowerings(name)):
        try:
            row[f"{tool}_delegates"], row[tool], bounds = by_device(lower())
            if tool == "devplan":
                row["devplan_cuda_bound"] = bounds.get("cuda:0")
        except Exception as error:  # noqa: BLE001 - the benchmark reports every failure and goes on
            row[f"{tool}_error"] = f"{type(error).__name__}: {error}".splitlines()[0]
    if "devplan" in row and "executorch" in row:
        dp, et = row["devplan"], row["executorch"]
        row["cpu_ratio"] = _ratio(dp.get("cpu", 0), et.get("cpu", 0))
        row["cuda_ratio"] = _ratio(_cuda(dp), _cuda(et))
        row["total_ratio"] = _ratio(sum(dp.values()), sum(et.values()))
    if "devplan" in row:
        row["cuda_to_bound"] = _ratio(row["devplan"].get("cuda:0", 0), row.get("devplan_cuda_bound") or 0)
    return row


def _cuda(sizes: dict[str, int]) -> int:
    """Bytes on every CUDA device (the peer scenarios use cuda:1 too)."""
    return sum(size for device, size in sizes.items() if device.startswith("cuda"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated model names (default: {','.join(DEFAULT)})")
    parser.add_argument("--json", action="store_true", help="print JSON rows and summary instead of a table")
    args = parser.parse_args(argv)
    from testbed.device_peers import SCENARIOS
    from testbed.hf_models import FAMILIES as BUILDERS

    known = [*catalogue(), *(f"peer:{name}" for name in SCENARIOS), *(f"hf:{name}" for name in BUILDERS)]
    rows = [measure(name) for name in choose(args.models, DEFAULT, known)]
    compared = [row for row in rows if row.get("total_ratio") is not None]
    summary = {
        key: geometric_mean([row[key] for row in compared if row[key] is not None])
        for key in ("cpu_ratio", "cuda_ratio", "total_ratio")
    }
    summary["not_larger_on_cuda"] = sum(row["cuda_ratio"] is None or row["cuda_ratio"] <= 1 for row in compared)
    summary["compared"] = len(compared)
    bounded = [row["cuda_to_bound"] for row in rows if row.get("cuda_to_bound") is not None]
    summary["cuda_to_bound_max"] = max(bounded, default=None)
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=2))
        return 0
    print(table(HEADERS, [_table_row(row) for row in rows]))
    print()
    print(
        f"devplan's cuda buffers no larger than ExecuTorch's: {summary['not_larger_on_cuda']} of {summary['compared']} models"
    )
    if summary["cuda_to_bound_max"] is not None:
        print(f"devplan's cuda:0 bytes against the device's lower bound, at most: {summary['cuda_to_bound_max']:.4f}")
    for key in ("cpu_ratio", "cuda_ratio", "total_ratio"):
        print(f"geometric mean {key.replace('_', ' ')} (devplan / ExecuTorch): {summary[key]:#.4g}")
    for row in rows:
        for tool in ("devplan", "executorch"):
            if f"{tool}_error" in row:
                print(f"{tool} failed on {row['model']}: {row[f'{tool}_error']}")
    return 0


def _table_row(row: dict) -> list:
    dp, et = row.get("devplan", {}), row.get("executorch", {})
    return [
        row["model"],
        row.get("devplan_delegates"),
        row.get("executorch_delegates"),
        dp.get("cpu"),
        et.get("cpu"),
        _cuda(dp) if dp else None,
        _cuda(et) if et else None,
        row.get("cpu_ratio"),
        row.get("cuda_ratio"),
        row.get("total_ratio"),
        row.get("devplan_cuda_bound"),
        row.get("cuda_to_bound"),
    ]


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


if __name__ == "__main__":
    sys.exit(main())
