"""`devplan.compile`: the pipeline as a row of stages, each a plain function.

    load -> from_exported -> decompose -> fold_constants -> view_dynamic_copies -> hoist_sizes
         [-> partition -> compile_delegates] -> build_method -> write_cats_in_place -> schedule
         -> reuse_dead_inputs -> plan_method -> to_program -> dumps_pte -> write
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from devplan.errors import DevplanError, InternalError

MAX_ALIGNMENT = 4096  # a page: no device asks for more, and a larger one only inflates the buffers


@dataclass(frozen=True)
class CompileResult:
    data: bytes                      # the .pte bytes
    path: Path | None                # where they were written, if anywhere
    planned: "PlannedMethod"
    constant_bytes: int
    seconds: float
    stage_seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict:
        """`devplan compile --json` (docs/compile-json.md): the facts it prints, under the keys
        the inspection document gives the same facts; timings apart under `timings`, the one
        key that differs between two runs."""
        method = self.planned.method
        return {
            "schema_version": 1,
            "file": {"name": self.path.name if self.path else "<bytes>", "size": len(self.data),
                     "constant_bytes": self.constant_bytes},
            "methods": [{
                "name": method.name,
                "planner": self.planned.algorithm,
                "counts": {"values": len(method.values), "instructions": len(method.kernels),
                           "operators": len({k.op for k in method.kernels if k.delegate is None}),
                           "delegates": len(method.delegates)},
                "buffers": [{"mem_id": b.mem_id, "device": str(b.device), "size": b.size,
                             "lower_bound": b.lower_bound, "tensors": b.tensors} for b in self.planned.buffers],
                "delegates": [{"index": i, "id": d.backend, "target_device": str(d.device),
                               "payload_size": len(d.payload),
                               "window": {"mem_id": d.window[0], "offset": d.window[1], "size": d.arena} if d.window else None}
                              for i, d in enumerate(method.delegates)],
            }],
            "timings": {"seconds": round(self.seconds, 3),
                        "stages": {name: round(seconds, 4) for name, seconds in self.stage_seconds.items()}},
        }


def compile(model, output: str | os.PathLike | None = None, *, alignment: int = 16, planner: str = "best",
            budgets: Mapping[str, int] | None = None, inplace: bool = True, reorder: bool = True,
            delegates: Sequence["Backend | str"] = (), device_io: bool = False, source: bool = True,
            dump_dir: str | os.PathLike | None = None, on_stage: Callable[[str], None] | None = None) -> CompileResult:
    """Compile a .pt2 path or an ExportedProgram to an ET12 program. Writes `output` when
    given (atomically); nothing is written when any stage fails. `delegates` are backends
    ('cuda:0', 'cuda:0=aten::linear,aten::relu', or Backend objects), each taking the ops it
    supports, in turn, to run them on its device; with `device_io`, inputs only they read are
    planned on their device and their results are returned from there. `reorder` runs the
    instructions in the order that holds the fewest bytes at once, `inplace` lets results
    take the bytes of inputs that die with them. `source` keeps, per instruction, the module,
    op and line it came from, and the user's names of inputs and weights (ET12's stacktrace)."""
    from devplan.emit.build import build_method
    from devplan.emit.delegate import compile_delegates
    from devplan.emit.program import to_program
    from devplan.load import load
    from devplan.passes import method_passes
    from devplan.passes.decompose import decompose
    from devplan.passes.fold import fold_constants
    from devplan.passes.graph import from_exported
    from devplan.passes.partition import Backend, partition
    from devplan.passes.sizes import hoist_sizes, view_dynamic_copies
    from devplan.planning.assign import plan_method
    from devplan.pte import dumps_pte, write_atomic

    if alignment < 1 or alignment & (alignment - 1) or alignment > MAX_ALIGNMENT:
        raise DevplanError(f"--alignment {alignment}: must be a power of two from 1 to {MAX_ALIGNMENT}, e.g. 16")
    if dump_dir is not None and Path(dump_dir).exists() and not Path(dump_dir).is_dir():
        raise DevplanError(f"--dump-dir {dump_dir}: is a file; name a folder (it is made if missing)")
    backends = [Backend.parse(d) if isinstance(d, str) else d for d in delegates]
    start = time.perf_counter()
    seconds: dict[str, float] = {}

    def stage(name: str, fn, *args, **kwargs):
        if on_stage:
            on_stage(name)
        began = time.perf_counter()
        try:
            result = fn(*args, **kwargs)
        except (DevplanError, KeyboardInterrupt, MemoryError):
            raise
        except Exception as error:  # anything else is devplan's own bug: say where it happened
            raise InternalError.of(name, error) from error
        seconds[name] = time.perf_counter() - began
        if dump_dir is not None:
            _dump(Path(dump_dir), len(seconds), name, result if result is not None else args[0])
        return result

    ep = stage("load", load, model) if isinstance(model, (str, os.PathLike)) else model
    low = stage("split", from_exported, ep)
    stage("decompose", decompose, low.gm)
    stage("fold", fold_constants, low)
    stage("views", view_dynamic_copies, low.gm)
    stage("sizes", hoist_sizes, low.gm)
    if backends:
        low = stage("partition", partition, low, backends)
        low = stage("delegates", compile_delegates, low, alignment=alignment, planner=planner, inplace=inplace,
                    reorder=reorder, source=source)
    method = stage("build", build_method, low, device_io=device_io)
    for name, run in method_passes(inplace=inplace, reorder=reorder, alignment=alignment):
        method = stage(name, run, method)
    planned = stage("plan", plan_method, method, alignment=alignment, algorithm=planner, budgets=budgets)
    program, segments = stage("emit", to_program, planned, source=source)
    data = stage("serialize", dumps_pte, program, segments)
    path = Path(output) if output is not None else None
    if path is not None:
        stage("write", write_atomic, path, data)
    # what the program stores: equal tensors once, each aligned (inspect's constant_bytes too)
    return CompileResult(data, path, planned, len(segments[0]), time.perf_counter() - start, seconds)


def _dump(folder: Path, step: int, name: str, result) -> None:
    """One readable file per stage (devplan/dump.py), so that a regression shows as a file diff."""
    from devplan.dump import stage_text

    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{step:02d}-{name}.txt").write_text(stage_text(result))
