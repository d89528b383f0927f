"""`devplan run`: a program through devplan's reference runtime (or ExecuTorch's)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from devplan.cli.app import (
    Command,
    Format,
    JUnit,
    ReportFormat,
    app,
    console,
    echo,
    echo_json,
    program_source,
    report_outputs,
)
from devplan.cli.values import size_option
from devplan.errors import EXIT_FAILED, DevplanError

if TYPE_CHECKING:
    from devplan.documents import DeviceMemory, Reference
    from devplan.pte import PteFile
    from devplan.runtime import LoadedMethod
    from devplan.runtime.etdump_trace import Clock, Trace
    from devplan.runtime.memory import Memory


@app.command("run", cls=Command)
def run_command(
    program: Annotated[
        Path,
        typer.Argument(
            metavar="PROGRAM.pte", help="The .pte program to run (- reads standard input).", show_default=False
        ),
    ],
    inputs: Annotated[
        Optional[Path],
        typer.Option(
            "--inputs",
            "-i",
            metavar="FILE.pt",
            help="Inputs saved with torch.save (a tensor, or a list or tuple of them). "
            "Default: seeded random floats, zeros for integer inputs.",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, max=2**63 - 1, help="Seed for the random inputs.")] = 0,
    runs: Annotated[
        int,
        typer.Option(
            "--runs",
            min=1,
            max=10_000,
            help="Run the method this many times in a row (state carries over); from 2 on, also print "
            "its median, min and max time over the runs after the first (the warm-up).",
        ),
    ] = 1,
    method: Annotated[str, typer.Option("--method", "-m", metavar="NAME", help="The method to run.")] = "forward",
    save: Annotated[
        Optional[Path],
        typer.Option(
            "--save",
            metavar="FILE.pt",
            help="Also save the last run's outputs with torch.save (- writes standard output, and the summary goes to standard error).",
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the outputs' summaries as JSON.")] = False,
    devices_on_host: Annotated[
        bool,
        typer.Option(
            "--devices-on-host",
            help="Back every device buffer (cuda:N) with host memory, to prove a "
            "device program's plan on a machine without the device.",
        ),
    ] = False,
    max_memory: Annotated[
        str,
        typer.Option(
            "--max-memory",
            metavar="SIZE",
            help="Refuse a program whose inputs, buffers and "
            "unplanned tensors take more than this (units B, KiB, MiB, GiB, ...): sizes come from the file.",
        ),
    ] = "8GiB",
    executorch: Annotated[
        bool,
        typer.Option(
            "--executorch",
            help="Run on ExecuTorch's own runtime instead (needs pip install "
            '"devplan[executorch]"): any program, those with XNNPACK delegates too.',
        ),
    ] = False,
    etdump: Annotated[
        Optional[Path],
        typer.Option(
            "--etdump",
            metavar="FILE",
            help="Write an ETDump of the runs (each instruction's and delegate's time; ExecuTorch's runtime "
            "writes it with --executorch, devplan in its format otherwise), which inspect --etdump shows "
            "beside the plan and ExecuTorch's Inspector reads.",
            show_default=False,
        ),
    ] = None,
    debug_buffer: Annotated[
        Optional[str],
        typer.Option(
            "--debug-buffer",
            metavar="SIZE",
            help="With --etdump --executorch: also keep each instruction's outputs, in a buffer of SIZE (e.g. 16MiB) "
            "written beside the ETDump as FILE.debug (Inspector's debug_buffer_path).",
            show_default=False,
        ),
    ] = None,
    data: Annotated[
        Optional[Path],
        typer.Option(
            "--data",
            metavar="FILE.ptd",
            help="The .ptd data file holding the weights the program keeps "
            "outside it (compile --external-constants, ExecuTorch's external_constants).",
            show_default=False,
        ),
    ] = None,
    reference: Annotated[
        Optional[Path],
        typer.Option(
            "--reference",
            metavar="FILE",
            help="Hold the outputs against a reference: the .pt2 model the program was compiled from, "
            "another .pte (run on the same runtime) or outputs saved with torch.save; per output SQNR, "
            "max and mean absolute difference, allclose and argmax agreement, and exit 1 where one fails.",
            show_default=False,
        ),
    ] = None,
    atol: Annotated[
        float, typer.Option("--atol", min=0, max=1e30, help="With --reference: allclose's absolute tolerance.")
    ] = 1e-4,
    rtol: Annotated[
        float, typer.Option("--rtol", min=0, max=1e30, help="With --reference: allclose's relative tolerance.")
    ] = 1e-4,
    min_sqnr: Annotated[
        Optional[float],
        typer.Option(
            "--min-sqnr",
            metavar="DB",
            min=-1000,
            max=1000,
            help="With --reference: judge each output by its SQNR instead of allclose, failing below DB "
            "(a quantized program against its float model).",
            show_default=False,
        ),
    ] = None,
    report_format: Format = ReportFormat.text,
    junit: JUnit = None,
    cuda_graphs: Annotated[
        bool,
        typer.Option(
            "--cuda-graphs/--no-cuda-graphs",
            help="Replay each delegate on a CUDA device as one CUDA "
            "graph from its second run on (--debug says why one cannot be).",
        ),
    ] = True,
) -> None:
    """Run a .pte in devplan's reference runtime and summarize its outputs.

    Every planned tensor lives where the plan put it, in one arena per buffer from the
    DeviceAllocator registered for the buffer's device, so a broken plan shows as wrong outputs.
    Delegates devplan compiled (--delegate) run their payloads on their device; ExecuTorch's
    backends' delegates (--backend) need --executorch."""
    import io

    import torch

    from devplan.files import is_stdout, refuse_overwrite, write_atomic
    from devplan.pte import read_pte
    from devplan.runtime.compare import OutputTolerance, compare_outputs, latency
    from devplan.runtime.memory import Memory
    from devplan.runtime.reference import reference_outputs
    from devplan.runtime.report import run_document

    if reference is None and (min_sqnr is not None or (atol, rtol) != (1e-4, 1e-4)):
        raise DevplanError("--atol, --rtol and --min-sqnr judge outputs against a reference; add --reference FILE")
    if reference is None and (report_format is not ReportFormat.text or junit is not None):
        raise DevplanError(
            "--format markdown|github and --junit report outputs against a reference; add --reference FILE"
        )
    trace = _trace(etdump, debug_buffer, executorch)
    # one limit for the inputs, read or made, and all the program's memory
    memory = Memory(size_option(max_memory, "--max-memory", "4GiB or 512MiB"))
    refuse_overwrite(save, [program, data, inputs, reference], "--save")
    refuse_overwrite(etdump, [program, data, inputs, reference, save], "--etdump")
    report_outputs(json_output, report_format, junit, [program, data, inputs, reference])
    pte = read_pte(program_source(program, data))
    given = _load_inputs(inputs, memory) if inputs is not None else None
    way = _Runtime(method, seed, executorch, devices_on_host, cuda_graphs)
    given, results, seconds, held = way.execute(pte, given, runs, memory, trace)
    compared: Reference | None = None
    if reference is not None:
        tolerance = OutputTolerance(atol, rtol, min_sqnr)
        again = lambda path, inputs, count: way.execute(read_pte(path), inputs, count, Memory(memory.limit))[1]
        want = reference_outputs(reference, given, runs, again)
        if len(want) != len(results[-1]):
            raise DevplanError(
                f"--reference {reference}: {len(want)} outputs against the program's {len(results[-1])}; "
                f"pass the model or outputs of this program's method {method}"
            )
        outputs = compare_outputs(results[-1], want, tolerance)
        compared = {
            "file": {"name": reference.name},
            "atol": atol,
            "rtol": rtol,
            "min_sqnr_db": min_sqnr,
            "passed": all(output["passed"] for output in outputs),
            "outputs": outputs,
        }
    if save is not None:
        buffer = io.BytesIO()
        torch.save(results[-1], buffer)
        write_atomic(save, buffer.getvalue())
    report = run_document(program.name, method, results, held, compared, latency(seconds))
    # the outputs saved on standard output leave it no room for the report (as compile -o -)
    to_stderr = save is not None and is_stdout(save)
    if junit is not None and compared is not None:
        from devplan.inspection.reports_ci import run_junit

        write_atomic(junit, run_junit(compared, program.name, str(program)))
    if json_output:
        echo_json(report, err=to_stderr)
    elif report_format is ReportFormat.markdown and compared is not None:
        from devplan.inspection.reports_ci import run_markdown

        echo(run_markdown(compared, program.name), nl=False, err=to_stderr)
    elif report_format is ReportFormat.github and compared is not None:
        from devplan.inspection.reports_ci import run_github

        typer.echo(  # devplan's own workflow commands: the one output not made inert
            "".join(line + "\n" for line in run_github(compared, str(program))), nl=False, err=to_stderr
        )
    else:
        from devplan.inspection.difftext import wrapped
        from devplan.inspection.reports import run_lines

        for line in wrapped(run_lines(report), console().width):  # as check's lines: at the console's width
            echo(line, err=to_stderr)
    if compared is not None and not compared["passed"]:
        raise typer.Exit(EXIT_FAILED)


