"""The long fuzz run: random mutants (a few bytes changed, or the file cut short) of programs
devplan and ExecuTorch wrote, each through `devplan inspect`, `inspect --json`, `check` and
`run --max-memory 256MiB --devices-on-host` in this one process, as the CLI runs them; and
mutants of .pt2 archives (their JSON fields and member names changed, members added, some of
them code that writes a marker file when run) through `devplan compile`. Three modes reach the
newer surfaces: a program with its weights in a .ptd (`ptd`: the .ptd damaged two times in
three, the commands given it with --data), a program of several methods and constant methods
(`multi_method`: `run --method` on each kind), and an XNNPACK payload whose weights are in a
.ptd (`xnnpack_ptd`: the damage in the payload or the .ptd; devplan's runtime leaves XNNPACK to
ExecuTorch's, so a mutant `check` passed is the one compared). The names mode (`names`,
testbed/names.py) makes one name of a saved archive hostile, compiles it with and without each
--quantize mode, and reads what compiled with inspect, check, diff and run in every format.

    python benchmarks/fuzz.py [--mutants 100000] [--archives 2000] [--names 1000] [--seed 17]
                              [--compare 1000] [--only NAME,...] [--quick] [--keep DIR] [--json]
                              [--checkpoint FILE]
                              [--build DIR | --programs DIR]

Per program and overall: mutants, command runs that worked (exit 0) or were refused (exit 1 or
a one-line DevplanError, exit 2), code runs (an archive mutant after which the marker file
exists), exit 3s (an exception the CLI reports as an internal error), tracebacks (printed on
the way, as by a logging error), commands (a printed line a CI runner would take as a workflow
command), hangs (a command over 5 s), the slowest mutant (all its
commands), and the peak resident memory of this process.
Then, on a sample of mutants that devplan's `run` took with exit 0, ExecuTorch's own runtime
loads and runs the same bytes with the same inputs in worker processes (a crash or a hang
there counts as a refusal); a mutant devplan ran but ExecuTorch refused is a mismatch.
Programs with devplan's own delegates (backend DevplanDelegate) cannot run in ExecuTorch's
runtime at all and are left out of that comparison.

The mutation and the outcome of a command are testbed/damage.py's, as the bounded fuzz test in
CI (tests/pte/test_fuzz.py) uses them, and the programs and archives testbed's. Run from the repository root; the programs are built
in a child process so that this process's peak memory is the fuzzing's own."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import select
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# name -> can ExecuTorch's runtime run it (devplan's delegates cannot)
PROGRAMS = {
    "devplan": True,
    "delegated": False,
    "quantized": True,
    "executorch_affine": True,
    "executorch_plain": True,
    "executorch_xnnpack": True,
    "ptd": True,
    "multi_method": True,
    "xnnpack_ptd": True,
}
WITH_DATA = ("ptd", "xnnpack_ptd")  # each written as NAME.pte and its NAME.ptd


@dataclass(frozen=True)
class Case:
    """How one program is fuzzed: its commands, the one whose exit 0 counts as devplan taking
    the mutant (`run ok`, those compared with ExecuTorch's runtime), and the method compared."""

    name: str
    program: bytes
    data: bytes | None = None  # its .ptd, damaged with it (damage.pair_mutant)
    commands: tuple = ()
    taken_by: int = -1
    method: str = "forward"
    start: int = 0  # where the program's damage starts (inside an XNNPACK payload)


def cases(folder: Path, names: Sequence[str]) -> list[Case]:
    """The programs --build wrote to `folder`, as fuzzed."""
    from testbed.damage import COMMANDS, MULTI_METHOD_COMMANDS, payload_start

    made = []
    for name in names:
        program = (folder / f"{name}.pte").read_bytes()
        if name in WITH_DATA:
            xnnpack = name.startswith("xnnpack")  # check's exit 0 is what devplan can say of it
            made.append(
                Case(
                    name,
                    program,
                    (folder / f"{name}.ptd").read_bytes(),
                    COMMANDS,
                    2 if xnnpack else -1,
                    start=payload_start(program) if xnnpack else 0,
                )
            )
        elif name == "multi_method":
            made.append(Case(name, program, commands=MULTI_METHOD_COMMANDS, method="batch5"))
        else:
            made.append(Case(name, program, commands=COMMANDS))
    return made


# .pt2 archives: the sample MLP, one with symbolic sizes in expressions, one writing state in place
ARCHIVES = ("mlp", "dynamic", "stateful")
ARCHIVE_COMMANDS = (["compile", "-o", "{out}"],)
HEADERS = (
    "program",
    "bytes",
    "mutants",
    "ok",
    "refused",
    "code runs",
    "exit 3",
    "tracebacks",
    "commands",
    "hangs",
    "slowest s",
    "run ok",
    "compared",
    "ET refused",
    "ET crashed",
)
COUNTS = ("mutants", "ok", "refused", "code_runs", "exit_3", "tracebacks", "commands", "hangs", "run_ok")
WORKER_TIMEOUT_S = 60  # for one mutant in ExecuTorch's runtime
IMPORT_TIMEOUT_S = 600  # for a worker's imports, before its first mutant: minutes on a busy machine
_WORKER = r"""
import sys, traceback
import torch
from executorch.runtime import Runtime
try:
    import executorch.kernels.quantized  # noqa: F401 - registers the quantized kernels
except ImportError:
    pass
folder, start, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
runtime = Runtime.get()
for i in range(start, stop):
    print(f"start {i}", flush=True)
    try:
        data = open(f"{folder}/{i}.pte", "rb").read()
        method_name, ptd = open(f"{folder}/{i}.txt").read().split("\n")[:2]
        inputs = torch.load(f"{folder}/{i}.pt", weights_only=True)
        program = runtime.load_program(data, data_path=ptd or None)
        method = program.load_method(method_name)
        method.execute(inputs)
        print(f"ok {i}", flush=True)
    except Exception as error:
        print(f"refused {i} {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}", flush=True)
"""


def build(folder: Path) -> None:
    """Write each program of PROGRAMS to folder/NAME.pte (run in a child process)."""
    import torch

    import devplan
    from testbed.quantized import quantize
    from testbed.small_programs import MLP, compiled, executorch_made, multi_method, saved, with_data_file

    folder.mkdir(parents=True, exist_ok=True)
    made = {"devplan": compiled(), "delegated": compiled(delegates=["cuda:0"])}
    made["quantized"] = devplan.compile(quantize("mlp", "per_tensor")[0]).data
    made.update({f"executorch_{name}": data for name, data in executorch_made().items()})
    made["multi_method"] = multi_method()
    for name, options in zip(WITH_DATA, ({}, {"backends": ["xnnpack"]})):
        made[name], data = with_data_file(**options)
        (folder / f"{name}.ptd").write_bytes(data)
    for name in PROGRAMS:
        (folder / f"{name}.pte").write_bytes(made[name])
    (folder / "mlp.pt2").write_bytes(MLP.read_bytes())
    for name in ("dynamic", "stateful"):
        (folder / f"{name}.pt2").write_bytes(saved(name))
    del torch


def sample_inputs(data: bytes, method: str = "forward") -> list:
    """The inputs `devplan run` gives this program's `method` (seed 0): of its shapes, read
    without loading it (an XNNPACK payload's program is not devplan's runtime's to load)."""
    from devplan.pte import read_pte
    from devplan.runtime.executor import method_view, sample_inputs as made

    return made(method_view(read_pte(data), method), 0)


def fuzz(case: Case, count: int, seed: int, folder: Path, keep: Path | None) -> tuple[dict, list]:
    """One program's (or .pt2 archive's) row, and the distinct mutants that devplan took (the
    case's taken_by command exited 0), each as (program, its .ptd or None)."""
    import random

    from testbed.damage import (
        LIMIT_S,
        archive_bytes,
        archive_members,
        archive_mutant,
        column,
        mutant,
        outcome,
        pair_mutant,
        with_data,
    )

    name, data = case.name, case.program
    rng = random.Random(f"{seed}:{name}")
    archive = name.endswith(".pt2")
    marker = folder / "marker"  # what code from an archive mutant writes
    path = folder / f"mutant-{name}{'' if archive else '.pte'}"
    ptd = folder / f"mutant-{name}.ptd"
    if archive:
        members = archive_members(data)
        commands = [[word.format(out=folder / "out.pte") for word in c] for c in ARCHIVE_COMMANDS]
        change = lambda rng: (archive_bytes(archive_mutant(members, rng, marker)), None)  # noqa: E731
    elif case.data is not None:
        commands = with_data(case.commands, ptd)
        change = lambda rng: pair_mutant(data, case.data, rng, case.start)  # noqa: E731
    else:
        commands, change = list(case.commands), lambda rng: (mutant(data, rng, case.start), None)
    row = {
        "program": name,
        "bytes": len(data) + len(case.data or b""),
        "mutants": count,
        "ok": 0,
        "refused": 0,
        "code_runs": 0,
        "exit_3": 0,
        "tracebacks": 0,
        "commands": 0,
        "hangs": 0,
        "slowest_seconds": 0.0,
        "slowest_mutant": None,
        "run_ok": 0,
        "found": [],
        "taken_by": (case.commands or ARCHIVE_COMMANDS)[case.taken_by][0],
    }
    path.write_bytes(data)
    if case.data is not None:
        ptd.write_bytes(case.data)
    row["unmutated"] = " ".join(outcome(path, command) for command in commands)
    ran, seen = [], set()
    for number in range(count):
        variant, variant_data = change(rng)
        path.write_bytes(variant)
        if variant_data is not None:
            ptd.write_bytes(variant_data)
        began = time.perf_counter()
        results = []
        for command in commands:
            start = time.perf_counter()
            result = outcome(path, command)
            if time.perf_counter() - start > LIMIT_S:
                result = "Hang"
            results.append(result)
            row[column(result)] += 1
            if column(result) not in ("ok", "refused") and len(row["found"]) < 20:
                row["found"].append({"mutant": number, "command": " ".join(command), "result": result[:300]})
                _keep(keep, path, variant, variant_data, str(number))
        if marker.exists():
            marker.unlink()
            row["code_runs"] += 1
            if len(row["found"]) < 20:
                row["found"].append({"mutant": number, "command": "any", "result": "code from the archive ran"})
            _keep(keep, path, variant, variant_data, f"{number}-ran")
        took = time.perf_counter() - began
        if took > row["slowest_seconds"]:
            row["slowest_seconds"], row["slowest_mutant"] = took, number
        if not archive and results[case.taken_by] == "ok":
            row["run_ok"] += 1
            digest = hashlib.sha256(variant + (variant_data or b"")).digest()
            if digest not in seen:
                seen.add(digest)
                ran.append((variant, variant_data))
    return row, ran


def _keep(keep: Path | None, path: Path, variant: bytes, data: bytes | None, label: str) -> None:
    """A mutant that escaped, written to `keep` (with its .ptd beside it)."""
    if keep is None:
        return
    keep.mkdir(parents=True, exist_ok=True)
    kept = keep / path.name.replace("mutant", label)
    kept.write_bytes(variant)
    if data is not None:
        kept.with_suffix(".ptd").write_bytes(data)


def _mismatch(verdict: str) -> bool:
    return verdict != "ok"


def _crash(verdict: str) -> bool:
    """A verdict of executorch_verdicts where ExecuTorch's runtime did not answer: it crashed,
    hung, or its worker never started."""
    return verdict != "ok" and not verdict.startswith("refused")


def executorch_verdicts(samples: list[tuple[bytes, bytes | None, str]], folder: Path) -> list[str]:
    """'ok', or why ExecuTorch's runtime refused (an exception, a crash, a hang), per sample
    (program, its .ptd or None, the method to run): run in worker processes, a new one after
    a crash."""
    import torch

    for i, (data, ptd, method) in enumerate(samples):
        (folder / f"{i}.pte").write_bytes(data)
        if ptd is not None:
            (folder / f"{i}.ptd").write_bytes(ptd)
        (folder / f"{i}.txt").write_text(f"{method}\n{folder / f'{i}.ptd' if ptd is not None else ''}\n")
        torch.save(sample_inputs(data, method), folder / f"{i}.pt")
    verdicts: dict[int, str] = {}
    start = 0
    while start < len(samples):
        worker = subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(folder), str(start), str(len(samples))],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        current, before = None, len(verdicts)
        while True:
            waited = WORKER_TIMEOUT_S if current is not None or len(verdicts) > before else IMPORT_TIMEOUT_S
            ready, _, _ = select.select([worker.stdout], [], [], waited)
            line = worker.stdout.readline() if ready else None
            if not line:  # None: a hang; "": the worker ended, done or killed by an abort or a crash
                if line is None:
                    worker.kill()
                code = worker.wait()
                break
            word, index, *why = line.rstrip("\n").split(" ", 2)
            if word == "start":
                current = int(index)
            else:
                verdicts[int(index)], current = ("ok" if word == "ok" else f"refused: {why[0] if why else ''}"), None
        if current is not None:
            verdicts[current] = "hang" if line is None else f"crash (exit {code})"
        if len(verdicts) == before:  # the worker never got going: say so for every sample left
            verdicts.update({i: f"worker failed (exit {code})" for i in range(start, len(samples))})
        start = next((i for i in range(start, len(samples)) if i not in verdicts), len(samples))
    return [verdicts.get(i, "not run") for i in range(len(samples))]


