"""How `devplan inspect` scales: programs of 1k, 10k and 100k planned tensors, each read by
devplan's CLI in a fresh process (default view, -s all, --json) and by ExecuTorch's
deserializer (`deserialize_pte_binary`) alone, in the same run; seconds and peak memory of
each, and devplan's over ExecuTorch's.

    python benchmarks/inspect_scale.py [--sizes 1000,10000,100000] [--json]

The programs are synthetic, written with devplan's own emitter and writer: a residual chain
of `layers` blocks of 16 elementwise ops each, every block adding its input back at its end,
planned by devplan's greedy-size planner, with a source (module path, op, file and line) per
instruction as a compile keeps. devplan's seconds are the whole process (Python start,
imports, read, render); ExecuTorch's are the deserializer call alone, so the ratio is an
upper bound. Peak memory is each process's maximum resident set (ExecuTorch's includes
importing torch and executorch); this script itself imports neither, so that the processes
it starts do not inherit its pages.

The hostile shapes of issue 17, each timed command by command in a fresh process (seconds and
peak memory), `--checkout DIR` timing another checkout's devplan on the same files:

    python benchmarks/inspect_scale.py --overlap 30000    # tensors all at one offset, held at once
    python benchmarks/inspect_scale.py --wide 20000x2000  # tensors held across every instruction
    python benchmarks/inspect_scale.py --long 1000000     # instructions

A 2 GB program (issue 26): a Qwen2-shaped model of LAYERS layers (Qwen2.5-0.5B has 24),
compiled by devplan, its constant segment grown to 2 GB of zeros that the file system does not
store (a sparse file), so that the FlatBuffer is the real model's and the weights cost no disk:
inspect, inspect --json, check and diff, each the second of two runs in a fresh process (the
first compiles devplan's bytecode, as installing it does, and reads the file's pages):

    python benchmarks/inspect_scale.py --big 24

Run from the repository root."""

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
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from testbed.peak import run_measured  # noqa: E402

HEADERS = ("tensors", "view", "devplan s", "devplan MB", "executorch s", "executorch MB", "time x", "memory x")
VIEWS = {"default": [], "all": ["-s", "all"], "json": ["--json"]}
BLOCK = 16  # ops per block
_EXECUTORCH = """
import sys, time
from executorch.exir._serialize._program import deserialize_pte_binary
data = open(sys.argv[1], "rb").read()
start = time.perf_counter()
deserialize_pte_binary(data)
print(time.perf_counter() - start)
"""


