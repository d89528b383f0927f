"""Compile time and planned memory: devplan.compile against ExecuTorch's lowering.

    python benchmarks/compile_vs_executorch.py [--models mlp,transformer_32] [--repeat 3] [--json]

Each model is exported once (not timed); then devplan.compile(ep) and ExecuTorch's
to_edge_transform_and_lower(ep).to_executorch() (default config, serialized to bytes) each
run `--repeat` times on a fresh copy of that ExportedProgram and the fastest run counts.
Both tools first lower a tiny model untimed, so one-off imports land on neither side.
`devplan process s` is the whole `devplan compile MODEL.pt2` command in a fresh Python
process (interpreter start, imports and torch.export.load included), against which
`process speedup` sets ExecuTorch's in-process lowering. Planned bytes are the sums of the
programs' non-constant buffers."""

from __future__ import annotations

import argparse
import copy
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import devplan  # noqa: E402
from benchmarks.harness import SAMPLES, TRANSFORMERS, best_time, choose, export, table  # noqa: E402
from testbed.executorch import executorch_pte, planned_bytes  # noqa: E402

HEADERS = (
    "model",
    "devplan s",
    "devplan process s",
    "executorch s",
    "speedup",
    "process speedup",
    "devplan bytes",
    "executorch bytes",
    "bytes ratio",
)
WARM_UP_MODEL = "linear"


def measure(name: str, repeat: int) -> dict:
    ep = export(name)
    devplan_seconds, compiled = best_time(devplan.compile, lambda: copy.deepcopy(ep), repeat)
    executorch_seconds, pte = best_time(executorch_pte, lambda: copy.deepcopy(ep), repeat)
    process_seconds = process_time(ep, repeat)
    devplan_bytes = sum(buffer.size for buffer in compiled.planned.buffers)
    executorch_bytes = planned_bytes(pte)
    return {
        "model": name,
        "devplan_seconds": devplan_seconds,
        "devplan_process_seconds": process_seconds,
        "executorch_seconds": executorch_seconds,
        "speedup": executorch_seconds / devplan_seconds,
        "process_speedup": executorch_seconds / process_seconds,
        "devplan_bytes": devplan_bytes,
        "executorch_bytes": executorch_bytes,
        "bytes_ratio": devplan_bytes / executorch_bytes,
    }


def process_time(ep, repeat: int) -> float:
    """Fastest of `repeat` runs of the `devplan compile` command on `ep` saved as a .pt2."""
    import torch

    with tempfile.TemporaryDirectory() as folder:
        model = Path(folder) / "model.pt2"
        torch.export.save(ep, model)
        best = math.inf
        for _ in range(repeat):
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "devplan", "compile", model, "-o", Path(folder) / "model.pte"],
                check=True,
                capture_output=True,
            )
            best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated model names (default: the samples and transformer_2/8/32)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per tool and model; the fastest counts")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = parser.parse_args(argv)
    names = choose(args.models, SAMPLES + TRANSFORMERS)

    warm_up = export(WARM_UP_MODEL)
    best_time(devplan.compile, lambda: copy.deepcopy(warm_up), 1)
    best_time(executorch_pte, lambda: copy.deepcopy(warm_up), 1)

    rows = [measure(name, max(1, args.repeat)) for name in names]
    if args.json:
        print(json.dumps({"repeat": args.repeat, "rows": rows}, indent=2))
        return 0
    print(
        f"best of {args.repeat} run(s) per tool; speedup = executorch s / devplan s; "
        "bytes ratio = devplan bytes / executorch bytes"
    )
    print(table(HEADERS, [list(row.values()) for row in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
