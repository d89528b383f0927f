"""devplan's planner inside ExecuTorch's pipeline: the bytes ExecuTorch 1.5.1 plans for the same
graphs with its default planner and with `devplan.executorch.memory_planning_algo` as its
MemoryPlanningPass's algorithm.

    python benchmarks/planner_plugin.py [--models linear,cnn] [--xnnpack] [--json]

For every sample, test-corpus model and transformer stack (2, 8 and 32 layers): ExecuTorch's
default portable lowering of one export (testbed/executorch.py: alignment 16, inputs, outputs and
mutable buffers planned; with --xnnpack, its XNNPACK partitioner first), once with its greedy planner and once with devplan's algorithm, nothing
else different; the bytes each program's buffers take (`et default`, `with devplan`), their ratio
(with devplan / et default, geometric mean at the end), whether both programs, run on
ExecuTorch's runtime, return what the eager module does (twice for a model with state;
testbed.models.mismatch's tolerance), and whether devplan's returns exactly what ExecuTorch's
default does (same kernels, other offsets). A row where the plug-in plans more is marked LARGER."""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.harness import SAMPLES, TRANSFORMERS, catalogue, choose, geometric_mean, number, table  # noqa: E402
from devplan.executorch import memory_planning_algo  # noqa: E402
from testbed.executorch import executorch_pte, planned_bytes  # noqa: E402
from testbed.models import CORPUS, STATEFUL, eager_outputs, mismatch, run_executorch  # noqa: E402

HEADERS = ("model", "et default", "with devplan", "ratio", "match eager", "= et default", "")


def measure(name: str, xnnpack: bool = False) -> dict:
    module, args = catalogue()[name]()
    ep = torch.export.export(module, args, strict=False)
    runs = 2 if name in STATEFUL else 1  # state carries over between calls, as in eager
    want = eager_outputs(copy.deepcopy(module), args, runs=runs)
    row: dict = {"model": name}
    outputs = {}
    for key, algo in (("et_default", None), ("devplan", memory_planning_algo)):
        program = executorch_pte(copy.deepcopy(ep), memory_planning_algo=algo, xnnpack=xnnpack)
        row[key] = planned_bytes(program)
        outputs[key] = run_executorch(program, args, runs=runs)
        row[f"{key}_mismatch"] = mismatch("ExecuTorch's runtime", outputs[key], want)
    row["ratio"] = row["devplan"] / row["et_default"] if row["et_default"] else 1.0
    row["identical"] = all(
        torch.equal(ours, theirs)
        for run_ours, run_theirs in zip(outputs["devplan"], outputs["et_default"], strict=True)
        for ours, theirs in zip(run_ours, run_theirs, strict=True)
    )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated model names (default: all)")
    parser.add_argument("--xnnpack", action="store_true", help="lower with ExecuTorch's XNNPACK partitioner")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    options = parser.parse_args(argv)
    rows = [measure(name, options.xnnpack) for name in choose(options.models, [*SAMPLES, *CORPUS, *TRANSFORMERS])]
    ratio = geometric_mean([row["ratio"] for row in rows])
    if options.json:
        print(json.dumps({"rows": rows, "geomean_ratio": ratio}, indent=2))
        return 0
    print(
        table(
            HEADERS,
            [
                (
                    row["model"],
                    row["et_default"],
                    row["devplan"],
                    number(row["ratio"]),
                    "yes" if row["et_default_mismatch"] is None and row["devplan_mismatch"] is None else "NO",
                    "yes" if row["identical"] else "NO",
                    "LARGER" if row["devplan"] > row["et_default"] else "",
                )
                for row in rows
            ],
        )
    )
    print(f"\ngeomean with devplan / et default: {number(ratio)} over {len(rows)} models")
    for row in rows:
        for key in ("et_default_mismatch", "devplan_mismatch"):
            if row[key] is not None:
                print(f"{row['model']} ({key.removesuffix('_mismatch')}): {row[key]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
