"""Dynamic shapes: devplan's plan and compile time against ExecuTorch's lowering of the same export.

    python benchmarks/dynamic_vs_executorch.py [--models linear,encoder_2] [--repeat 1] [--json]

Models: every compile-test corpus model that torch.export keeps with a dynamic batch, exported
as testbed/dynamic_corpus.py does (its BATCHES, batch up to its BOUND; a model whose
batch cannot be dynamic is listed as skipped with torch's reason), and attention models with a
dynamic batch (up to 4) and sequence (up to 64), width 64 and 4 heads: EncoderBlock stacks of
2 and 8 (samples/make_samples.py, hidden 128), nn.MultiheadAttention followed by a Linear, and
causal scaled_dot_product_attention.

Each tool gets its own fresh export, made outside the clock (ExecuTorch's lowering can rewrite
a dynamic export's shapes); devplan.compile(ep) and testbed.executorch.executorch_pte(ep) (default
config, serialized to bytes) are each timed `--repeat` times and the fastest run counts; both
first lower a tiny model untimed so one-off imports land on neither side. Planned bytes are the
sums of the sizes of the method's planned buffers (devplan.inspect). ExecuTorch's program is
then run by its runtime with inputs at the bound: where it refuses, it planned for smaller
shapes than the bound, so its bytes are not like-for-like; such rows are marked EXCLUDED and
left out of the summary. Nothing here asserts timings or sizes."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pytest  # noqa: E402 - the corpus' exports skip through pytest.skip
import torch  # noqa: E402
from torch.export import Dim  # noqa: E402

import devplan  # noqa: E402
from benchmarks.harness import best_time, choose, geometric_mean, number, table  # noqa: E402 - also quiets ExecuTorch's warnings
from samples.make_samples import EncoderBlock  # noqa: E402
from testbed.dynamic_corpus import BOUND, batched, exported  # noqa: E402
from testbed.executorch import executorch_pte, planned_bytes  # noqa: E402
from testbed.models import CORPUS, run_executorch  # noqa: E402

HEADERS = (
    "model",
    "devplan bytes",
    "executorch bytes",
    "bytes ratio",
    "devplan s",
    "executorch s",
    "speedup",
    "et at bound",
    "",
)
LARGER = "LARGER"  # devplan plans more than ExecuTorch (like-for-like rows only)
EXCLUDED = "EXCLUDED"  # ExecuTorch's own program refuses the bound: its plan is not like-for-like
WARM_UP_MODEL = "linear"

MAX_BATCH, MAX_SEQ = 4, 64
WIDTH, HEADS, HIDDEN = 64, 4, 128
EXAMPLE_SHAPE = (2, 16, WIDTH)  # example sizes of 1 (or equal dims) would be specialized by torch

Skipped = pytest.skip.Exception  # _pytest.outcomes.Skipped, a BaseException


class MultiheadAttentionLinear(torch.nn.Module):
    """torch.nn.MultiheadAttention (self-attention, batch first) followed by a Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
        self.linear = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attended, _ = self.attention(x, x, x, need_weights=False)
        return self.linear(attended)


class CausalAttention(torch.nn.Module):
    """torch's fused attention with a causal mask (as tests/dynamic/test_dynamic.py's, at width 64)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, HEADS, dim // HEADS).permute(2, 0, 3, 1, 4)
        attended = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return attended.transpose(1, 2).reshape(batch, seq, dim)


def encoder_stack(layers: int) -> torch.nn.Module:
    return torch.nn.Sequential(*(EncoderBlock(WIDTH, HEADS, HIDDEN) for _ in range(layers)))


ATTENTION: dict[str, Callable[[], torch.nn.Module]] = {
    "encoder_2": lambda: encoder_stack(2),
    "encoder_8": lambda: encoder_stack(8),
    "mha_linear": MultiheadAttentionLinear,
    "causal_sdpa": CausalAttention,
}
NAMES = tuple(sorted(CORPUS)) + tuple(ATTENTION)


@dataclass(frozen=True)
class Case:
    """A model's fresh dynamic export on each call, and inputs at its bound."""

    export: Callable[[], torch.export.ExportedProgram]
    at_bound: tuple


def case(name: str) -> Case:
    """Raises Skipped (from the corpus' exported) where torch keeps no dynamic batch."""
    if name in ATTENTION:

        def export() -> torch.export.ExportedProgram:
            torch.manual_seed(0)
            dims = ({0: Dim("batch", min=1, max=MAX_BATCH), 1: Dim("seq", min=2, max=MAX_SEQ)},)
            return torch.export.export(
                ATTENTION[name]().eval(), (torch.randn(*EXAMPLE_SHAPE),), dynamic_shapes=dims, strict=False
            )

        export()  # fail here, not in the timed runs
        return Case(export, (torch.randn(MAX_BATCH, MAX_SEQ, WIDTH),))
    _, _, args = exported(name)
    torch.manual_seed(1)
    return Case(lambda: exported(name)[0], batched(name, args, BOUND))


