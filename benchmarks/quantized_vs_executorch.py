"""PT2E-quantized programs: devplan.compile against ExecuTorch's lowering of the same program.

    python benchmarks/quantized_vs_executorch.py [--models mlp,cnn] [--configs per_channel,dynamic] [--repeat 3] [--json]

Each model is quantized with ExecuTorch's XNNPACK quantizer (torchao's prepare_pt2e and
convert_pt2e, calibrated on its sample inputs) under each config, and exported once, untimed.
Both tools then compile it `--repeat` times from a fresh copy, the fastest run counting, to
portable plus quantized kernels (no delegate). Printed: compile seconds, planned bytes (the
non-constant buffers) and constant bytes of each program, with devplan's ratios to
ExecuTorch's."""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import devplan  # noqa: E402
from benchmarks.harness import best_time, catalogue, choose, table  # noqa: E402
from testbed.executorch import executorch_pte, planned_bytes  # noqa: E402
from testbed.models import pt2e_quantize  # noqa: E402

MODELS = (
    "mlp",
    "cnn",
    "transformer",
    "linear",
    "conv_bn_relu",
    "depthwise_separable",
    "gated_mlp",
    "residual_cnn",
    "transformer_encoder",
    "transformer_8",
)
CONFIGS = {
    "per_tensor": {},
    "per_channel": {"is_per_channel": True},
    "dynamic": {"is_per_channel": True, "is_dynamic": True},
}
HEADERS = (
    "model",
    "config",
    "devplan s",
    "executorch s",
    "speedup",
    "devplan planned",
    "executorch planned",
    "planned ratio",
    "devplan constants",
    "executorch constants",
)


def measure(name: str, config: str, repeat: int) -> dict:
    module, args = catalogue()[name]()
    ep, _ = pt2e_quantize(module, args, **CONFIGS[config])
    devplan_seconds, compiled = best_time(devplan.compile, lambda: copy.deepcopy(ep), repeat)
    executorch_seconds, pte = best_time(executorch_pte, lambda: copy.deepcopy(ep), repeat)
    return {
        "model": name,
        "config": config,
        "devplan_seconds": devplan_seconds,
        "executorch_seconds": executorch_seconds,
        "speedup": executorch_seconds / devplan_seconds,
        "devplan_planned": planned_bytes(compiled.data),
        "executorch_planned": planned_bytes(pte),
        "planned_ratio": planned_bytes(compiled.data) / planned_bytes(pte),
        "devplan_constants": compiled.constant_bytes,
        "executorch_constants": devplan.inspect(pte)["file"]["constant_bytes"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated model names (default: {','.join(MODELS)})")
    parser.add_argument("--configs", help=f"comma-separated quantization configs (default: {','.join(CONFIGS)})")
    parser.add_argument("--repeat", type=int, default=3, help="runs per tool and model; the fastest counts")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = parser.parse_args(argv)
    names = choose(args.models, MODELS)
    configs = choose(args.configs, list(CONFIGS), known=list(CONFIGS))
    import executorch.kernels.quantized  # noqa: F401 - ExecuTorch's lowering needs the quantized out variants

    rows = [measure(name, config, max(1, args.repeat)) for name in names for config in configs]
    if args.json:
        print(json.dumps({"repeat": args.repeat, "rows": rows}, indent=2))
        return 0
    print(
        f"best of {args.repeat} run(s) per tool; speedup = executorch s / devplan s; "
        "planned ratio = devplan planned / executorch planned (bytes)"
    )
    print(table(HEADERS, [list(row.values()) for row in rows]))
    ratios = [row["planned_ratio"] for row in rows]
    print(
        f"\ndevplan planned <= executorch on {sum(r <= 1 for r in ratios)} of {len(ratios)}; geometric mean "
        f"planned ratio {math.exp(sum(map(math.log, ratios)) / len(ratios)):.4f}; geometric mean speedup "
        f"{math.exp(sum(math.log(row['speedup']) for row in rows) / len(rows)):.1f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
