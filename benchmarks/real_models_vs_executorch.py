"""Real models from `transformers` (testbed/hf_models.py): compile time and planned memory,
devplan against ExecuTorch's lowering, with devplan's slowest stages.

    python benchmarks/real_models_vs_executorch.py [--models llama,bert] [--repeat 1] [--json]

Each family's tiny random-weight model is exported once under torch.no_grad() (strict=False,
not timed). devplan.compile(ep) and ExecuTorch's to_edge_transform_and_lower(ep).to_executorch()
each run on a fresh copy; the fastest of `--repeat` runs counts. ExecuTorch's bytes are its
better configuration (default or constant propagation); its seconds are the default's. A
family that torch.export or ExecuTorch cannot handle shows `n/a` with the reason below the
table."""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import devplan  # noqa: E402
from benchmarks.harness import best_time, geometric_mean, number, table  # noqa: E402
from devplan.errors import first_line  # noqa: E402
from testbed.executorch import executorch_pte, planned_bytes  # noqa: E402
from testbed.hf_models import FAMILIES  # noqa: E402

HEADERS = (
    "model",
    "devplan s",
    "executorch s",
    "speedup",
    "devplan bytes",
    "executorch bytes",
    "bytes ratio",
    "slowest stages",
)


def export(name: str) -> torch.export.ExportedProgram:
    module, args, kwargs = FAMILIES[name]()
    with torch.no_grad():
        return torch.export.export(module, args, kwargs, strict=False)


def measure(name: str, repeat: int) -> dict:
    ep = export(name)
    devplan_seconds, compiled = best_time(devplan.compile, lambda: copy.deepcopy(ep), repeat)
    stages = sorted(compiled.stage_seconds.items(), key=lambda item: -item[1])[:2]
    row = {
        "model": name,
        "devplan_seconds": devplan_seconds,
        "executorch_seconds": None,
        "speedup": None,
        "devplan_bytes": sum(b.size for b in compiled.planned.buffers),
        "executorch_bytes": None,
        "bytes_ratio": None,
        "slowest_stages": ",".join(f"{stage}:{seconds:.2f}" for stage, seconds in stages),
        "error": None,
    }
    try:
        executorch_seconds, pte = best_time(executorch_pte, lambda: copy.deepcopy(ep), repeat)
        constprop = executorch_pte(copy.deepcopy(ep), const_prop=True)
    except Exception as error:  # ExecuTorch's own failure: reported, not fatal
        return row | {"error": f"executorch: {first_line(error)}"}
    best = min(planned_bytes(pte), planned_bytes(constprop))
    return row | {
        "executorch_seconds": executorch_seconds,
        "speedup": executorch_seconds / devplan_seconds,
        "executorch_bytes": best,
        "bytes_ratio": row["devplan_bytes"] / best,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated families (default: all of {', '.join(FAMILIES)})")
    parser.add_argument("--repeat", type=int, default=1, help="runs per tool and model; the fastest counts")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",")] if args.models else list(FAMILIES)
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(FAMILIES)}")
    rows = [measure(name, max(1, args.repeat)) for name in names]
    if args.json:
        print(json.dumps({"repeat": args.repeat, "rows": rows}, indent=2))
        return 0
    print(
        table(
            HEADERS,
            [
                [
                    row[key]
                    for key in (
                        "model",
                        "devplan_seconds",
                        "executorch_seconds",
                        "speedup",
                        "devplan_bytes",
                        "executorch_bytes",
                        "bytes_ratio",
                        "slowest_stages",
                    )
                ]
                for row in rows
            ],
        )
    )
    compared = [row for row in rows if row["bytes_ratio"] is not None]
    print(
        f"\ndevplan no larger than ExecuTorch's better config on {sum(r['bytes_ratio'] <= 1 for r in compared)} "
        f"of {len(compared)}; geometric mean bytes ratio {number(geometric_mean([r['bytes_ratio'] for r in compared]))}, "
        f"speedup {number(geometric_mean([r['speedup'] for r in compared]))}"
    )
    for row in rows:
        if row["error"]:
            print(f"{row['model']}: {row['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
