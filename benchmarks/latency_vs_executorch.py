"""Run time on ExecuTorch's runtime: devplan's programs, with and without XNNPACK delegates,
against ExecuTorch's own lowerings of the same export, with their planned bytes.

    python benchmarks/latency_vs_executorch.py [--models mlp,llama,q_mlp_static_pt] [--runs 20] [--quick] [--json]

Each model is exported once with torch.export.export(strict=False) (the transformers families
of testbed/hf_models.py under torch.no_grad(), as their corpus does; the quantized models are
PT2E-quantized by testbed.models.pt2e_quantize with ExecuTorch's XNNPACK quantizer, and their
converted module is the eager reference). Four programs are made from copies of that one
export, none of it timed:

    devplan         devplan.compile(ep)                                portable kernels
    devplan+xnnpack devplan.compile(ep, backends=["xnnpack"])          XNNPACK delegates, devplan's plan
    ET              ExecuTorch's default lowering (harness.executorch_pte)
    ET+xnnpack      to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()

All four are loaded into ExecuTorch's runtime (executorch.runtime.Runtime, quantized kernels
registered) in this one process, on one thread (ExecuTorch's threadpool reset to 1 thread
before loading, torch.set_num_threads(1)). Each method runs 3 times to warm up; the first
run's outputs are compared with eager (float rtol = atol = 1e-3, quantized models 0.1,
integers exactly). Then `--runs` rounds (default 20) each run every program once, the order
rotating by one program per round so that no program always follows the same one; each
run is timed alone with time.perf_counter(). Reported: the median milliseconds of each
program, ratio = devplan+xnnpack ms / ET+xnnpack ms, the planned (non-constant) bytes of
devplan's two programs and of ET+xnnpack, and `ok`: all four programs were made, ran, and
matched eager. Below the table: the geometric mean and the maximum of the ratio, and how
many models devplan+xnnpack plans more bytes for than ET+xnnpack; then, one line per model,
what failed (a program that could not be made or run shows n/a) or did not match."""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402

import devplan  # noqa: E402
from benchmarks.harness import catalogue, choose, geometric_mean, number, table  # noqa: E402
from devplan.errors import first_line  # noqa: E402
from testbed.executorch import executorch_pte, planned_bytes  # noqa: E402
from testbed.hf_models import FAMILIES  # noqa: E402
from testbed.models import eager_runs, pt2e_quantize  # noqa: E402

BENCHMARK = (
    "mlp",
    "cnn",
    "transformer",
    "transformer_2",
    "transformer_8",
    "residual_cnn",
    "transformer_encoder",
    "gated_mlp",
    "conv_bn_relu",
)
CONFIGS = {
    "static_pt": {},
    "static_pc": {"is_per_channel": True},
    "dynamic_pc": {"is_per_channel": True, "is_dynamic": True},
}
# name -> (small model, quantization config); dynamic quantization for the MLP only
QUANTIZED = {
    f"q_{model}_{config}": (model, config)
    for model in ("mlp", "conv")
    for config in CONFIGS
    if not (model == "conv" and config.startswith("dynamic"))
}
MODELS = (*BENCHMARK, *FAMILIES, *QUANTIZED)
QUICK = ("mlp", "cnn", "q_mlp_static_pt")
PROGRAMS = ("devplan", "devplan+xnnpack", "ET", "ET+xnnpack")
WARMUP = 3
FLOAT_TOLERANCE, QUANTIZED_TOLERANCE = 1e-3, 0.1
HEADERS = (
    "model",
    "devplan ms",
    "devplan+xnnpack ms",
    "ET ms",
    "ET+xnnpack ms",
    "ratio",
    "devplan bytes",
    "devplan+xnnpack bytes",
    "ET+xnnpack bytes",
    "ok",
)
KEYS = (
    "model",
    "devplan_ms",
    "devplan_xnnpack_ms",
    "executorch_ms",
    "executorch_xnnpack_ms",
    "ratio",
    "devplan_bytes",
    "devplan_xnnpack_bytes",
    "executorch_xnnpack_bytes",
    "ok",
)
MS_KEYS = dict(zip(PROGRAMS, KEYS[1:5]))
BYTES_KEYS = {
    "devplan": "devplan_bytes",
    "devplan+xnnpack": "devplan_xnnpack_bytes",
    "ET": "executorch_bytes",
    "ET+xnnpack": "executorch_xnnpack_bytes",
}


class SmallMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class SmallConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Conv2d(16, 16, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


SMALL = {"mlp": (SmallMLP, (8, 64)), "conv": (SmallConv, (1, 3, 32, 32))}


def build(name: str) -> tuple[torch.export.ExportedProgram, nn.Module, tuple, dict, float]:
    """(the export, the eager reference module, its args and kwargs, the tolerance)."""
    if name in QUANTIZED:
        model, config = QUANTIZED[name]
        make, shape = SMALL[model]
        torch.manual_seed(0)
        module, args = make().eval(), (torch.randn(*shape),)
        ep, converted = pt2e_quantize(module, args, **CONFIGS[config])
        return ep, converted, args, {}, QUANTIZED_TOLERANCE
    if name in FAMILIES:
        module, args, kwargs = FAMILIES[name]()
        with torch.no_grad():
            return torch.export.export(module, args, kwargs, strict=False), module, args, kwargs, FLOAT_TOLERANCE
    module, args = catalogue()[name]()
    return torch.export.export(module, args, strict=False), module, args, {}, FLOAT_TOLERANCE


def executorch_xnnpack_pte(ep: torch.export.ExportedProgram) -> bytes:
    """ExecuTorch's XNNPACK lowering: its partitioner takes what it supports, the portable
    kernels the rest; mutated buffers keep their initial values as in harness.executorch_pte."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    with torch.no_grad():
        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
        signature = edge.exported_program().graph_signature
        mutated = set(signature.buffers_to_mutate.values())
        placeholders = [name for name, fqn in signature.inputs_to_buffers.items() if fqn in mutated]
        return edge.to_executorch(ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(placeholders)])).buffer


MAKERS: dict[str, Callable[[torch.export.ExportedProgram], bytes]] = {
    "devplan": lambda ep: devplan.compile(ep).data,
    "devplan+xnnpack": lambda ep: devplan.compile(ep, backends=["xnnpack"]).data,
    "ET": executorch_pte,
    "ET+xnnpack": executorch_xnnpack_pte,
}


def mismatch(got, want: list, tolerance: float) -> str | None:
    """None when the flat outputs match eager's, else what differs."""
    got = list(got)
    if len(got) != len(want):
        return f"{len(got)} outputs, eager has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if not isinstance(w, torch.Tensor):
            if g != w:
                return f"output {i}: {g!r} instead of {w!r}"
            continue
        if not isinstance(g, torch.Tensor) or (g.dtype, g.shape) != (w.dtype, w.shape):
            shape = f"{g.dtype}{tuple(g.shape)}" if isinstance(g, torch.Tensor) else type(g).__name__
            return f"output {i}: {shape} instead of {w.dtype}{tuple(w.shape)}"
        close = (
            torch.allclose(g, w, rtol=tolerance, atol=tolerance, equal_nan=True)
            if w.dtype.is_floating_point
            else torch.equal(g, w)
        )
        if not close:
            error = (g.double() - w.double()).abs().max().item() if g.numel() else 0.0
            return f"output {i}: max abs error {error:.3g}"
    return None


def measure(name: str, runs: int) -> dict:
    from executorch.runtime import Runtime

    row = dict.fromkeys(KEYS) | {"model": name, "ok": False, "executorch_bytes": None, "errors": []}
    try:
        ep, module, args, kwargs, tolerance = build(name)
    except Exception as error:  # torch.export's or the quantizer's failure: the whole row is n/a
        return row | {"errors": [f"export: {first_line(error)}"]}
    want = eager_runs(module, [(args, kwargs)])[0]
    inputs = pytree.tree_leaves((args, kwargs))
    runtime = Runtime.get()
    loaded = {}  # program name -> (program, method): the method borrows from its program
    matched = 0
    for program, make in MAKERS.items():
        copied = ep if program == PROGRAMS[-1] else copy.deepcopy(ep)  # the last maker may have the original
        try:
            pte = make(copied)
        except Exception as error:  # one tool's failure: its columns are n/a
            row["errors"].append(f"{program}: {first_line(error)}")
            continue
        row[BYTES_KEYS[program]] = planned_bytes(pte)
        try:
            loaded_program = runtime.load_program(pte)
            method = loaded_program.load_method("forward")
            outputs = [method.execute(inputs) for _ in range(WARMUP)][0]
        except Exception as error:  # the runtime refused the program
            row["errors"].append(f"{program}: runtime: {first_line(error)}")
            continue
        loaded[program] = (loaded_program, method)
        wrong = mismatch(outputs, want, tolerance)
        if wrong:
            row["errors"].append(f"{program}: does not match eager: {wrong}")
        else:
            matched += 1
    row["ok"] = matched == len(PROGRAMS)
    order = list(loaded)
    times = {program: [] for program in order}
    gc.collect()
    gc.disable()  # no collection inside a timed run
    try:
        for round_ in range(runs if order else 0):
            shift = round_ % len(order)
            for program in order[shift:] + order[:shift]:
                method = loaded[program][1]
                start = time.perf_counter()
                method.execute(inputs)
                times[program].append(time.perf_counter() - start)
    finally:
        gc.enable()
    for program, seconds in times.items():
        row[MS_KEYS[program]] = statistics.median(seconds) * 1e3
    if row["devplan_xnnpack_ms"] is not None and row["executorch_xnnpack_ms"] is not None:
        row["ratio"] = row["devplan_xnnpack_ms"] / row["executorch_xnnpack_ms"]
    return row


def summary(rows: list[dict]) -> dict:
    ratios = [row["ratio"] for row in rows if row["ratio"] is not None]
    sized = [
        row for row in rows if row["devplan_xnnpack_bytes"] is not None and row["executorch_xnnpack_bytes"] is not None
    ]
    return {
        "models": len(rows),
        "compared": len(ratios),
        "geomean_ratio": geometric_mean(ratios) if ratios else None,
        "max_ratio": max(ratios) if ratios else None,
        "max_ratio_model": max((row for row in rows if row["ratio"] is not None), key=lambda row: row["ratio"])["model"]
        if ratios
        else None,
        "bytes_compared": len(sized),
        "devplan_xnnpack_larger": sum(row["devplan_xnnpack_bytes"] > row["executorch_xnnpack_bytes"] for row in sized),
        "all_ok": all(row["ok"] for row in rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        help=f"comma-separated model names, any of benchmarks/harness.py's catalogue too "
        f"(default: all of {', '.join(MODELS)})",
    )
    parser.add_argument(
        "--runs", type=int, help="timed rounds, each running every program once (default 20; --quick: 5)"
    )
    parser.add_argument("--quick", action="store_true", help=f"{', '.join(QUICK)} with --runs 5 unless given")
    parser.add_argument("--json", action="store_true", help="print the rows and the summary as one JSON document")
    args = parser.parse_args(argv)
    # any benchmark model by name too (harness.catalogue: samples, the test corpus, the stacks)
    names = choose(args.models, QUICK if args.quick else MODELS, known=(*MODELS, *catalogue()))
    runs = max(1, args.runs if args.runs is not None else 5 if args.quick else 20)

    import executorch.kernels.quantized  # noqa: F401 - quantized programs' kernels, for lowering and running
    from executorch.extension.pybindings.portable_lib import _threadpool_get_thread_count, _unsafe_reset_threadpool

    # one thread for everything; a caller's settings (a test session's) come back afterwards
    torch_threads, pool_threads = torch.get_num_threads(), _threadpool_get_thread_count()
    torch.set_num_threads(1)
    _unsafe_reset_threadpool(1)  # before any program is loaded: XNNPACK runs on this pool
    rows = []
    try:
        for name in names:
            rows.append(measure(name, runs))
            gc.collect()  # the model's programs, and their methods, are gone before the next loads
    finally:
        torch.set_num_threads(torch_threads)
        _unsafe_reset_threadpool(pool_threads)
    result = summary(rows)
    if args.json:
        print(json.dumps({"runs": runs, "warmup": WARMUP, "threads": 1, "rows": rows, "summary": result}, indent=2))
        return 0
    print(
        f"median ms of {runs} interleaved run(s) per program after {WARMUP} warm-up runs, one thread, on "
        "ExecuTorch's runtime; ratio = devplan+xnnpack ms / ET+xnnpack ms; bytes: planned (non-constant)"
    )
    print(
        table(HEADERS, [[("yes" if row["ok"] else "no") if key == "ok" else row[key] for key in KEYS] for row in rows])
    )
    print(
        f"\nratio over {result['compared']} model(s): geometric mean {number(result['geomean_ratio'])}, max "
        f"{number(result['max_ratio'])}"
        + (f" ({result['max_ratio_model']})" if result["max_ratio_model"] else "")
        + f"; devplan+xnnpack plans more bytes than ET+xnnpack on {result['devplan_xnnpack_larger']} of "
        f"{result['bytes_compared']}"
    )
    for row in rows:
        if row["errors"]:
            print(f"{row['model']}: {'; '.join(row['errors'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
