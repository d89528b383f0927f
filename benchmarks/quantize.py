"""`compile --quantize` at real sizes: the error it costs, the bytes and the speed it gives,
devplan's quantized program against the float XNNPACK program and against ExecuTorch's own
quantized program of the same quantizer configuration.

    python benchmarks/quantize.py [--models resnet,vit] [--modes dynamic-int8,int8] [--size real] [--runs 20] [--quick] [--json]
    python benchmarks/quantize.py --conv-sweep [--models regnet,convnext] [--modes int8] [--side 224] [--record] [--json]

Models: testbed/quantize_models.py's, at `--size real` (default: ResNet-18, MobileNet-V3-Small,
a ViT, a BERT encoder and a Llama of width 256, 3-12 MB of float weights, so that the file's
framing is a small part of it) or `tiny` (the test corpus's configs). Each is exported once
(not timed). Its float program is devplan's with `--backend xnnpack`; per mode (dynamic-int8,
int8 calibrated on 8 inputs, dynamic-int4 for the models with linear layers beyond a
classifier), devplan's program is `devplan.compile(ep, quantize=mode[, calibration=...])` and
ExecuTorch's is its own flow on the same export (testbed.quantize_models.executorch_quantized:
the same XNNPACKQuantizer configuration, prepare_pt2e, calibration, convert_pt2e, export,
to_edge_transform_and_lower with XnnpackPartitioner).

Columns: SQNR of the quantized model against the float one (dB, compile's report, on its
samples: the calibration inputs, or 4 seeded ones for a dynamic mode), file bytes of devplan's
program and its ratio to the float program's, ExecuTorch's file bytes, planned (non-constant)
bytes of both, and the median milliseconds on ExecuTorch's runtime (one thread; every program
of a model loaded at once, 3 warm-up runs, then `--runs` rounds each running every program once
in an order rotating by one a round) of the float program, devplan's and ExecuTorch's quantized
programs, with devplan's over the float program's (below 1: quantizing made it faster) and over
ExecuTorch's. `max diff` is the largest difference between devplan's and ExecuTorch's outputs on
the example inputs (0: the same computation).

--conv-sweep: issue 51's conv nets (testbed.conv_sweep.CONV_SWEEP: transformers' ResNet
bottleneck and basic, RegNet, ConvNeXt, MobileNetV2, EfficientNet, and a torchvision-style
ResNet, at `--side` pixels a side, 96 by default) in dynamic-int8, int8 and dynamic-int4 (its
classifier alone), a row each (testbed.conv_sweep.sweep_row): SQNR against the float model and
argmax agreement on 4 fresh inputs, run on ExecuTorch's runtime, planned bytes and delegates, of
devplan's program and of ExecuTorch's own flow with its XNNPACKQuantizer as it ships in the same
configuration (and, where that program fails on ExecuTorch's runtime, of ExecuTorch's flow with
devplan's quantizer, which the row is then judged against), and whether the row holds issue 51's
acceptance (SQNR within 1 dB, argmax kept, planned bytes and delegates no more). `--record`
writes ExecuTorch's rows into testbed/conv_sweep_executorch.json, against which the suite's
sweep (tests/quantize/test_conv_sweep.py) judges devplan's programs."""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import devplan  # noqa: E402
from benchmarks.harness import choose, number, table  # noqa: E402
from testbed.conv_sweep import (  # noqa: E402
    ALL_MODES,
    CONV_SWEEP,
    RECORD,
    SWEEP_SIZE,
    record,
    sweep_failures,
    sweep_model,
    sweep_row,
)
from testbed.executorch import planned_bytes  # noqa: E402
from testbed.lowerings import patterns_exported_once  # noqa: E402
from testbed.quantize_models import MODELS, calibration, executorch_quantized, exported  # noqa: E402

MODES = ("dynamic-int8", "int8", "dynamic-int4")
CONV_NETS = ("resnet", "mobilenet_v3")  # dynamic-int4 takes linear layers alone: only their classifier
QUICK = ("mobilenet_v3",)
QUICK_MODES = ("dynamic-int8",)
WARMUP = 3
HEADERS = (
    "model",
    "mode",
    "SQNR dB",
    "file",
    "file / float",
    "ET file",
    "planned",
    "ET planned",
    "float ms",
    "ms",
    "ET ms",
    "ms / float",
    "ms / ET",
    "max diff",
)
KEYS = (
    "model",
    "mode",
    "sqnr_db",
    "file_bytes",
    "file_ratio",
    "executorch_file_bytes",
    "planned_bytes",
    "executorch_planned_bytes",
    "float_ms",
    "ms",
    "executorch_ms",
    "speedup_ratio",
    "executorch_ratio",
    "max_diff",
)


