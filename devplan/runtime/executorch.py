"""`devplan run --executorch`: the same program on ExecuTorch's own runtime (the
`devplan[executorch]` extra), so that one tool checks the outputs of any program, those
with ExecuTorch's backends' delegates (XNNPACK) included, which devplan's runtime cannot run."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import torch

from devplan.errors import DevplanError, first_line
from devplan.extras import INSTALL, import_module
from devplan.pte.decode import methods
from devplan.pte.program_view import program_view
from devplan.pte.reader import PteFile
from devplan.runtime.compare import timed_runs
from devplan.runtime.etdump_trace import Trace
from devplan.runtime.executor import method_view

# ExecuTorch's kernel libraries beside the portable one (whose prim ops, dim order ops and
# et_copy register with it) that a devplan program may call: the quantized kernels register
# when their module is imported; the LLM custom ops when their shared library is loaded (their
# Python module would load it too, after importing torch's inductor for its compile side)
QUANTIZED_KERNELS = "executorch.kernels.quantized"
LLM_KERNELS = ("executorch.extension.llm.custom_ops", "*custom_ops_aot_lib.*")
# where the core reads them (devplan/ops.py's REGISTERED): the core never imports executorch
OPERATOR_LIST = Path(__file__).resolve().parents[1] / "executorch_ops.txt"


def registered_operators() -> list[str]:
    """The names of the operators ExecuTorch's runtime has a kernel for once its portable
    library and the quantized and LLM kernels are loaded, sorted: what devplan/executorch_ops.txt holds."""
    return sorted(set(load_runtime("the operator list").portable._get_operator_names()))


def run_on_executorch(
    pte: PteFile, name: str, inputs: list[Any], runs: int = 1, trace: Trace | None = None
) -> tuple[list[list[Any]], list[float]]:
    """The outputs of `runs` calls of method `name`, one loaded method, state carried over, and
    the seconds each call took; with `trace`, ExecuTorch's ETDump of the calls written."""
    if trace is not None:
        trace.check(pte, name, runs)
    method_view(pte, name)
    if pte.external is not None and pte.external.path is None:
        raise DevplanError(f"{pte.external.name}: ExecuTorch's runtime loads a .ptd by its path; pass it as a file")
    kept = sorted({t.external for view in methods(pte) for t in view.tensors.values() if t.external is not None})
    if kept and pte.external is None:  # ExecuTorch's runtime fails to load the method, saying only "0x:2"
        raise DevplanError(
            f"{pte.name}: the program keeps {len(kept)} weights in a .ptd data file (key "
            f"{kept[0]!r}); pass it: devplan run PROGRAM.pte --executorch --data FILE.ptd"
        )
    outside = program_view(pte).outside
    if outside and pte.external is None:  # ExecuTorch's XNNPACK backend crashes without them
        key, where = next(iter(outside.items()))
        raise DevplanError(
            f"{pte.name}: {where} reads named data {key!r} kept outside the program "
            f"({len(outside)} keys); pass the .ptd written with it: --data FILE.ptd"
        )
    with native_logs_quiet():
        return _run(pte, name, inputs, runs, trace)


def _run(
    pte: PteFile, name: str, inputs: list[Any], runs: int, trace: Trace | None
) -> tuple[list[list[Any]], list[float]]:
    runtime = load_runtime("--executorch").runtime
    traced = {} if trace is None else {"enable_etdump": True, "debug_buffer_size": trace.debug_buffer}
    try:
        # a mapped file by its path (ExecuTorch's loader maps it too), bytes as they are
        # with its .ptd by path, which ExecuTorch's loader maps
        data_path = pte.external.path if pte.external is not None else None
        program = runtime.Runtime.get().load_program(
            pte.path if pte.path is not None else bytes(pte.data), data_path=data_path, **traced
        )
        method = program.load_method(name)
        done = timed_runs(
            lambda: [o.clone() if isinstance(o, torch.Tensor) else o for o in method.execute(list(inputs))], runs
        )
    except Exception as error:  # ExecuTorch's runtime refused the program or its inputs
        raise DevplanError(_in_devplans_words(pte, name, first_line(error))) from None
    if trace is not None:
        trace.write(program)
    return done