def table(rows: Sequence[dict]) -> str:
    cells = [
        [
            r["program"],
            f"{r['bytes']:,}",
            f"{r['mutants']:,}",
            f"{r['ok']:,}",
            f"{r['refused']:,}",
            str(r["code_runs"]),
            str(r["exit_3"]),
            str(r["tracebacks"]),
            str(r["commands"]),
            str(r["hangs"]),
            f"{r['slowest_seconds']:.2f}",
            f"{r['run_ok']:,}",
            str(r.get("compared", "-")),
            str(r.get("executorch_refused", "-")),
            str(r.get("executorch_crashed", "-")),
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(HEADERS)]
    align = lambda text, width, i: text.ljust(width) if i == 0 else text.rjust(width)  # noqa: E731
    lines = [
        "  ".join(align(h, w, i) for i, (h, w) in enumerate(zip(HEADERS, widths))),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(align(c, w, i) for i, (c, w) in enumerate(zip(row, widths))) for row in cells]
    lines.insert(len(lines) - 1, lines[1])  # a rule above the total
    return "\n".join(lines)


def _peak_mb() -> float:
    """This process's peak resident memory. Linux keeps ru_maxrss across exec, so a process
    started from a large one (pytest after a whole suite) would report its parent's peak; the
    high-water mark of this process's own address space (VmHWM) starts afresh at exec."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _import_first(folder: Path) -> None:
    """torch and the commands imported, and one archive compiled, before any command runs
    under its time limit: a first import cut short there would leave torch half registered."""
    import devplan
    import devplan.runtime  # noqa: F401 - imports torch
    from testbed.damage import _command

    _command()
    devplan.compile(folder / "mlp.pt2")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=100_000, help="mutants in all, shared evenly by the programs")
    parser.add_argument("--archives", type=int, default=2000, help=".pt2 mutants in all, shared evenly by the archives")
    parser.add_argument(
        "--names", type=int, default=1000, help="mutants of an archive whose names are hostile (testbed/names.py)"
    )
    parser.add_argument("--checkpoint", type=Path, help="write the names row (JSON) here every 20 mutants")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument(
        "--compare",
        type=int,
        default=1000,
        help="mutants that devplan ran to run in ExecuTorch's runtime too (0: none)",
    )
    parser.add_argument("--quick", action="store_true", help="600 mutants, 60 compared: under a minute")
    parser.add_argument(
        "--only",
        type=lambda text: text.split(","),
        metavar="NAME,...",
        help=f"fuzz these programs and archives only (of {', '.join([*PROGRAMS, *ARCHIVES, 'names'])})",
    )
    parser.add_argument("--keep", type=Path, help="write every mutant that escaped, hung or mismatched here")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--build", type=Path, metavar="DIR", help="only write the programs and archives to DIR")
    parser.add_argument(
        "--programs",
        type=Path,
        metavar="DIR",
        help="fuzz the programs and archives that --build wrote to DIR (building takes minutes on a "
        "busy machine; runs in several chunks, one seed each, share them)",
    )
    args = parser.parse_args(argv)
    if args.build:
        build(args.build)
        return 0
    if args.quick:
        args.mutants, args.archives, args.compare, args.names = 600, 30, 60, 10
    warnings.simplefilter("ignore")  # as `devplan` does: torch's deprecation chatter is not a finding
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # nor its C++ warnings (read as torch is imported)
    began = time.perf_counter()
    programs = [name for name in PROGRAMS if args.only is None or name in args.only]
    archives = [name for name in ARCHIVES if args.only is None or name in args.only]
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        if programs or archives:  # the names mode alone makes its own archive (testbed.names.prepare)
            if args.programs:
                for built in [
                    *(f"{name}.pte" for name in PROGRAMS),
                    *(f"{name}.ptd" for name in WITH_DATA),
                    *(f"{name}.pt2" for name in ARCHIVES),
                ]:
                    shutil.copyfile(args.programs / built, folder / built)
            else:
                subprocess.run(
                    [sys.executable, __file__, "--build", str(folder)],
                    check=True,
                    stderr=subprocess.DEVNULL,
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                )
            _import_first(folder)
        rows, runnable = [], {}
        per_program = -(-args.mutants // len(programs)) if programs else 0
        for case in cases(folder, programs):
            row, ran = fuzz(case, per_program, args.seed, folder, args.keep)
            rows.append(row)
            if PROGRAMS[case.name]:
                runnable[case.name] = [(data, ptd, case.method) for data, ptd in ran]
            print(
                f"{case.name}: {per_program:,} mutants in {time.perf_counter() - began:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        per_archive = -(-args.archives // len(archives)) if args.archives and archives else 0
        for name in archives if per_archive else ():
            archive = Case(f"{name}.pt2", (folder / f"{name}.pt2").read_bytes())
            row, _ = fuzz(archive, per_archive, args.seed, folder, args.keep)
            rows.append(row)
            print(
                f"{name}.pt2: {per_archive:,} mutants in {time.perf_counter() - began:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        if args.names and (args.only is None or "names" in args.only):
            from testbed.names import fuzz_names

            (folder / "names").mkdir()
            save = args.checkpoint and (
                lambda row: args.checkpoint.write_text(json.dumps({**row, "peak_mb": _peak_mb()}, indent=2))
            )
            rows.append(fuzz_names(args.names, args.seed, folder / "names", save or None, args.keep))
            print(f"names: {args.names:,} mutants in {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
        peak_mb = _peak_mb()
        mismatches = []
        if args.compare:
            # an even share of the sample per program that ExecuTorch's runtime can run, more
            # from the others where one has fewer distinct mutants that devplan ran
            wanted, picked = args.compare, {name: [] for name in runnable}
            while wanted and any(runnable.values()):
                share = max(1, wanted // sum(1 for ran in runnable.values() if ran))
                for name, ran in runnable.items():
                    taken, runnable[name] = ran[: min(share, wanted)], ran[min(share, wanted) :]
                    picked[name] += taken
                    wanted -= len(taken)
            compare_dir = folder / "compare"
            compare_dir.mkdir()
            order = [(name, sample) for name, ran in picked.items() for sample in ran]
            verdicts = executorch_verdicts([sample for _, sample in order], compare_dir)
            for row in rows:
                mine = [(data, v) for (name, data), v in zip(order, verdicts) if name == row["program"]]
                # where devplan ran the mutant, any refusal there is a mismatch; where only its
                # check passed it (XNNPACK, which `run --executorch` hands to ExecuTorch's runtime,
                # whose refusal it reports in one line), a crash or a hang is: it takes devplan down
                wrong = _mismatch if row.get("taken_by") == "run" else _crash  # the names mode has no such command
                if PROGRAMS.get(row["program"]):
                    row["compared"] = len(mine)
                    row["executorch_refused"] = sum(1 for _, v in mine if wrong(v))
                    row["executorch_crashed"] = sum(1 for _, v in mine if _crash(v))
                for (data, ptd, _), verdict in mine:
                    if wrong(verdict):
                        mismatches.append({"program": row["program"], "executorch": verdict[:300]})
                        digest = hashlib.sha256(data + (ptd or b"")).hexdigest()[:12]
                        _keep(args.keep, Path(f"mutant-{row['program']}.pte"), data, ptd, f"mismatch-{digest}")
    total = {"program": "all", "bytes": sum(r["bytes"] for r in rows)}
    for key in COUNTS:
        total[key] = sum(r[key] for r in rows)
    total["slowest_seconds"] = max(r["slowest_seconds"] for r in rows)
    if args.compare:
        total["compared"] = sum(r.get("compared", 0) for r in rows)
        total["executorch_refused"] = sum(r.get("executorch_refused", 0) for r in rows)
        total["executorch_crashed"] = sum(r.get("executorch_crashed", 0) for r in rows)
    seconds = time.perf_counter() - began
    passed = (
        total["code_runs"] == total["exit_3"] == total["tracebacks"] == total["commands"] == total["hangs"] == 0
        and peak_mb < 1024
        and total.get("executorch_refused", 0) == 0
    )
    if args.json:
        print(
            json.dumps(
                {
                    "rows": rows + [total],
                    "peak_mb": peak_mb,
                    "seconds": seconds,
                    "seed": args.seed,
                    "mismatches": mismatches,
                    "passed": passed,
                },
                indent=2,
            )
        )
        return 0 if passed else 1
    print(table(rows + [total]))
    print(
        "\nok / refused: command runs (4 a program mutant, 5 a multi_method one, 1 an archive's) that exited 0 / were refused in one "
        "line (exit 1 or 2); code runs: archive mutants after which their marker file existed; exit 3: "
        "exceptions the CLI reports as internal errors; tracebacks: printed on the way (a logging error); "
        "commands: printed lines a CI runner would take as workflow commands; "
        "slowest: one mutant's commands; run ok: mutants `devplan run` took (xnnpack_ptd: `check`, as devplan's "
        "runtime leaves XNNPACK to ExecuTorch's); compared / ET refused: "
        "distinct ones of those run by ExecuTorch's runtime / refused there (xnnpack_ptd: crashed or hung, "
        "what `run --executorch` cannot report; - : its runtime cannot run devplan's delegates); ET crashed: "
        "of those compared, crashes and hangs"
    )
    for row in rows:
        for found in row["found"][:5]:
            print(f"  {row['program']} mutant {found['mutant']} ({found['command']}): {found['result']}")
    for found in mismatches[:10]:
        print(f"  devplan ran a {found['program']} mutant that ExecuTorch refused: {found['executorch']}")
    print(f"\npeak memory {peak_mb:.0f} MB; {seconds:.0f} s; seed {args.seed}")
    print(
        f"{'PASS' if passed else 'FAIL'}: {total['mutants']:,} mutants of {len(rows)} programs and archives, "
        f"{total['code_runs']} code runs, {total['exit_3']} exit 3s, {total['tracebacks']} tracebacks, {total['commands']} workflow commands, "
        f"{total['hangs']} hangs over 5 s, slowest mutant {total['slowest_seconds']:.2f} s, "
        f"peak {peak_mb:.0f} MB, {total.get('executorch_refused', 0)} of {total.get('compared', 0)} "
        f"mutants devplan ran refused by ExecuTorch's runtime"
    )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