def programs(name: str, size: str, modes: list[str]) -> tuple[tuple, bytes, list[dict]]:
    """(the example inputs, the float program, a row per mode with devplan's and ExecuTorch's
    quantized programs under `pte` and `executorch_pte`)."""
    ep, inputs = exported(name, size)
    samples = calibration(inputs)
    float_pte = devplan.compile(copy.deepcopy(ep), backends=["xnnpack"]).data
    rows = []
    for mode in modes:
        static = mode == "int8"
        result = devplan.compile(copy.deepcopy(ep), quantize=mode, calibration=samples if static else None)
        theirs = executorch_quantized(copy.deepcopy(ep), mode, samples if static else [inputs])
        report = result.summary()["quantization"]
        rows.append(
            {
                "model": name,
                "mode": mode,
                "sqnr_db": report["error"]["sqnr_db"],
                "argmax_agreement": report["error"]["argmax_agreement"],
                "float_ops": report["float_ops"],
                "file_bytes": len(result.data),
                "float_file_bytes": len(float_pte),
                "file_ratio": len(result.data) / len(float_pte),
                "executorch_file_bytes": len(theirs),
                "planned_bytes": planned_bytes(result.data),
                "executorch_planned_bytes": planned_bytes(theirs),
                "float_planned_bytes": planned_bytes(float_pte),
                "pte": result.data,
                "executorch_pte": theirs,
            }
        )
    return inputs, float_pte, rows


def timed(inputs: tuple, float_pte: bytes, rows: list[dict], runs: int) -> None:
    """Every program of one model loaded into ExecuTorch's runtime at once and run in
    interleaved rounds; each row gains its medians, their ratios and devplan's largest
    difference from ExecuTorch's outputs."""
    from executorch.runtime import Runtime

    runtime = Runtime.get()
    named = {"float": float_pte}
    for row in rows:
        named[f"{row['mode']}"] = row.pop("pte")
        named[f"ET {row['mode']}"] = row.pop("executorch_pte")
    loaded = {key: runtime.load_program(pte) for key, pte in named.items()}  # a method borrows from its program
    methods = {key: program.load_method("forward") for key, program in loaded.items()}
    outputs = {key: [method.execute(list(inputs)) for _ in range(WARMUP)][0] for key, method in methods.items()}
    times: dict[str, list[float]] = {key: [] for key in methods}
    order = list(methods)
    gc.collect()
    gc.disable()  # no collection inside a timed run
    try:
        for round_ in range(runs):
            shift = round_ % len(order)
            for key in order[shift:] + order[:shift]:
                start = time.perf_counter()
                methods[key].execute(list(inputs))
                times[key].append(time.perf_counter() - start)
    finally:
        gc.enable()
    ms = {key: statistics.median(seconds) * 1e3 for key, seconds in times.items()}
    for row in rows:
        mode = row["mode"]
        row.update(
            float_ms=ms["float"],
            ms=ms[mode],
            executorch_ms=ms[f"ET {mode}"],
            speedup_ratio=ms[mode] / ms["float"],
            executorch_ratio=ms[mode] / ms[f"ET {mode}"],
            max_diff=max(
                (
                    float((ours.double() - theirs.double()).abs().max())
                    for ours, theirs in zip(outputs[mode], outputs[f"ET {mode}"])
                    if isinstance(ours, torch.Tensor) and ours.numel()
                ),
                default=0.0,
            ),
        )


def measure(name: str, size: str, modes: list[str], runs: int) -> list[dict]:
    inputs, float_pte, rows = programs(
        name, size, [m for m in modes if not (m == "dynamic-int4" and name in CONV_NETS)]
    )
    timed(inputs, float_pte, rows, runs)
    return rows


SWEEP_HEADERS = (
    "model",
    "mode",
    "SQNR dB",
    "ET SQNR dB",
    "ET devplan-q dB",
    "argmax",
    "ET argmax",
    "planned",
    "ET planned",
    "delegates",
    "ET delegates",
    "holds",
)
SWEEP_KEYS = (
    "model",
    "mode",
    "devplan_sqnr_db",
    "executorch_sqnr_db",
    "departed_sqnr_db",
    "devplan_argmax",
    "executorch_argmax",
    "devplan_planned_bytes",
    "executorch_planned_bytes",
    "devplan_delegates",
    "executorch_delegates",
    "holds",
)


