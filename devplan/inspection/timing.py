"""`devplan inspect PROGRAM --etdump FILE`: the time ExecuTorch's runtime measured (its ETDump,
`devplan run --executorch --etdump`) beside the plan: each instruction's and delegate's, the
operators a backend timed inside its delegate, and the time per module, where the time goes
next to what sets the peak. Each event is held to the program first: an ETDump of another
program is refused in one line, never shown against the wrong instructions."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Mapping, cast

from rich.console import Console
from rich.text import Text

from devplan.documents import InspectDocument, InspectedInstruction, InspectedMethod, Timing
from devplan.documents.inspect import DelegatedTime, InstructionTime, ModuleTime
from devplan.errors import DevplanError
from devplan.inspection.sources import top_module
from devplan.pte.etdump import Block, Etdump

# the runtime's own events, timed at instruction 0 but no instruction's
_RUNTIME = ("Method::init", "Program::load_method", "Method::execute")
_CALLS = {"OPERATOR_CALL": "kernel", "DELEGATE_CALL": "delegate"}
_RUNS = "Execute"  # the RunData ExecuTorch's runtime opens for each call of a method
_KERNEL_PREFIX = "native_call_"  # ExecuTorch's name for the kernel an operator call ran
MODULES = 6  # modules named on the summary's line


def with_timing(doc: InspectDocument, etdump: Etdump, method: str) -> InspectDocument:
    """`doc` with method `method`'s `timing` from the ETDump (its instructions list intact)."""
    found = [m for m in doc["methods"] if m["name"] == method]
    if not found:
        raise DevplanError(f"--etdump: the program has no method {method!r}; name the one run with --method")
    timed = cast(InspectedMethod, {**found[0], "timing": timing(found[0], etdump)})
    return {**doc, "methods": [timed if m["name"] == method else m for m in doc["methods"]]}


def timing(method: InspectedMethod, etdump: Etdump) -> Timing:
    runs = [block for block in etdump.blocks if block.name == _RUNS]
    if not runs:
        raise DevplanError(
            f"{etdump.name}: the ETDump holds no run of a method; write it with devplan run --executorch --etdump"
        )
    rows = {row["index"]: row for row in method.get("instructions", ())}
    for block in runs:
        _check(block, rows, etdump.name, method["name"])
    warm = runs[1:] or runs  # as run --runs: the first run warms up
    calls: dict[int, list[int]] = defaultdict(list)
    inside: dict[tuple[int, str], list[int]] = defaultdict(list)
    execute = []
    for block in warm:
        for event in block.events:
            if event.name == "Method::execute":
                execute.append(event.ticks)
            elif event.delegated is not None and event.instruction is not None:
                inside[(event.instruction, event.delegated)].append(event.ticks)
            elif event.name in _CALLS and event.instruction is not None:
                calls[event.instruction].append(event.ticks)
    instructions: list[InstructionTime] = [{"index": i, "ns": _median(t)} for i, t in sorted(calls.items())]
    delegated: list[DelegatedTime] = [
        {"instruction": i, "name": name, "ns": _median(t)} for (i, name), t in inside.items()
    ]
    by_module: dict[str, list[int]] = defaultdict(list)
    for entry in instructions:
        row = rows[entry["index"]]
        key = f"(delegate {row['delegate']})" if row["kind"] == "delegate" else _module(row["module"])
        by_module[key].append(entry["ns"])
    modules: list[ModuleTime] = sorted(
        ({"module": key, "ns": sum(t), "instructions": len(t)} for key, t in by_module.items()),
        key=lambda m: (-m["ns"], m["module"]),
    )
    return {
        "etdump": Path(etdump.name).name,
        "runs": len(runs),
        "warm_runs": len(warm) if len(runs) > 1 else 0,
        "execute_ns": _median(execute) if execute else None,
        "instructions": instructions,
        "delegated": delegated,
        "modules": modules,
    }


def _check(block: Block, rows: Mapping[int, InspectedInstruction], name: str, method: str) -> None:
    """Every event of a run names an instruction of `method` of the kind it times (and a
    kernel's event the operator that instruction runs), or the ETDump is of another program."""
    for event in block.events:
        if event.name in _RUNTIME or event.instruction is None:
            continue
        row = rows.get(event.instruction)
        what = event.delegated or event.name
        if row is None:
            raise DevplanError(
                f"{name}: event {what} at instruction {event.instruction}, but method {method} has "
                f"{len(rows)} instructions; pass the ETDump of this program's runs"
            )
        kind = "delegate" if event.delegated is not None else _CALLS.get(event.name, "kernel")
        op = event.name.removeprefix(_KERNEL_PREFIX)
        ran = (row["op"] or "").rpartition("::")[2]
        if row["kind"] != kind or (event.name.startswith(_KERNEL_PREFIX) and op != ran):
            raise DevplanError(
                f"{name}: event {what} at instruction {event.instruction}, which runs "
                f"{row['op'] or row['kind']} in method {method}; pass the ETDump of this program's runs"
            )


def _module(path: str | None) -> str:
    """An instruction's module as the peak names blocks: "(model)" for the model's own ops."""
    return "(no module)" if path is None else path or "(model)"


def _median(ticks: list[int]) -> int:
    return int(statistics.median(ticks))


def time_text(ns: int) -> str:
    """A time as people read it: 840 ns, 12.3 µs, 4.56 ms, 1.23 s."""
    for unit, scale in (("s", 10**9), ("ms", 10**6), ("µs", 10**3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns} ns"


def timing_view(method: InspectedMethod, console: Console) -> None:
    """Where the time goes: the run's time and its largest modules, beside the peak."""
    timed = method["timing"]
    total = sum(entry["ns"] for entry in timed["instructions"])
    runs = f"median of {timed['warm_runs']} warm runs" if timed["warm_runs"] else "one run"
    head = Text.assemble(("time", "bold"), f" of method {method['name']}: {time_text(total)} in instructions ({runs}")
    if timed["execute_ns"] is not None:
        head.append(f"; {time_text(timed['execute_ns'])} the whole call")
    console.print(head.append(f", {timed['etdump']})"))
    blocks: dict[str, int] = defaultdict(int)  # the peak's blocks: a module's path up to its layer
    for entry in timed["modules"]:
        name = entry["module"]
        blocks[name if name.startswith("(") else top_module(name)] += entry["ns"]
    ranked = sorted(blocks.items(), key=lambda item: (-item[1], item[0]))
    shares = [f"{name} {100 * ns / max(total, 1):.0f}%" for name, ns in ranked[:MODULES]]
    more = len(ranked) - len(shares)
    line = "  where the time goes, by block: " + ", ".join(shares) + (f", and {more} more" if more > 0 else "")
    console.print(Text(line))


def instruction_times(method: InspectedMethod) -> tuple[dict[int, int], dict[int, list[DelegatedTime]]]:
    """(instruction -> its time, delegate instruction -> the operators its backend timed), for
    the instructions' view; empty without an ETDump."""
    timed = method.get("timing")
    if timed is None:
        return {}, {}
    inside: dict[int, list[DelegatedTime]] = defaultdict(list)
    for entry in timed["delegated"]:
        inside[entry["instruction"]].append(entry)
    return {entry["index"]: entry["ns"] for entry in timed["instructions"]}, inside
