"""Device programs on a real GPU (issue 40): per model of testbed/device_corpus.py, devplan's
program compiled with every op on cuda:0 and --device-io, run by devplan's runtime through
TorchCudaAllocator, against eager PyTorch on the same GPU, each measured in a fresh process.

    python benchmarks/gpu.py prepare DIR             # here, on the CPU: programs, inputs, outputs
    python benchmarks/gpu.py measure DIR [--json F]  # on the GPU machine, from the source tree

prepare compiles each model (--delegate cuda:0 --device-io) and saves the program, its inputs,
the CPU program's outputs and the module's weights. measure runs, per program, three
children: devplan with CUDA graphs, devplan without them (which also attributes the bytes each
kernel allocated beyond the plan, by operator), and eager PyTorch (the module on the GPU, under
no_grad). It prints, per program: the device's planned bytes, the constants devplan copied
there, the allocator's measured peak (torch.cuda.max_memory_allocated over load and runs),
eager's steady peak above its weights, the ratios, and the median time of a run of each
(inputs from the host, outputs back to it, as a user's call does), and whether devplan's
outputs match the CPU program's; then, per program, the CUDA kernels that took most GPU time in
devplan's run and in eager's (torch.profiler, 10 runs), to say where a time ratio comes from."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

RUNS = 100
TOP_KERNELS = 8


def prepare(folder: Path) -> None:
    import devplan
    from testbed.device_corpus import DEVICE_CORPUS

    folder.mkdir(parents=True, exist_ok=True)
    for name, build in DEVICE_CORPUS.items():
        module, args = build()
        ep = torch.export.export(module, args)
        (expected,) = devplan.run(devplan.compile(ep).data, list(args))
        devplan.compile(ep, folder / f"{name}.pte", delegates=["cuda:0"], device_io=True)
        torch.save({"args": list(args), "expected": expected[0], "state": module.state_dict()}, folder / f"{name}.pt")
        print(f"prepared {name}", flush=True)


def _median_ms(call) -> float:
    for _ in range(5):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _kernel_times(call, runs: int = 10) -> list[dict]:
    """The CUDA kernels a run launches, most GPU time first, per run: which kernels cuDNN and
    torch's elementwise ops chose for these pointers (the names carry layout conversions and
    vector widths), where a row's time against eager's needs explaining. A profiler that fails
    gives one entry saying so rather than costing the row its measurement."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as trace:
            for _ in range(runs):
                call()
            torch.cuda.synchronize()
        kernels = [e for e in trace.key_averages() if e.device_type == DeviceType.CUDA]
    except Exception as error:  # the measurement matters more than its explanation
        return [{"error": f"{type(error).__name__}: {error}"}]
    kernels.sort(key=lambda e: -e.self_device_time_total)
    return [
        {"kernel": e.key[:140], "us": round(e.self_device_time_total / runs, 1), "calls": e.count / runs}
        for e in kernels[:TOP_KERNELS]
    ]


def child_devplan(folder: Path, program: str, graphs: bool) -> dict:
    import logging

    from devplan.pte import read_pte
    from devplan.runtime import LoadedMethod
    from devplan.runtime.graphs import captured
    from devplan.runtime.report import device_memory
    from devplan.spec import Device

    logging.getLogger("devplan").addHandler(logging.StreamHandler())  # why a delegate runs without a graph
    logging.getLogger("devplan").setLevel(logging.DEBUG)
    saved = torch.load(folder / f"{program}.pt", weights_only=False)
    cuda = Device.parse("cuda:0")
    torch.cuda.init()
    torch.cuda.reset_peak_memory_stats()
    loaded = LoadedMethod(read_pte(folder / f"{program}.pte"), cuda_graphs=graphs)
    (first,) = loaded.execute(saved["args"])
    ms = _median_ms(lambda: loaded.execute(saved["args"]))
    (last,) = loaded.execute(saved["args"])
    row = device_memory(loaded, {cuda: torch.cuda.max_memory_allocated()})[0]
    error = max(float((out - saved["expected"]).abs().max()) for out in (first, last))
    kernels = _kernel_times(lambda: loaded.execute(saved["args"]))
    result = {**row, "ms": ms, "max_abs_error": error, "graph": captured(loaded), "kernels": kernels}
    if not graphs:
        result["allocating_ops"] = _allocating_ops(loaded, saved["args"])
    return result