def conv_sweep(names: list[str], modes: list[str], side: int, as_json: bool, recording: bool = False) -> int:
    """Issue 51's conv-net sweep: a row per model and mode (sweep_row), and what fails."""
    import executorch.kernels.quantized  # noqa: F401 - the quantized kernels the programs outside delegates call

    rows = []
    with patterns_exported_once():
        for name in names:
            model = sweep_model(name, side)  # exported once for every mode
            for mode in modes:
                row = sweep_row(model, mode)
                row["failures"] = sweep_failures(row)
                row["holds"] = "yes" if not row["failures"] else "NO"
                rows.append(row)
                gc.collect()
    if recording:
        record(rows)
    if as_json:
        print(json.dumps({"side": side, "rows": rows}, indent=2))
        return 0
    print(
        f"{side}x{side} inputs; on ExecuTorch's runtime, 4 fresh inputs against the float model; ET: ExecuTorch's own "
        "flow with its XNNPACKQuantizer as it ships, same configuration; ET devplan-q: ExecuTorch's flow with "
        "devplan's quantizer, built where ET's program fails on its runtime (the row is then judged against it); "
        "planned: non-constant bytes; holds: SQNR within 1 dB, argmax kept, planned bytes and delegates no more"
    )
    print(table(SWEEP_HEADERS, [[row.get(key) for key in SWEEP_KEYS] for row in rows]))
    for row in rows:
        for key in ("devplan", "executorch", "departed"):
            if row.get(f"{key}_error"):
                failed = row[f"{key}_error"].splitlines()[0]
                print(f"{row['model']} {row['mode']}: {key}'s program fails on ExecuTorch's runtime: {failed}")
        if row["failures"]:
            print(f"{row['model']} {row['mode']}: " + "; ".join(row["failures"]))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated model names (default: all of {', '.join(MODELS)})")
    parser.add_argument("--modes", help=f"comma-separated --quantize modes (default: {', '.join(MODES)})")
    parser.add_argument("--size", choices=("real", "tiny"), help="real (default) or the test corpus's tiny configs")
    parser.add_argument(
        "--runs", type=int, help="timed rounds, each running every program once (default 20; --quick: 5)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{', '.join(QUICK)} tiny, {', '.join(QUICK_MODES)}, --runs 5, unless given",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON document")
    parser.add_argument(
        "--conv-sweep",
        action="store_true",
        help=f"issue 51's conv nets ({', '.join(CONV_SWEEP)}) against ExecuTorch's flow, a row each (see above)",
    )
    parser.add_argument(
        "--side", type=int, default=SWEEP_SIZE, help=f"--conv-sweep's input side in pixels (default {SWEEP_SIZE})"
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help=f"--conv-sweep: write ExecuTorch's rows into {RECORD.name}, which the suite's sweep reads",
    )
    args = parser.parse_args(argv)
    if args.record and (not args.conv_sweep or args.side != SWEEP_SIZE):
        parser.error(f"--record: only with --conv-sweep at --side {SWEEP_SIZE}")
    if args.conv_sweep:
        return conv_sweep(
            choose(args.models, list(CONV_SWEEP), known=list(CONV_SWEEP)),
            choose(args.modes, list(ALL_MODES), known=list(ALL_MODES)),
            args.side,
            args.json,
            args.record,
        )
    names = choose(args.models, QUICK if args.quick else list(MODELS), known=list(MODELS))
    modes = choose(args.modes, QUICK_MODES if args.quick else MODES, known=MODES)
    size = args.size or ("tiny" if args.quick else "real")
    runs = max(1, args.runs if args.runs is not None else 5 if args.quick else 20)

    import executorch.kernels.quantized  # noqa: F401 - the quantized kernels the programs outside delegates call
    from executorch.extension.pybindings.portable_lib import _threadpool_get_thread_count, _unsafe_reset_threadpool

    # one thread for everything; a caller's settings (a test session's) come back afterwards
    torch_threads, pool_threads = torch.get_num_threads(), _threadpool_get_thread_count()
    torch.set_num_threads(1)
    _unsafe_reset_threadpool(1)  # before any program is loaded: XNNPACK runs on this pool
    rows: list[dict] = []
    try:
        with patterns_exported_once():  # the quantizer's pattern graphs, exported once for every model
            for name in names:
                rows.extend(measure(name, size, modes, runs))
                gc.collect()
    finally:
        torch.set_num_threads(torch_threads)
        _unsafe_reset_threadpool(pool_threads)
    if args.json:
        print(json.dumps({"size": size, "runs": runs, "warmup": WARMUP, "threads": 1, "rows": rows}, indent=2))
        return 0
    print(
        f"{size} sizes; median ms of {runs} interleaved run(s) per program after {WARMUP} warm-up runs, one thread, "
        "on ExecuTorch's runtime; float: devplan's program with --backend xnnpack; ET: ExecuTorch's own quantized "
        "flow; planned: non-constant bytes"
    )
    print(table(HEADERS, [[row[key] for key in KEYS] for row in rows]))
    for row in rows:
        print(
            f"{row['model']} {row['mode']}: float file {row['float_file_bytes']:,} bytes, planned "
            f"{row['float_planned_bytes']:,}; argmax agreement {number(row['argmax_agreement'])}; stayed float: "
            + (", ".join(f"{op} x{count}" for op, count in row["float_ops"].items()) or "nothing")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
