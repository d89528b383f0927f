"""Mixture-of-experts models from `transformers` (testbed/hf_models.py MOE_FAMILIES): devplan's
program of the model as transformers runs it against ExecuTorch's best, planned bytes.

    python benchmarks/moe_vs_executorch.py [--models mixtral,qwen3_moe] [--json]

Each tiny random-weight model is exported under torch.no_grad() (strict=False, not timed) with
transformers' default experts ("grouped_mm": aten.histc counts each expert's tokens,
transformers::grouped_mm_fallback multiplies them), which devplan compiles and ExecuTorch's
lowering refuses (its error is printed below the table). ExecuTorch does lower the same model
with transformers' "batched_mm" experts (every token's expert weights gathered, then one
batched product), so that form's better configuration (default or constant propagation) is
the baseline; devplan's plan of the batched form is shown beside it."""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import devplan  # noqa: E402
from benchmarks.harness import choose, geometric_mean, number, table  # noqa: E402
from devplan.errors import first_line  # noqa: E402
from testbed.executorch import executorch_pte, planned_bytes  # noqa: E402
from testbed.hf_models import MOE_FAMILIES  # noqa: E402

HEADERS = ("model", "devplan s", "devplan bytes", "executorch batched bytes", "bytes ratio", "devplan batched bytes")


def export(name: str, experts: str) -> torch.export.ExportedProgram:
    module, args, kwargs = MOE_FAMILIES[name]()
    module.set_experts_implementation(experts)
    with torch.no_grad():
        return torch.export.export(module, args, kwargs, strict=False)


def measure(name: str) -> dict:
    grouped, batched = export(name, "grouped_mm"), export(name, "batched_mm")
    began = time.perf_counter()
    compiled = devplan.compile(copy.deepcopy(grouped))
    seconds = time.perf_counter() - began
    try:
        executorch_pte(copy.deepcopy(grouped))
        refused = None
    except Exception as error:  # ExecuTorch's own failure, which this benchmark reports
        refused = f"executorch on grouped_mm experts: {first_line(error)}"
    theirs = min(
        planned_bytes(executorch_pte(copy.deepcopy(batched), const_prop=const_prop)) for const_prop in (False, True)
    )
    ours = planned_bytes(compiled.data)
    return {
        "model": name,
        "devplan_seconds": seconds,
        "devplan_bytes": ours,
        "executorch_batched_bytes": theirs,
        "bytes_ratio": ours / theirs,
        "devplan_batched_bytes": planned_bytes(devplan.compile(batched).data),
        "error": refused,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated families (default: all of {', '.join(MOE_FAMILIES)})")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = parser.parse_args(argv)
    rows = [measure(name) for name in choose(args.models, MOE_FAMILIES, MOE_FAMILIES)]
    if args.json:
        print(json.dumps({"rows": rows}, indent=2))
        return 0
    keys = (
        "model",
        "devplan_seconds",
        "devplan_bytes",
        "executorch_batched_bytes",
        "bytes_ratio",
        "devplan_batched_bytes",
    )
    print(table(HEADERS, [[row[key] for key in keys] for row in rows]))
    print(
        f"\ngeometric mean bytes ratio {number(geometric_mean([r['bytes_ratio'] for r in rows]))} "
        f"(devplan on transformers' experts / ExecuTorch on the batched experts it lowers)"
    )
    print("\n".join(f"{row['model']}: {row['error']}" for row in rows if row["error"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