def measure(name: str, model: Case, repeat: int) -> dict:
    row: dict = {"model": name}
    try:
        row["devplan_seconds"], compiled = best_time(devplan.compile, model.export, repeat)
        row["devplan_bytes"] = planned_bytes(compiled.data)
    except Exception as error:  # noqa: BLE001 - the benchmark reports every failure and goes on
        row["devplan_error"] = _message(error)
    try:
        row["executorch_seconds"], theirs = best_time(executorch_pte, model.export, repeat)
        row["executorch_bytes"] = planned_bytes(theirs)
    except Exception as error:  # noqa: BLE001
        row["executorch_error"] = _message(error)
    else:
        try:
            run_executorch(theirs, model.at_bound)
            row["executorch_runs_at_bound"] = True
        except Exception as error:  # noqa: BLE001 - e.g. a derived dim planned at the example's size
            row["executorch_runs_at_bound"] = False
            row["executorch_bound_error"] = _message(error)
    if "devplan_bytes" in row and "executorch_bytes" in row:
        row["bytes_ratio"] = row["devplan_bytes"] / row["executorch_bytes"]
        row["speedup"] = row["executorch_seconds"] / row["devplan_seconds"]
        row["compared"] = row["executorch_runs_at_bound"]
        row["larger_than_et"] = row["compared"] and row["devplan_bytes"] > row["executorch_bytes"]
    return row


def summarize(rows: list[dict], skipped: dict[str, str]) -> dict:
    compared = [row for row in rows if row.get("compared")]
    return {
        "models": len(rows),
        "compared": len(compared),
        "devplan_not_larger": sum(not row["larger_than_et"] for row in compared),
        "geomean_bytes_ratio": geometric_mean([row["bytes_ratio"] for row in compared]) if compared else None,
        "geomean_speedup": geometric_mean([row["speedup"] for row in compared]) if compared else None,
        "larger_than_et": {
            row["model"]: [row["devplan_bytes"], row["executorch_bytes"]] for row in compared if row["larger_than_et"]
        },
        "excluded": {
            row["model"]: row["executorch_bound_error"] for row in rows if row.get("executorch_runs_at_bound") is False
        },
        "skipped": skipped,
        "devplan_errors": {row["model"]: row["devplan_error"] for row in rows if "devplan_error" in row},
        "executorch_errors": {row["model"]: row["executorch_error"] for row in rows if "executorch_error" in row},
    }


def report(rows: list[dict], summary: dict, repeat: int) -> str:
    lines = [
        f"best of {repeat} run(s) per tool; bytes ratio = devplan bytes / executorch bytes; "
        "speedup = executorch s / devplan s; et at bound: ExecuTorch's own program runs with inputs at the bound",
        table(HEADERS, [_table_row(row) for row in rows]),
        "",
    ]
    lines.append(
        f"devplan <= ExecuTorch: {summary['devplan_not_larger']} of {summary['compared']} models "
        f"(like-for-like: ExecuTorch runs at the bound; {len(summary['excluded'])} excluded)"
    )
    lines.append(f"geometric mean devplan / ExecuTorch bytes: {number(summary['geomean_bytes_ratio'])}")
    lines.append(f"geometric mean speedup (ExecuTorch s / devplan s): {number(summary['geomean_speedup'])}")
    larger = [f"{model} ({ours} > {theirs})" for model, (ours, theirs) in summary["larger_than_et"].items()]
    lines.append(f"devplan larger than ExecuTorch: {', '.join(larger) or 'none'}")
    lines += [
        f"excluded {model}: ExecuTorch's program refuses the bound: {message}"
        for model, message in summary["excluded"].items()
    ]
    lines += [f"skipped {model}: {reason}" for model, reason in summary["skipped"].items()]
    lines += [f"devplan failed on {model}: {message}" for model, message in summary["devplan_errors"].items()]
    lines += [f"ExecuTorch failed on {model}: {message}" for model, message in summary["executorch_errors"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated model names (default: the corpus and the attention models)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per tool and model; the fastest counts")
    parser.add_argument("--json", action="store_true", help="print JSON rows and summary instead of a table")
    args = parser.parse_args(argv)
    names = choose(args.models, NAMES, NAMES)
    repeat = max(1, args.repeat)

    warm_up = case(WARM_UP_MODEL)
    best_time(devplan.compile, warm_up.export, 1)
    best_time(executorch_pte, warm_up.export, 1)

    rows, skipped = [], {}
    for name in names:
        try:
            model = case(name)
        except Skipped as skip:
            skipped[name] = str(skip.msg).removeprefix(f"{name}: ")
            continue
        except Exception as error:  # noqa: BLE001 - an export failure of an attention model
            skipped[name] = f"torch.export failed: {_message(error)}"
            continue
        rows.append(measure(name, model, repeat))
    summary = summarize(rows, skipped)
    if args.json:
        print(json.dumps({"repeat": repeat, "rows": rows, "summary": summary}, indent=2))
    else:
        print(report(rows, summary, repeat))
    return 0


def _table_row(row: dict) -> list:
    runs = row.get("executorch_runs_at_bound")
    mark = EXCLUDED if runs is False else LARGER if row.get("larger_than_et") else ""
    return [
        row["model"],
        row.get("devplan_bytes", "error" if "devplan_error" in row else None),
        row.get("executorch_bytes", "error" if "executorch_error" in row else None),
        row.get("bytes_ratio"),
        row.get("devplan_seconds"),
        row.get("executorch_seconds"),
        row.get("speedup"),
        None if runs is None else "yes" if runs else "no",
        mark,
    ]


def _message(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


if __name__ == "__main__":
    sys.exit(main())
