"""Device plans: the bytes each device's buffers take, devplan against ExecuTorch 1.5.1,
with the same ops delegated to cuda:0.

    python benchmarks/device_plan_vs_executorch.py [--models two_io,transformer] [--json]

ExecuTorch delegates every aten.add.Tensor with its device-aware test partitioner
(`executorch.exir.backend.test.device_util.DeviceAwarePartitioner`, compile spec
target_device=cuda:0; its default config inserts et_copy ops and plans device memory
separately). devplan compiles the same model with `--delegate cuda:0=aten::add`. For each
tool: delegates, the bytes planned on the CPU and on cuda:0 (the method's own buffers; a
delegate's internal memory is its backend's), and ratios devplan / ExecuTorch. The default
models all have adds; a tool that fails on a model shows its error."""
from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import devplan  # noqa: E402
from benchmarks.harness import choose, export, geometric_mean, table  # noqa: E402

HEADERS = ("model", "dp delegates", "et delegates", "dp cpu", "et cpu", "dp cuda:0", "et cuda:0",
           "cpu ratio", "cuda ratio", "total ratio")
DEFAULT = ("two_io", "transformer", "residual_cnn", "transformer_encoder", "multi_input_nested", "scalar_arithmetic",
           "transformer_2", "transformer_8")


def by_device(data: bytes) -> tuple[int, dict[str, int]]:
    """(delegates, device -> planned bytes) of a program's first method."""
    method = devplan.inspect(data)["methods"][0]
    sizes: dict[str, int] = {}
    for buffer in method["buffers"]:
        sizes[buffer["device"]] = sizes.get(buffer["device"], 0) + buffer["size"]
    return len(method["delegates"]), sizes


def executorch_device_pte(ep) -> bytes:
    from executorch.exir import to_edge_transform_and_lower
    from executorch.exir.backend.test.device_util import DeviceAwarePartitioner

    return to_edge_transform_and_lower(ep, partitioner=[DeviceAwarePartitioner("cuda:0")]).to_executorch().buffer


def measure(name: str) -> dict:
    ep = export(name)
    row: dict = {"model": name}
    for tool, lower in (("devplan", lambda e: devplan.compile(e, delegates=["cuda:0=aten::add"]).data),
                        ("executorch", executorch_device_pte)):
        try:
            row[f"{tool}_delegates"], row[tool] = by_device(lower(copy.deepcopy(ep)))
        except Exception as error:  # noqa: BLE001 - the benchmark reports every failure and goes on
            row[f"{tool}_error"] = f"{type(error).__name__}: {error}".splitlines()[0]
    if "devplan" in row and "executorch" in row:
        dp, et = row["devplan"], row["executorch"]
        row["cpu_ratio"] = _ratio(dp.get("cpu", 0), et.get("cpu", 0))
        row["cuda_ratio"] = _ratio(dp.get("cuda:0", 0), et.get("cuda:0", 0))
        row["total_ratio"] = _ratio(sum(dp.values()), sum(et.values()))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated model names (default: {','.join(DEFAULT)})")
    parser.add_argument("--json", action="store_true", help="print JSON rows and summary instead of a table")
    args = parser.parse_args(argv)
    rows = [measure(name) for name in choose(args.models, DEFAULT)]
    compared = [row for row in rows if row.get("total_ratio") is not None]
    summary = {key: geometric_mean([row[key] for row in compared if row[key] is not None])
               for key in ("cpu_ratio", "cuda_ratio", "total_ratio")}
    summary["not_larger_on_cuda"] = sum(row["cuda_ratio"] is None or row["cuda_ratio"] <= 1 for row in compared)
    summary["compared"] = len(compared)
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=2))
        return 0
    print(table(HEADERS, [_table_row(row) for row in rows]))
    print()
    print(f"devplan's cuda:0 buffers no larger than ExecuTorch's: {summary['not_larger_on_cuda']} of {summary['compared']} models")
    for key in ("cpu_ratio", "cuda_ratio", "total_ratio"):
        print(f"geometric mean {key.replace('_', ' ')} (devplan / ExecuTorch): {summary[key]:#.4g}")
    for row in rows:
        for tool in ("devplan", "executorch"):
            if f"{tool}_error" in row:
                print(f"{tool} failed on {row['model']}: {row[f'{tool}_error']}")
    return 0


def _table_row(row: dict) -> list:
    dp, et = row.get("devplan", {}), row.get("executorch", {})
    return [row["model"], row.get("devplan_delegates"), row.get("executorch_delegates"), dp.get("cpu"), et.get("cpu"),
            dp.get("cuda:0"), et.get("cuda:0"), row.get("cpu_ratio"), row.get("cuda_ratio"), row.get("total_ratio")]


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


if __name__ == "__main__":
    sys.exit(main())