def _allocating_ops(loaded, args) -> dict:
    """Per operator, the most bytes one call of it allocated on the device beyond what was held
    before it (transient: its own results, workspaces), and what stayed allocated after it."""
    from dataclasses import replace

    found: dict[str, list[int]] = {}

    def measured(step):
        def call(*a, **k):
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            result = step.call(*a, **k)
            torch.cuda.synchronize()
            seen = found.setdefault(step.name, [0, 0])
            seen[0] = max(seen[0], torch.cuda.max_memory_allocated() - before)
            seen[1] = max(seen[1], torch.cuda.memory_allocated() - before)
            return result

        return call

    methods = [loaded, *loaded.delegates]
    for method in methods:
        method.steps[:] = [replace(s, call=measured(s)) if s.kind == "kernel" else s for s in method.steps]
    loaded.execute(args)
    return {op: {"transient": t, "kept": k} for op, (t, k) in sorted(found.items(), key=lambda i: -i[1][0]) if t or k}


def child_eager(folder: Path, name: str) -> dict:
    from testbed.device_corpus import DEVICE_CORPUS

    saved = torch.load(folder / f"{name}.pt", weights_only=False)
    module, _ = DEVICE_CORPUS[name]()
    module.load_state_dict(saved["state"])
    torch.cuda.init()
    module = module.cuda()
    weights = torch.cuda.memory_allocated()

    def call():
        with torch.no_grad():
            return module(*(a.cuda() for a in saved["args"])).cpu()

    for _ in range(3):  # the steady state: cuBLAS's workspace and cuDNN's choices made
        out = call()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    out = call()
    peak = torch.cuda.max_memory_allocated() - weights
    return {
        "weights": weights,
        "peak_above_weights": peak,
        "ms": _median_ms(call),
        "max_abs_error": float((out - saved["expected"]).abs().max()),
        "kernels": _kernel_times(call),
    }


def _child(*args: str) -> dict:
    done = subprocess.run([sys.executable, __file__, "child", *args], capture_output=True, text=True, timeout=300)
    if done.returncode:
        return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
    notes = [line for line in done.stderr.splitlines() if "CUDA graph" in line]
    return {**json.loads(done.stdout.strip().splitlines()[-1]), **({"notes": notes[:3]} if notes else {})}


def measure(folder: Path, json_path: Path | None) -> None:
    rows: dict[str, dict] = {}
    for pte in sorted(folder.glob("*.pte")):
        name = pte.stem
        rows[name] = {
            "graphs": _child("devplan", str(folder), name, "1"),
            "steps": _child("devplan", str(folder), name, "0"),
            "eager": _child("eager", str(folder), name),
        }
        print(json.dumps({name: rows[name]}), flush=True)
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}")
    header = (
        "model",
        "planned MiB",
        "constants MiB",
        "peak MiB",
        "beyond MiB",
        "eager peak MiB",
        "planned/eager",
        "devplan ms (graph)",
        "devplan ms (steps)",
        "eager ms",
        "time ratio",
        "max err",
    )
    print(" | ".join(header))
    ratios = []
    for name, r in rows.items():
        g, s, e = r["graphs"], r["steps"], r["eager"]
        if "error" in g or "error" in e:
            print(f"{name} | failed: {g.get('error') or e.get('error')}")
            continue
        ratio = g["planned"] / e["peak_above_weights"]
        ratios.append(ratio)
        mib = 1 << 20
        print(
            " | ".join(
                [
                    name,
                    f"{g['planned'] / mib:.1f}",
                    f"{g['constants'] / mib:.1f}",
                    f"{g['peak'] / mib:.1f}",
                    f"{g['beyond_plan'] / mib:.1f}",
                    f"{e['peak_above_weights'] / mib:.1f}",
                    f"{ratio:.2f}",
                    f"{g['ms']:.2f}",
                    f"{s.get('ms', float('nan')):.2f}",
                    f"{e['ms']:.2f}",
                    f"{g['ms'] / e['ms']:.2f}",
                    f"{g['max_abs_error']:.1e}",
                ]
            )
        )
    if ratios:
        print(f"planned / eager peak, geomean: {statistics.geometric_mean(ratios):.3f}")
    for name, r in rows.items():
        for side, child in (("devplan (graph)", r["graphs"]), ("eager", r["eager"])):
            print(f"\n{name}, {side}: GPU us per run, calls per run, kernel")
            for k in child.get("kernels", []):
                print(f"  {k['error']}" if "error" in k else f"  {k['us']:9.1f} {k['calls']:5.1f}  {k['kernel']}")
    if json_path is not None:
        json_path.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")


def main() -> None:
    if sys.argv[1:2] == ["child"]:
        kind, folder, name, *rest = sys.argv[2:]
        result = (
            child_devplan(Path(folder), name, rest == ["1"]) if kind == "devplan" else child_eager(Path(folder), name)
        )
        print(json.dumps(result))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("prepare", "measure"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--json", type=Path, help="also write every measurement to this file")
    options = parser.parse_args()
    if options.step == "prepare":
        prepare(options.folder)
    else:
        measure(options.folder, options.json)


if __name__ == "__main__":
    main()
