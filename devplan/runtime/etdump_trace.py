"""`devplan run --etdump FILE`: the runs traced into an ETDump, which `devplan inspect
--etdump` and ExecuTorch's `Inspector` read. With --executorch, ExecuTorch's runtime writes it
(each instruction's and delegate's start and end time, and with --debug-buffer SIZE each
instruction's outputs); on devplan's runtime, devplan writes one in ExecuTorch's format from
each instruction's host time (OPERATOR_CALL, DELEGATE_CALL) and each call's (Method::execute)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devplan.errors import DevplanError
from devplan.files import write_atomic
from devplan.pte.reader import PteFile
from devplan.runtime.executor import method_view
from devplan.units import size_text

# ExecuTorch's buffer data sink starts each tensor it keeps at a multiple of this many bytes
_SINK_ALIGNMENT = 64


@dataclass(frozen=True)
class Trace:
    path: Path  # the ETDump written
    debug_buffer: int = 0  # bytes kept for the instructions' outputs; 0: times only

    @property
    def debug_path(self) -> Path:
        """Where the debug buffer goes, beside the ETDump: Inspector's debug_buffer_path."""
        return self.path.with_name(self.path.name + ".debug")

    def check(self, pte: PteFile, name: str, runs: int) -> None:
        """Refuse a debug buffer the runs' outputs could outgrow: ExecuTorch's runtime aborts the
        process when one no longer fits (an assert in its ETDump writer), so no partial dump is
        ever written."""
        if not self.debug_buffer:
            return
        needed = debug_bytes(pte, name) * runs
        if self.debug_buffer < needed:
            raise DevplanError(
                f"--debug-buffer {size_text(self.debug_buffer)}: the outputs of {runs} run(s) of method "
                f"{name} take up to {needed} bytes, and ExecuTorch's runtime aborts when they do not fit; "
                f"give --debug-buffer {needed}B or more"
            )

    def write_own(self, pte: PteFile, name: str, clocks: list[Clock]) -> None:
        """Write the ETDump of devplan's runs (own_etdump)."""
        write_atomic(self.path, own_etdump(pte, name, clocks))

    def write(self, program: Any) -> None:
        """Write the ETDump (and the debug buffer) of what `program` (ExecuTorch's) ran, each file
        whole or not at all: ExecuTorch writes them in place."""
        with tempfile.TemporaryDirectory() as folder:
            dump, debug = Path(folder) / "etdump", Path(folder) / "debug"
            program.write_etdump_result_to_file(str(dump), str(debug))
            write_atomic(self.path, dump.read_bytes())
            if self.debug_buffer:
                write_atomic(self.debug_path, debug.read_bytes() if debug.exists() else b"")


# one run's instructions as timed: (instruction, start, end) in host nanoseconds; and the call's
Clock = tuple[list[tuple[int, int, int]], int, int]


def own_etdump(pte: PteFile, name: str, clocks: list[Clock]) -> bytes:
    """An ETDump in ExecuTorch's format (schema/etdump.fbs) of devplan's runs of method `name`:
    a RunData named as ExecuTorch's runtime names a run ("Execute") per run."""
    import flatbuffers

    from devplan.pte.etdump import IDENTIFIER
    from devplan.pte.etdump_fb.ETDump import ETDumpT
    from devplan.pte.etdump_fb.Event import EventT
    from devplan.pte.etdump_fb.ProfileEvent import ProfileEventT
    from devplan.pte.etdump_fb.RunData import RunDataT

    kinds = {i.index: i.kind for i in method_view(pte, name).instructions}

    def event(name: str, instruction: int, start: int, end: int) -> EventT:
        made = EventT()
        made.profileEvent = ProfileEventT(name=name, instructionId=instruction, startTime=start, endTime=end)
        return made

    root = ETDumpT(version=0, runData=[])
    for steps, start, end in clocks:
        run = RunDataT(name="Execute", events=[])
        for at, begun, ended in steps:
            run.events.append(event("DELEGATE_CALL" if kinds[at] == "delegate" else "OPERATOR_CALL", at, begun, ended))
        run.events.append(event("Method::execute", 0, start, end))
        root.runData.append(run)
    builder = flatbuffers.Builder(1024)
    builder.FinishSizePrefixed(root.Pack(builder), IDENTIFIER)
    return bytes(builder.Output())


def debug_bytes(pte: PteFile, name: str) -> int:
    """The most bytes one run of method `name` keeps in a debug buffer: each kernel's results,
    every tensor a delegate call names (its outputs among them) and the method's outputs, each
    aligned."""
    view = method_view(pte, name)
    named = [
        i
        for instruction in view.instructions
        for a in (instruction.args if instruction.kind == "delegate" else instruction.results)
        for i in (a, *view.items(a))
    ]
    return sum(view.tensors[i].nbytes + _SINK_ALIGNMENT for i in (*named, *view.outputs) if i in view.tensors)
