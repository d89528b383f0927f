"""`devplan run`: a program through devplan's reference runtime (or ExecuTorch's)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from devplan.cli.app import Command, app, console, echo, echo_json, program_source
from devplan.errors import DevplanError


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
        typer.Option("--runs", min=1, max=10_000, help="Run the method this many times in a row (state carries over)."),
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
            '"devplan\\[executorch]"): any program, those with XNNPACK delegates too.',
        ),
    ] = False,
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
    from contextlib import nullcontext

    import torch

    from devplan.files import is_stdout, refuse_overwrite, write_atomic
    from devplan.pte import read_pte
    from devplan.pte.decode import methods
    from devplan.runtime import HostAllocator, LoadedMethod, registered
    from devplan.runtime.allocator import peaks, reset_peaks
    from devplan.runtime.memory import Memory
    from devplan.runtime.report import device_memory, run_document

    # one limit for the inputs, read or made, and all the program's memory
    memory = Memory(_memory_limit(max_memory))
    refuse_overwrite(save, [program, data, inputs], "--save")
    pte = read_pte(program_source(program, data))
    given = _load_inputs(inputs, memory) if inputs is not None else None
    held = None
    if executorch:
        from devplan.runtime.executor import method_view, sample_inputs
        from devplan.runtime.executorch import run_on_executorch

        results = run_on_executorch(
            pte, method, given if given is not None else sample_inputs(method_view(pte, method), seed, memory), runs
        )
    else:
        with registered("cuda", HostAllocator()) if devices_on_host else nullcontext():
            devices = {d for view in methods(pte) for d in view.buffer_devices.values()}
            reset_peaks(devices)
            loaded = LoadedMethod(pte, method, memory=memory, cuda_graphs=cuda_graphs)
            try:
                given = given if given is not None else loaded.sample_inputs(seed)
                results = [loaded.execute(given) for _ in range(runs)]
                held = device_memory(loaded, peaks(devices))
            finally:
                loaded.release()
    if save is not None:
        buffer = io.BytesIO()
        torch.save(results[-1], buffer)
        write_atomic(save, buffer.getvalue())
    report = run_document(program.name, method, results, held)
    # the outputs saved on standard output leave it no room for the report (as compile -o -)
    to_stderr = save is not None and is_stdout(save)
    if json_output:
        echo_json(report, err=to_stderr)
        return
    from devplan.cli.reports import run_lines
    from devplan.inspection.difftext import wrapped

    for line in wrapped(run_lines(report), console().width):  # as check's lines: at the console's width
        echo(line, err=to_stderr)


def _memory_limit(text: str) -> int:
    from devplan.units import size_bytes

    nbytes = size_bytes(text)
    if nbytes is None or nbytes < 1:
        raise DevplanError(f"bad --max-memory {text!r}; give a size such as 4GiB or 512MiB")
    return int(nbytes)


def _load_inputs(path: Path, memory) -> list:
    """The --inputs file's tensors, read once into memory: a regular file, whose bytes (what its
    tensors take once loaded) are counted against `memory`'s limit before they are loaded."""
    import io

    import torch

    from devplan.files import read_input

    data = read_input(path, limit=memory.limit - memory.taken, hint="pass a file of tensors saved with torch.save")
    memory.take(len(data), f"{path}: the inputs")
    try:
        loaded = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as error:  # torch.load raises pickle, zip and OS errors alike for a bad file
        raise DevplanError(
            f"{path}: not a file of tensors saved with torch.save ({type(error).__name__}); "
            f"save a tensor or a list of tensors with torch.save"
        ) from None
    tensors = list(loaded) if isinstance(loaded, (list, tuple)) else [loaded]
    for index, tensor in enumerate(tensors):
        if isinstance(tensor, torch.Tensor) and (tensor.layout != torch.strided or tensor.is_meta):
            raise DevplanError(
                f"{path}: input {index} is a {str(tensor.layout).removeprefix('torch.')} tensor on "
                f"{tensor.device.type}; save dense tensors that hold their values (tensor.to_dense())"
            )
    return tensors
