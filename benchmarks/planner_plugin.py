"""devplan's planner inside ExecuTorch's pipeline: the bytes ExecuTorch 1.5.1 plans for the same
graphs with its default planner and with `devplan.executorch.memory_planning_algo` as its
MemoryPlanningPass's algorithm.

    python benchmarks/planner_plugin.py [--models linear,cnn] [--xnnpack] [--json]

Every corpus model: the samples, the test corpus and the transformer stacks (2, 8 and 32
layers) of benchmarks/harness.py, each transformers family of the test corpus
(testbed/hf_models.py: decoders, encoders, encoder-decoders, vision and audio; the
mixture-of-experts decoders, which ExecuTorch cannot lower with transformers' default experts,
shown n/a, and again as `NAME_batched` with the "batched_mm" experts it lowers, as
moe_vs_executorch.py does) and the quantize benchmark's tiny vision models. Each is exported once (under no_grad, non-strict) and lowered ExecuTorch's
default portable way once (testbed/executorch.py: alignment 16, inputs, outputs and mutable
buffers planned; with --xnnpack, its XNNPACK partitioner first), then planned twice, with its
greedy planner and with devplan's algorithm, nothing else different. Per model: the bytes each
program's buffers take (`et default`, `with devplan`), their ratio (with devplan / et default,
geometric mean at the end), whether both programs, run on ExecuTorch's runtime, return what
the eager module does (twice for a model with state; testbed.models.mismatch's tolerance, the
transformers corpus's for its families), and whether devplan's returns exactly what
ExecuTorch's default does (same kernels, other offsets). A row where the plug-in plans more
is marked LARGER."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402

from benchmarks.harness import SAMPLES, TRANSFORMERS, catalogue, choose, geometric_mean, number, table  # noqa: E402
from devplan.errors import first_line  # noqa: E402
from devplan.executorch import memory_planning_algo  # noqa: E402
from testbed.executorch import executorch_ptes, planned_bytes  # noqa: E402
from testbed.hf_models import FAMILIES, MOE_FAMILIES, HFCase  # noqa: E402
from testbed.models import CORPUS, STATEFUL, eager_runs, mismatch, run_executorch  # noqa: E402
from testbed.quantize_models import MODELS as QUANTIZE_MODELS  # noqa: E402

HEADERS = ("model", "et default", "with devplan", "ratio", "match eager", "= et default", "")
# the quantize benchmark's tiny vision models that the transformers corpus does not hold
VISION = ("mobilenet_v3", "resnet_bottleneck")
# the transformers corpus's tolerance (tests/compile/test_transformers_corpus.py): its
# families' deeper float graphs drift past testbed.models.mismatch's 1e-5 on either plan
HF_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


def _batched(build: Callable[[], HFCase]) -> Callable[[], HFCase]:
    def make() -> HFCase:
        module, args, kwargs = build()
        module.set_experts_implementation("batched_mm")
        return module, args, kwargs

    return make


MOE_BATCHED = {f"{name}_batched": _batched(build) for name, build in MOE_FAMILIES.items()}
HF = {*FAMILIES, *MOE_FAMILIES, *MOE_BATCHED}


def models() -> dict[str, Callable[[], HFCase]]:
    """Every model of the benchmark by name, as (module, args, kwargs) builders."""
    built: dict[str, Callable[[], HFCase]] = {
        name: (lambda build=build: (*build(), {})) for name, build in catalogue().items()
    }
    built.update(FAMILIES)
    built.update(MOE_FAMILIES)
    built.update(MOE_BATCHED)
    built.update({name: QUANTIZE_MODELS[name]["tiny"] for name in VISION})
    return built


DEFAULT = (*SAMPLES, *CORPUS, *TRANSFORMERS, *FAMILIES, *MOE_FAMILIES, *MOE_BATCHED, *VISION)


def measure(name: str, xnnpack: bool = False) -> dict:
    module, args, kwargs = models()[name]()
    row: dict = {"model": name, "et_default": None, "devplan": None, "ratio": None, "error": None}
    with torch.no_grad():
        ep = torch.export.export(module, args, kwargs, strict=False)
    runs = 2 if name in STATEFUL else 1  # state carries over between calls, as in eager
    want = eager_runs(module, [(args, kwargs)] * runs)
    try:
        default, ours = executorch_ptes(ep, [None, memory_planning_algo], xnnpack=xnnpack)
    except Exception as error:  # ExecuTorch's own lowering refuses the model: reported, not fatal
        return row | {"error": f"executorch: {first_line(error)}"}
    row |= {"et_default": planned_bytes(default), "devplan": planned_bytes(ours)}
    row["ratio"] = row["devplan"] / row["et_default"] if row["et_default"] else 1.0
    flat = pytree.tree_leaves((args, kwargs))
    outputs = {"et_default": run_executorch(default, flat, runs=runs), "devplan": run_executorch(ours, flat, runs=runs)}
    for key, got in outputs.items():
        row[f"{key}_mismatch"] = _mismatch(name, got, want)
    row["identical"] = all(
        torch.equal(a, b)
        for run_ours, run_theirs in zip(outputs["devplan"], outputs["et_default"], strict=True)
        for a, b in zip(run_ours, run_theirs, strict=True)
    )
    return row


def _mismatch(name: str, got: list[list], want: list[list]) -> str | None:
    if name not in HF:
        return mismatch("ExecuTorch's runtime", got, want)
    for run, (outputs, expected) in enumerate(zip(got, want, strict=True)):
        for i, (g, w) in enumerate(zip(outputs, expected, strict=True)):
            tolerance = HF_TOLERANCE if w.dtype.is_floating_point else {"rtol": 0, "atol": 0}
            try:
                torch.testing.assert_close(g, w, **tolerance)
            except AssertionError as error:
                return f"MISMATCH ExecuTorch's runtime run {run} output {i}: {first_line(error)}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated model names (default: all)")
    parser.add_argument("--xnnpack", action="store_true", help="lower with ExecuTorch's XNNPACK partitioner")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    options = parser.parse_args(argv)
    rows = []
    for name in choose(options.models, DEFAULT, known=list(models())):
        rows.append(measure(name, options.xnnpack))
        print(f"{name} measured", file=sys.stderr, flush=True)
    measured = [row for row in rows if row["ratio"] is not None]
    ratio = geometric_mean([row["ratio"] for row in measured])
    if options.json:
        print(json.dumps({"rows": rows, "geomean_ratio": ratio}, indent=2))
        return 0
    print(table(HEADERS, [_cells(row) for row in rows]))
    larger = sum(row["devplan"] > row["et_default"] for row in measured)
    print(
        f"\ngeomean with devplan / et default: {number(ratio)} over {len(measured)} models; "
        f"larger on {larger}, outputs identical on {sum(row['identical'] for row in measured)}"
    )
    for row in rows:
        for key in ("et_default_mismatch", "devplan_mismatch", "error"):
            if row.get(key) is not None:
                print(f"{row['model']} ({key.removesuffix('_mismatch')}): {row[key]}")
    return 0


def _cells(row: dict) -> tuple:
    if row["ratio"] is None:
        return (row["model"], "n/a", "n/a", "n/a", "", "", "")
    return (
        row["model"],
        row["et_default"],
        row["devplan"],
        row["ratio"],
        "yes" if row["et_default_mismatch"] is None and row["devplan_mismatch"] is None else "NO",
        "yes" if row["identical"] else "NO",
        "LARGER" if row["devplan"] > row["et_default"] else "",
    )


if __name__ == "__main__":
    sys.exit(main())