@dataclass(frozen=True)
class _Runtime:
    """Where and how the program runs: devplan's runtime, or ExecuTorch's (--executorch); a
    --reference program runs the same way."""

    method: str
    seed: int
    executorch: bool
    devices_on_host: bool
    cuda_graphs: bool

    def execute(
        self, pte: PteFile, given: list[Any] | None, runs: int, memory: Memory, trace: Trace | None = None
    ) -> tuple[list[Any], list[list[Any]], list[float], list[DeviceMemory] | None]:
        """(the inputs, each run's outputs, each run's seconds, what each device held or None);
        with `trace` (--etdump), the runs' ETDump written."""
        from contextlib import nullcontext

        from devplan.pte.decode import methods
        from devplan.runtime import HostAllocator, LoadedMethod, registered
        from devplan.runtime.allocator import peaks, reset_peaks
        from devplan.runtime.compare import timed_runs
        from devplan.runtime.report import device_memory

        if self.executorch:
            from devplan.runtime.executor import method_view, sample_inputs
            from devplan.runtime.executorch import run_on_executorch

            if given is None:
                given = sample_inputs(method_view(pte, self.method), self.seed, memory)
            return (given, *run_on_executorch(pte, self.method, given, runs, trace), None)
        with registered("cuda", HostAllocator()) if self.devices_on_host else nullcontext():
            devices = {d for view in methods(pte) for d in view.buffer_devices.values()}
            reset_peaks(devices)
            loaded = LoadedMethod(pte, self.method, memory=memory, cuda_graphs=self.cuda_graphs)
            try:
                given = given if given is not None else loaded.sample_inputs(self.seed)
                clocks: list[Clock] = []
                once = (lambda: loaded.execute(given)) if trace is None else lambda: _clocked(loaded, given, clocks)
                results, seconds = timed_runs(once, runs)
                if trace is not None:
                    trace.write_own(pte, self.method, clocks)
                return given, results, seconds, device_memory(loaded, peaks(devices))
            finally:
                loaded.release()


