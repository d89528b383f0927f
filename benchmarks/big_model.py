"""Real-size models (issue 26): a Qwen2-shaped model at Qwen2.5-0.5B's size in fp32 and a
TinyLlama-shaped 1.1B model in bf16, random seeded weights, exported with
`torch.export.export(model, (input_ids,))` for 64 tokens and saved as a .pt2. Then, each in a
child process of its own whose peak memory is its own VmHWM (testbed/peak.py):

    devplan compile model.pt2                    (whole process)
    ExecuTorch's default lowering of the same .pt2 (to_edge_transform_and_lower, to_executorch,
                                                  written to a file; whole process)
    devplan inspect, inspect --json, check of both programs, and diff of the two

Seconds, CPU seconds (the child's own user and system time, which other processes on a shared
machine delay but do not add to) and peak memory of each, peak memory also over the model's
weight bytes, and devplan's over ExecuTorch's. devplan's modules are compiled to bytecode first
(python -m compileall), as installing devplan does, and every child may reuse it. devplan's program is also run on ExecuTorch's runtime against
eager (the largest difference, and whether it agrees, go to stderr).

    python benchmarks/big_model.py [--models qwen2_0_5b,tinyllama_1_1b] [--keep DIR] [--json]
    python benchmarks/big_model.py --models small       # a 113 MB model, as the CI test uses

Run from the repository root; each model takes minutes on 2 cores and needs about 3x its
weights in free memory (ExecuTorch's lowering does)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from testbed.big_models import BUILD, MODELS, TOKENS, export  # noqa: E402
from testbed.peak import run_measured  # noqa: E402

HEADERS = ("model", "step", "seconds", "CPU s", "peak MB", "peak / weights", "devplan / executorch")
# the children's environment: Python may keep compiled bytecode, as an installed devplan has it
ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}

# the child that runs a program (the path) on ExecuTorch's runtime against eager; prints the
# largest difference from eager and whether the program agrees: in fp32, allclose to eager; in
# bf16, where eager and the kernels round at different places and 22 layers move logits by
# units in their last place, no further from the model run in fp32 than eager in bf16 is
_AGREE = (
    BUILD
    + """
from executorch.runtime import Runtime
with torch.no_grad():
    eager = model(ids).logits.float()
    got = Runtime.get().load_program(path).load_method("forward").execute([ids])[0].float()
    if model.dtype == torch.float32:
        agrees = torch.allclose(got, eager, rtol=1e-3, atol=1e-3)
    else:
        exact = model.float()(ids).logits
        agrees = (got - exact).abs().max() <= 2 * (eager - exact).abs().max()
print((got - eager).abs().max().item(), bool(agrees))
"""
)

# the child that lowers with ExecuTorch's defaults, from the same .pt2 to a file
_EXECUTORCH = """
import sys, torch
import transformers.modeling_outputs  # registers the output types the export's out spec names
from executorch.exir import to_edge_transform_and_lower
ep = torch.export.load(sys.argv[1])
with torch.no_grad():
    program = to_edge_transform_and_lower(ep).to_executorch()
with open(sys.argv[2], "wb") as file:
    program.write_to_file(file)
"""


def timed(argv: list[str]) -> tuple[float, float, int]:
    """(seconds, CPU seconds, peak bytes) of a child process, which must succeed (check may exit 1)."""
    # the previous child's written file may still be going to disk; without this the next one
    # (devplan's compile after ExecuTorch's 2 GB write) waits for it in its own writes
    os.sync()
    start, used = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done, peak = run_measured(argv, capture_output=True, text=True, check=False, env=ENV)
    seconds, spent = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv[:4])} failed:\n{done.stderr[-3000:]}")
    return seconds, spent.ru_utime + spent.ru_stime - used.ru_utime - used.ru_stime, peak or 0


def measure(name: str, folder: Path) -> list[dict]:
    model = folder / f"{name}.pt2"
    ours, theirs = folder / f"{name}.devplan.pte", folder / f"{name}.executorch.pte"
    weights = export(name, model)
    rows = []

    def row(step: str, argv: list[str], versus: tuple[float, float, int] | None = None) -> tuple[float, float, int]:
        seconds, cpu, peak = timed(argv)
        rows.append(
            {
                "model": name,
                "step": step,
                "seconds": round(seconds, 2),
                "cpu_seconds": round(cpu, 2),
                "peak_bytes": peak,
                "peak_over_weights": round(peak / weights, 2),
                "weights": weights,
                "versus": None
                if versus is None
                else {
                    "seconds": round(seconds / versus[0], 3),
                    "cpu_seconds": round(cpu / versus[1], 3),
                    "peak": round(peak / versus[2], 3),
                },
            }
        )
        return seconds, cpu, peak

    lowering = row("executorch lowering", ["-c", _EXECUTORCH, str(model), str(theirs)])
    row("devplan compile", ["-m", "devplan", "compile", str(model), "-o", str(ours)], lowering)
    family, dtype, config = MODELS[name]
    agree, _ = run_measured(
        ["-c", _AGREE, family, dtype, json.dumps(config), str(ours), str(TOKENS)],
        capture_output=True,
        text=True,
        check=False,
    )
    if agree.returncode:
        raise SystemExit(f"running devplan's {name} on ExecuTorch's runtime failed:\n{agree.stderr[-3000:]}")
    difference, close = agree.stdout.split()[-2:]
    print(
        f"{name}: devplan's program on ExecuTorch's runtime, largest difference from eager {difference}, "
        f"agrees {close}",
        file=sys.stderr,
    )
    for label, program in (("devplan's", ours), ("executorch's", theirs)):
        row(f"inspect {label}", ["-m", "devplan", "inspect", str(program)])
        row(f"inspect --json {label}", ["-m", "devplan", "inspect", "--json", str(program)])
        row(f"check {label}", ["-m", "devplan", "check", str(program)])
    row("diff of the two", ["-m", "devplan", "diff", str(ours), str(theirs)])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", default="qwen2_0_5b,tinyllama_1_1b", help=f"comma-separated, of {', '.join(MODELS)}"
    )
    parser.add_argument("--keep", type=Path, help="keep the .pt2 and programs in this folder")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    names = [name.strip() for name in args.models.split(",") if name.strip()]
    unknown = [name for name in names if name not in MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "devplan")], check=True, env=ENV)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:  # one at a time: each needs several times its weights
            rows += measure(name, folder)
            if args.keep is None:
                for file in folder.iterdir():
                    os.unlink(file)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    from benchmarks.harness import table

    print(
        table(
            HEADERS,
            [
                (
                    r["model"],
                    r["step"],
                    f"{r['seconds']:.2f}",
                    f"{r['cpu_seconds']:.2f}",
                    f"{r['peak_bytes'] / 2**20:.0f}",
                    f"{r['peak_over_weights']:.2f}x",
                    ""
                    if r["versus"] is None
                    else f"{r['versus']['seconds']:.3f}x time, {r['versus']['cpu_seconds']:.3f}x CPU, "
                    f"{r['versus']['peak']:.2f}x memory",
                )
                for r in rows
            ],
        )
    )


if __name__ == "__main__":
    main()