# ExecuTorch numbers the planned buffers from 0 (the program's mem_id 1) and devices by type
_DEVICE_BUFFER = re.compile(r"Failed to allocate (\d+) bytes for buffer (\d+) on device (\d+):(\d+)")


def _in_devplans_words(pte: PteFile, name: str, reason: str) -> str:
    """ExecuTorch's failure as one line; a device buffer it cannot allocate named as devplan
    names it (mem_id and device), with what runs the program instead."""
    found = _DEVICE_BUFFER.search(reason)
    if found is None:
        return f"{pte.name}: ExecuTorch's runtime failed on method {name}: {reason}"
    mem_id = int(found[2]) + 1
    view = method_view(pte, name)
    device = view.buffer_devices.get(mem_id, f"device type {found[3]}, index {found[4]}")
    return (
        f"{pte.name}: method {name} plans buffer {mem_id} on {device} ({found[1]} bytes), and this ExecuTorch "
        f"runtime build has no allocator for {device} memory; run it on "
        f"devplan's runtime: devplan run {pte.name} (with --devices-on-host where the device is missing)"
    )


@dataclass(frozen=True)
class Runtime:
    runtime: ModuleType  # executorch.runtime
    portable: ModuleType  # its pybindings, which list the registered operators


def load_runtime(who: str) -> Runtime:
    """ExecuTorch's runtime with the kernels devplan's runtime takes as registered
    (ops.REGISTERED), without ExecuTorch's compile side: the pybindings import one decorator from
    executorch.exir, whose package imports all of exir (16 of the 17 s the runtime took to load).
    While they load, executorch.exir is a bare package, so that only that module runs; it is
    dropped after, so a later `import executorch.exir` (a compile in the same process) is whole."""
    if "executorch.exir" in sys.modules:  # already whole: nothing to save
        return _load_kernels(who)
    spec = importlib.util.find_spec("executorch.exir") if importlib.util.find_spec("executorch") else None
    locations = spec.submodule_search_locations if spec is not None else None
    if locations is None:  # not installed: import_module raises the one line that says how to install it
        import_module("executorch.exir", who)
        return _load_kernels(who)  # imported whole: nothing left to save
    bare = types.ModuleType("executorch.exir")
    bare.__path__ = list(locations)
    sys.modules["executorch.exir"] = bare
    try:
        return _load_kernels(who)
    finally:
        for name in [name for name in sys.modules if name == "executorch.exir" or name.startswith("executorch.exir.")]:
            del sys.modules[name]


def _load_kernels(who: str) -> Runtime:
    runtime = import_module("executorch.runtime", who)
    portable = import_module("executorch.extension.pybindings.portable_lib", who)
    import_module(QUANTIZED_KERNELS, who)
    package, pattern = LLM_KERNELS
    if not hasattr(torch.ops.llama, "custom_sdpa"):  # loaded once per process
        spec = importlib.util.find_spec(package)
        folders = spec.submodule_search_locations or [] if spec is not None else []
        found = [library for folder in folders for library in sorted(Path(folder).glob(f"**/{pattern}"))]
        if not found:
            raise DevplanError(f"{who}: ExecuTorch's LLM kernels ({package}) are not installed; {INSTALL}")
        torch.ops.load_library(str(found[0]))  # type: ignore[no-untyped-call]  # torch declares it untyped
    return Runtime(runtime, portable)


@contextlib.contextmanager
def native_logs_quiet() -> Iterator[None]:
    """ExecuTorch's C++ logs (cpuinfo's probing, a method's load errors) kept off standard error:
    devplan says in one line what went wrong. With --debug (the devplan logger at DEBUG) they
    pass through."""
    if logging.getLogger("devplan").isEnabledFor(logging.DEBUG):
        yield
        return
    sys.stderr.flush()
    try:
        saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    except OSError:  # no standard error to keep clean
        yield
        return
    os.dup2(null, 2)
    os.close(null)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


if __name__ == "__main__":  # python -m devplan.runtime.executorch [PATH]: rewrite the operator list
    from devplan.files import write_atomic

    names = registered_operators()
    write_atomic(sys.argv[1] if len(sys.argv) > 1 else OPERATOR_LIST, "".join(f"{name}\n" for name in names).encode())
