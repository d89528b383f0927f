"""Planned memory: devplan's plan against its lower bound and ExecuTorch 1.5.1's plans.

    python benchmarks/plan_vs_executorch.py [--models linear,cnn] [--json]

For every sample, every test-corpus model and transformers of 2, 8 and 32 layers: the
bytes devplan plans (sum over its buffers), the sum of its buffers' lower bounds, and the
bytes ExecuTorch plans with its defaults and with its constant propagation on
(do_quant_fusion_and_const_prop=True); both ExecuTorch configurations use alignment 16 and
plan inputs and outputs, as devplan does. The floor column is the least that any order of
devplan's instructions could plan (benchmarks/floor.py): a plan below floor / ExecuTorch
default needs a rewrite of the graph, not a better planner or scheduler. An ExecuTorch
configuration that fails on a model shows as n/a; a model devplan cannot compile shows as
an error with its message."""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import devplan  # noqa: E402
from benchmarks.floor import order_free_floor  # noqa: E402
from benchmarks.harness import SAMPLES, TRANSFORMERS, choose, export, geometric_mean, number, table  # noqa: E402
from testbed.executorch import executorch_pte, planned_bytes  # noqa: E402
from testbed.models import CORPUS  # noqa: E402

HEADERS = (
    "model",
    "devplan",
    "lower bound",
    "floor",
    "et default",
    "et constprop",
    "dp/best et",
    "dp/bound",
    "dp/et default",
    "floor/et default",
    "",
)
LARGER = "LARGER"  # marks a model where devplan plans more than ExecuTorch's better configuration


def measure(name: str) -> dict:
    ep = export(name)
    row: dict = {"model": name}
    try:
        compiled = devplan.compile(copy.deepcopy(ep))
    except Exception as error:  # noqa: BLE001 - the benchmark reports every failure and goes on
        row["devplan_error"] = f"{type(error).__name__}: {error}"
        compiled = None
    for key, const_prop in (("et_default", False), ("et_constprop", True)):
        try:
            row[key] = planned_bytes(executorch_pte(copy.deepcopy(ep), const_prop=const_prop))
        except Exception as error:  # noqa: BLE001
            row[key] = None
            row[f"{key}_error"] = f"{type(error).__name__}: {error}".splitlines()[0]
    if compiled is None:
        return row
    row["devplan"] = sum(buffer.size for buffer in compiled.planned.buffers)
    row["lower_bound"] = sum(buffer.lower_bound for buffer in compiled.planned.buffers)
    row["floor"] = order_free_floor(compiled.planned.method)
    executorch = [row[key] for key in ("et_default", "et_constprop") if row[key] is not None]
    row["best_et"] = min(executorch) if executorch else None
    row["ratio_best_et"] = _ratio(row["devplan"], row["best_et"])
    row["ratio_bound"] = _ratio(row["devplan"], row["lower_bound"])
    row["ratio_et_default"] = _ratio(row["devplan"], row["et_default"])
    row["ratio_floor_et_default"] = _ratio(row["floor"], row["et_default"])
    row["larger_than_et"] = row["best_et"] is not None and row["devplan"] > row["best_et"]
    return row


def summarize(rows: list[dict]) -> dict:
    compared = [row for row in rows if row.get("best_et") is not None]
    bounds = [row["ratio_bound"] for row in rows if row.get("ratio_bound") is not None]
    defaults = [row["ratio_et_default"] for row in rows if row.get("ratio_et_default") is not None]
    floors = [row["ratio_floor_et_default"] for row in rows if row.get("ratio_floor_et_default") is not None]
    return {
        "models": len(rows),
        "compared": len(compared),
        "devplan_not_larger": sum(not row["larger_than_et"] for row in compared),
        "median_devplan_over_bound": statistics.median(bounds) if bounds else None,
        "geomean_devplan_over_et_default": geometric_mean(defaults) if defaults else None,
        "geomean_floor_over_et_default": geometric_mean(floors) if floors else None,
        "larger_than_et": [row["model"] for row in compared if row["larger_than_et"]],
        "devplan_errors": {row["model"]: row["devplan_error"] for row in rows if "devplan_error" in row},
        "executorch_errors": {
            f"{row['model']} ({key})": row[f"{key}_error"]
            for row in rows
            for key in ("et_default", "et_constprop")
            if f"{key}_error" in row
        },
    }


def report(rows: list[dict], summary: dict) -> str:
    lines = [table(HEADERS, [_table_row(row) for row in rows]), ""]
    lines.append(
        f"devplan <= better ExecuTorch config: {summary['devplan_not_larger']} of {summary['compared']} models"
    )
    lines.append(f"median devplan / lower bound: {number(summary['median_devplan_over_bound'])}")
    lines.append(f"geometric mean devplan / ExecuTorch default: {number(summary['geomean_devplan_over_et_default'])}")
    lines.append(
        f"geometric mean floor / ExecuTorch default (the least any instruction order could reach): "
        f"{number(summary['geomean_floor_over_et_default'])}"
    )
    lines.append(f"devplan larger than ExecuTorch's better config: {', '.join(summary['larger_than_et']) or 'none'}")
    lines += [f"devplan failed on {model}: {message}" for model, message in summary["devplan_errors"].items()]
    lines += [f"ExecuTorch failed on {model}: {message}" for model, message in summary["executorch_errors"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated model names (default: samples, corpus, transformer_2/8/32)")
    parser.add_argument("--json", action="store_true", help="print JSON rows and summary instead of a table")
    args = parser.parse_args(argv)
    names = choose(args.models, SAMPLES + tuple(CORPUS) + TRANSFORMERS)
    rows = [measure(name) for name in names]
    summary = summarize(rows)
    print(json.dumps({"rows": rows, "summary": summary}, indent=2) if args.json else report(rows, summary))
    return 0


def _table_row(row: dict) -> list:
    if "devplan_error" in row:
        return [row["model"], "error", None, None, row["et_default"], row["et_constprop"], None, None, None, None, ""]
    return [
        row["model"],
        row["devplan"],
        row["lower_bound"],
        row["floor"],
        row["et_default"],
        row["et_constprop"],
        row["ratio_best_et"],
        row["ratio_bound"],
        row["ratio_et_default"],
        row["ratio_floor_et_default"],
        LARGER if row["larger_than_et"] else "",
    ]


def _ratio(numerator: int, denominator: int | None) -> float | None:
    return numerator / denominator if denominator else None


if __name__ == "__main__":
    sys.exit(main())