def synthetic(tensors: int) -> bytes:
    """A .pte of a residual chain holding `tensors` planned tensors (rounded to whole blocks)."""
    from devplan.emit.program import to_program
    from devplan.ir.method import Kernel, Method, Source
    from devplan.planning.plan_method import plan_method
    from devplan.pte import dumps_pte
    from devplan.spec import TensorSpec

    spec = TensorSpec((4, 64), "float32", (0, 1))
    values: list = [spec, 1.0]  # the input, then alpha
    kernels = []
    block_input = 0
    for block in range(max(1, tensors // BLOCK)):
        previous = block_input
        for step in range(BLOCK):
            values.append(spec)
            out = len(values) - 1
            last = step == BLOCK - 1
            source = Source(
                f"model.layers.{block}.{'residual' if last else f'op{step}'}",
                "Block",
                "aten.add.Tensor",
                "/src/model.py",
                40 + step,
                "forward",
                "x = x + y",
            )
            args = (previous, block_input, 1, out, out) if last else (previous, previous, 1, out, out)
            kernels.append(Kernel("aten::add.out", args, f"add_{len(kernels)}", source=source))
            previous = out
        block_input = previous
    values[0] = TensorSpec((4, 64), "float32", (0, 1), name=("input", "x"))
    method = Method("forward", tuple(values), tuple(kernels), (0,), (block_input,), {}, {}, "", "")
    planned = plan_method(method, algorithm="greedy-size")
    return dumps_pte(*to_program(planned))


def _measure(command: Sequence[str], root: Path = ROOT, bytecode: bool = False) -> tuple[float, float, str, float]:
    """(seconds, peak resident MiB, stdout, CPU seconds) of `python ARGV` in a process importing
    devplan from `root`; with `bytecode`, Python may write (and so reuse) compiled modules. The
    CPU seconds (user and system) are the child's own work, which other processes sharing the
    machine delay but do not add to, as they do to the seconds."""
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(root)}
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    start, used = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    process, peak = run_measured(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=root, env=env)
    seconds, done = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = done.ru_utime + done.ru_stime - used.ru_utime - used.ru_stime
    if process.returncode:
        raise SystemExit(f"python {' '.join(command)} failed with exit {process.returncode}")
    return seconds, peak / (1 << 20), process.stdout.decode(), cpu


def measure(tensors: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"scale_{tensors}.pte"
        # written by a child: a child forked from a parent that imported torch starts with its
        # resident pages, and each measured process would report them as its own peak
        subprocess.run(
            [sys.executable, __file__, "--write", str(tensors), str(path)],
            check=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        _, executorch_mb, out, _ = _measure(["-c", _EXECUTORCH, str(path)])
        executorch_s = float(out.strip().splitlines()[-1])
        rows = []
        for view, options in VIEWS.items():
            seconds, mb, _, _ = _measure(["-m", "devplan", "inspect", str(path), *options])
            rows.append(
                {
                    "tensors": tensors,
                    "view": view,
                    "devplan_seconds": seconds,
                    "devplan_mb": mb,
                    "executorch_seconds": executorch_s,
                    "executorch_mb": executorch_mb,
                    "time_ratio": seconds / executorch_s,
                    "memory_ratio": mb / executorch_mb,
                }
            )
        return rows


CASES = {  # the devplan command line of each measured command, per case
    "overlap": {
        "inspect": ["inspect", "{program}"],
        "json": ["inspect", "{program}", "--json"],
        "check": ["check", "{program}"],
        "svg": ["inspect", "{program}", "--svg", "{out}.svg"],
        "trace": ["inspect", "{program}", "--trace", "{out}.json"],
    },
    "wide": {"trace": ["inspect", "{program}", "--trace", "{out}.json"]},
    "long": {"json": ["inspect", "{program}", "--json"]},
    "big": {
        "inspect": ["inspect", "{program}"],
        "json": ["inspect", "{program}", "--json"],
        "check": ["check", "{program}"],
        "diff": ["diff", "{program}", "{program}"],
    },
}
BIG_SEGMENT = 2 << 30


def big_program(layers: int, path: Path) -> None:
    """A Qwen2-shaped model of `layers` tiny layers compiled by devplan, written to `path` with
    its constant segment grown to BIG_SEGMENT bytes of zeros (a sparse file)."""
    import torch
    import transformers

    import devplan
    from devplan.pte import read_pte
    from devplan.pte.writer import Spread, pte_image

    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        use_cache=False,
        hidden_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=1000,
    )
    model = transformers.Qwen2ForCausalLM._from_config(config, attn_implementation="sdpa").eval()
    with torch.no_grad():
        exported = torch.export.export(model, (torch.randint(3, 1000, (1, 64)),))
    small = read_pte(devplan.compile(exported).data)
    image = pte_image(small.program, [Spread((), BIG_SEGMENT), *small.segments[1:]])
    with open(path, "wb") as file:
        for part in image.parts:
            file.write(part)
        file.truncate(image.size)


def hostile(case: str, size: str) -> bytes:
    from testbed.programs import one_offset_program, wide_program

    if case == "overlap":
        return one_offset_program(int(size))
    if case == "wide":
        tensors, instructions = size.split("x")
        return wide_program(int(tensors), int(instructions))
    return wide_program(2, int(size))


def measure_case(case: str, size: str, checkout: Path) -> list[dict]:
    """Each command of CASES[case] on the program hostile(case, size), by checkout's devplan."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{case}.pte"
        subprocess.run(
            [sys.executable, __file__, "--write-case", case, size, str(path)],
            check=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        rows = []
        for name, template in CASES[case].items():
            command = [part.format(program=path, out=Path(folder) / name) for part in template]
            if case == "big":  # untimed: compiles the bytecode (kept, as an installed devplan's is) and reads the pages
                _measure(["-m", "devplan", *command], root=checkout, bytecode=True)
            seconds, mb, _, cpu = _measure(["-m", "devplan", *command], root=checkout, bytecode=case == "big")
            rows.append(
                {
                    "case": case,
                    "size": size,
                    "seconds": seconds,
                    "cpu_seconds": cpu,
                    "mb": mb,
                    "command": " ".join(template).replace("{program}", "PROGRAM").replace("{out}", "OUT"),
                }
            )
        return rows


def case_table(rows: Sequence[dict]) -> str:
    lines = [f"{'case':<8} {'size':>12}  {'command':<34} {'seconds':>8} {'CPU s':>6} {'MB':>6}"]
    lines += [
        f"{r['case']:<8} {r['size']:>12}  {r['command']:<34} {r['seconds']:>8.2f} {r['cpu_seconds']:>6.2f} "
        f"{r['mb']:>6.0f}"
        for r in rows
    ]
    return "\n".join(lines)


def table(rows: Sequence[dict]) -> str:
    cells = [
        [
            str(r["tensors"]),
            r["view"],
            f"{r['devplan_seconds']:.2f}",
            f"{r['devplan_mb']:.0f}",
            f"{r['executorch_seconds']:.2f}",
            f"{r['executorch_mb']:.0f}",
            f"{r['time_ratio']:.2f}",
            f"{r['memory_ratio']:.2f}",
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(HEADERS)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(HEADERS, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="planned tensors per program, comma-separated")
    parser.add_argument("--json", action="store_true", help="print rows as JSON")
    parser.add_argument("--overlap", metavar="TENSORS", help="time every command on TENSORS tensors at one offset")
    parser.add_argument("--wide", metavar="TENSORSxINSTRUCTIONS", help="time --trace on tensors held throughout")
    parser.add_argument("--long", metavar="INSTRUCTIONS", help="time --json on this many instructions")
    parser.add_argument(
        "--big", metavar="LAYERS", help="time inspect, --json, check, diff of a 2 GB Qwen2-shaped program"
    )
    parser.add_argument(
        "--checkout", type=Path, default=ROOT, help="time the devplan of this checkout (default: this one)"
    )
    parser.add_argument("--write", nargs=2, metavar=("TENSORS", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--write-case", nargs=3, metavar=("CASE", "SIZE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.write:
        Path(args.write[1]).write_bytes(synthetic(int(args.write[0])))
        return 0
    if args.write_case and args.write_case[0] == "big":
        big_program(int(args.write_case[1]), Path(args.write_case[2]))
        return 0
    if args.write_case:
        Path(args.write_case[2]).write_bytes(hostile(*args.write_case[:2]))
        return 0
    cases = [(case, getattr(args, case)) for case in CASES if getattr(args, case)]
    if cases:
        rows = [row for case, size in cases for row in measure_case(case, size, args.checkout.resolve())]
        print(json.dumps({"rows": rows}, indent=2) if args.json else case_table(rows))
        return 0
    rows = [row for size in args.sizes.split(",") for row in measure(int(size))]
    print(json.dumps({"rows": rows}, indent=2) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
