"""`devplan.compile`: the pipeline as a row of stages, each a plain function.

    load -> from_exported -> GRAPH_PASSES (decompose, fold, views, sizes), each Lowered -> Lowered
         [-> partition -> compile_delegates: lower_method for each payload]
         -> lower_method: build_method -> method_passes (copies, alias, compact, [place,] concat, schedule,
                          inplace), each Method -> Method
                          -> plan_method -> to_program -> dumps_pte
         -> write
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from devplan.errors import DevplanError, InternalError
from devplan.options import CompileOptions
from devplan.planning.verify import PlanError
from devplan.wellformed import Malformed, check_stage

if TYPE_CHECKING:
    from devplan.passes.graph import Lowered
    from devplan.planning.assign import PlannedMethod
    from devplan.spec import Device


@dataclass(frozen=True)
class CompileResult:
    data: bytes                      # the .pte bytes
    path: Path | None                # where they were written, if anywhere
    planned: "PlannedMethod"
    constant_bytes: int
    seconds: float
    stage_seconds: dict[str, float] = field(default_factory=dict)
    folding: dict[str, int] = field(default_factory=dict)  # fold_constants' choice (passes/fold.py)

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
            "folding": {key: int(self.folding.get(key, 0)) for key in _FOLDING},
            "timings": {"seconds": round(self.seconds, 3),
                        "stages": {name: round(seconds, 4) for name, seconds in self.stage_seconds.items()}},
        }


_FOLDING = ("subgraphs", "shared_inputs", "constant_bytes_added", "run_bytes_removed")


def compile(model, output: str | os.PathLike | None = None, options: CompileOptions | None = None, *,
            on_stage: Callable[[str], None] | None = None, **choices) -> CompileResult:
    """Compile a .pt2 path or an ExportedProgram to an ET12 program. Writes `output` when
    given (atomically); nothing is written when any stage fails. `options` (a CompileOptions)
    or keywords of the same names choose: `delegates` are backends ('cuda:0',
    'cuda:0=aten::linear,aten::relu', or Backend objects), each taking the ops it supports, in
    turn, to run them on its device; with `device_io`, inputs only they read are planned on
    their device and their results are returned from there. `reorder` runs the instructions
    in the order that holds the fewest bytes at once, `inplace` lets results take the bytes of
    inputs that die with them. `source` keeps, per instruction, the module, op and line it came
    from, and the user's names of inputs and weights (ET12's stacktrace). `budgets` maps a
    buffer's mem_id or a device to the bytes it may plan; `alignment`, `planner`, `dump_dir`."""
    from devplan.backend import Backend
    from devplan.emit.delegate import compile_delegates
    from devplan.load import load
    from devplan.passes import GRAPH_PASSES
    from devplan.passes.graph import from_exported
    from devplan.files import write_atomic
    from devplan.passes.partition import partition

    options = CompileOptions.of(options, **choices)
    start = time.perf_counter()
    stage = Stages(options.dump_dir, on_stage, checks=options.checks)
    ep = stage("load", load, model) if isinstance(model, (str, os.PathLike)) else model
    own = tuple(d for d in options.delegates if isinstance(d, Backend))
    if len(own) < len(options.delegates):  # ExecuTorch's backends compile their groups first
        from devplan.passes.backends import adopt_delegates, lower_to_backends

        ep = stage("backends", lower_to_backends, ep, options.delegates)
    low = stage("split", from_exported, ep)
    if len(own) < len(options.delegates):
        low = stage("adopt", adopt_delegates, low)
    for name, graph_pass in GRAPH_PASSES:
        low = stage(name, graph_pass, low)
    folding = dict(low.folding)
    if options.delegates:
        low = stage("partition", partition, low, own)
        # each payload goes through the same stages as the program, named after its call
        low = compile_delegates(low, lambda sub, device, call: lower_method(sub, options, stage.within(call), device))
    planned, data, constant_bytes = lower_method(low, options, stage)
    path = Path(output) if output is not None else None
    if path is not None:
        stage("write", write_atomic, path, data)
    return CompileResult(data, path, planned, constant_bytes, time.perf_counter() - start, stage.seconds, folding)


def lower_method(low: "Lowered", options: CompileOptions, stage: "Stages",
                 delegate: "Device | None" = None) -> tuple["PlannedMethod", bytes, int]:
    """A Lowered graph to (planned method, .pte bytes, stored constant bytes), for the program
    and, with `delegate` (the device its backend runs on), for a delegate's payload: every
    tensor it computes on that device, its inputs and outputs its caller's."""
    from devplan.emit.build import build_method
    from devplan.emit.program import to_program
    from devplan.passes import method_passes
    from devplan.planning.assign import plan_method
    from devplan.pte import dumps_pte
    from devplan.spec import CPU

    method = stage("build", build_method, low, device_io=options.device_io and delegate is None)
    for name, method_pass in method_passes(options, delegate):
        method = stage(name, method_pass, method)
    planned = stage("plan", plan_method, method, alignment=options.alignment, algorithm=options.planner,
                    budgets=dict(options.budgets) if delegate is None else None, home=delegate or CPU,
                    borrowed_io=delegate is not None)
    program, segments = stage("emit", to_program, planned, source=options.source)
    # what the program stores: equal tensors once, each aligned, and the named data that
    # ExecuTorch's backends keep beside their payloads (inspect's constant_bytes too)
    stored = len(segments[0]) + sum(len(segments[entry.segmentIndex]) for entry in program.namedData or ())
    return planned, stage("serialize", dumps_pte, program, segments), stored


@dataclass
class Stages:
    """Runs a compile's stages: each timed, reported to `on_stage`, dumped to `dump_dir`, and
    a failure that is not a DevplanError, or the plan verifier refusing devplan's own plan,
    named as devplan's own bug in that stage (EXIT_INTERNAL)."""

    dump_dir: Path | None = None
    on_stage: Callable[[str], None] | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    prefix: str = ""
    checks: bool = False  # each result checked (devplan/wellformed.py), so a broken pass is named by its stage

    def __call__(self, name: str, fn, *args, **kwargs):
        name = self.prefix + name
        if self.on_stage:
            self.on_stage(name)
        began = time.perf_counter()
        try:
            result = fn(*args, **kwargs)
        except PlanError as error:  # the verifier refusing a plan devplan made: devplan's bug, not the input's
            raise InternalError.of(name, error) from error
        except (DevplanError, KeyboardInterrupt, MemoryError):
            raise
        except Exception as error:  # anything else is devplan's own bug: say where it happened
            raise InternalError.of(name, error) from error
        self.seconds[name] = time.perf_counter() - began
        if self.dump_dir is not None:  # the write stage returns nothing: what it wrote where
            _dump(self.dump_dir, len(self.seconds), name, result if result is not None else args[0])
        if self.checks:
            try:
                check_stage(result)
            except Malformed as error:
                raise InternalError(name) from error
        return result

    def within(self, prefix: str) -> "Stages":
        """The same run, its stage names prefixed (a delegate payload's: delegate_0.build)."""
        return replace(self, prefix=f"{self.prefix}{prefix}.")


def _dump(folder: Path, step: int, name: str, result) -> None:
    """One readable file per stage (devplan/dump.py), so that a regression shows as a file diff."""
    from devplan.dump import stage_text
    from devplan.files import write_atomic

    # devplan names these files: a link planted as one of them is replaced, never written through
    write_atomic(folder / f"{step:02d}-{name}.txt", stage_text(result, name).encode(), follow_links=False, parents=True)