def _clocked(loaded: LoadedMethod, given: list[Any], clocks: list[Clock]) -> list[Any]:
    """One run of `loaded`, its instructions' and its own host times appended to `clocks`."""
    import time

    steps: list[tuple[int, int, int]] = []
    start = time.perf_counter_ns()
    outputs = loaded.execute(given, clock=steps)
    clocks.append((steps, start, time.perf_counter_ns()))
    return outputs


def _trace(etdump: Path | None, debug_buffer: str | None, executorch: bool) -> Trace | None:
    """--etdump's Trace, its options checked: ExecuTorch's runtime writes the ETDump."""
    from devplan.runtime.etdump_trace import Trace

    if debug_buffer is not None and etdump is None:
        raise DevplanError("--debug-buffer keeps outputs in an ETDump's debug buffer; add --etdump FILE")
    if etdump is None:
        return None
    if debug_buffer is not None and not executorch:
        raise DevplanError("--debug-buffer: devplan's runtime keeps no outputs in its ETDump; add --executorch")
    nbytes = size_option(debug_buffer, "--debug-buffer", "16MiB") if debug_buffer is not None else 0
    return Trace(etdump, nbytes)


def _load_inputs(path: Path, memory: Memory) -> list[Any]:
    """The --inputs file's tensors, read once into memory: a regular file, whose bytes (what its
    tensors take once loaded) are counted against `memory`'s limit before they are loaded."""
    from devplan.files import read_input
    from devplan.runtime.saved import saved_tensors

    data = read_input(path, limit=memory.limit - memory.taken, hint="pass a file of tensors saved with torch.save")
    memory.take(len(data), f"{path}: the inputs")
    return saved_tensors(str(path), data, "input")
