"""What a compile returns: the program's image and plans, and the summary `compile --json` prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping, cast

from devplan.documents import CompiledFile, CompiledMethod, CompileSummary, Folding
from devplan.inspection.kernels import libraries
from devplan.inspection.own_memory import working_memory
from devplan.ir.planned import PlannedMethod
from devplan.passes.export.attention import Attention
from devplan.passes.export.quantize import QuantizeReport
from devplan.passes.export.refusals import Fallback
from devplan.pte.writer import Spread


@dataclass(frozen=True)
class CompileResult:
    image: Spread  # the .pte as the pieces written, the weights' own tensors among them
    path: Path | None  # where they were written, if anywhere
    planned: PlannedMethod  # forward's plan
    constant_bytes: int
    seconds: float
    stage_seconds: dict[str, float] = field(default_factory=dict)
    # fold_constants' record (passes/graph/fold.py), all methods' summed, and under "choices" each
    # method's policies planned (arena, constant bytes) and the one kept
    folding: dict[str, Any] = field(default_factory=dict)
    methods: tuple[PlannedMethod, ...] = ()  # every method's plan, in the program's order (forward first)
    # with external_constants: the .ptd as the pieces written, and how many keys it holds
    external: Spread | None = None
    external_keys: int = 0
    quantization: QuantizeReport | None = None  # with --quantize: what quantizing cost
    attention: Mapping[str, tuple[Attention, ...]] = field(default_factory=dict)  # by method: each attention's form
    fallbacks: Mapping[str, tuple[Fallback, ...]] = field(default_factory=dict)  # by method: ops backends refused

    @cached_property
    def data(self) -> bytes:
        """The .pte's bytes, joined when first asked: a compile that writes its file never
        holds a second copy of the weights. The weights are read from the model's own tensors
        then; the initial state is what it was at compile time."""
        return bytes(self.image)

    def summary(self) -> CompileSummary:
        """`devplan compile --json` (docs/compile-json.md): the facts it prints, under the keys
        the inspection document gives the same facts; timings apart under `timings`, the one
        key that differs between two runs."""
        file: CompiledFile = {
            "name": self.path.name if self.path else "<bytes>",
            "size": len(self.image),
            "constant_bytes": self.constant_bytes,
        }
        if self.external is not None:
            file["external"] = {"size": len(self.external), "keys": self.external_keys}
        summary: CompileSummary = {
            "schema_version": 1,
            "file": file,
            "methods": [
                _method_summary(
                    planned,
                    self.attention.get(planned.method.name, ()),
                    self.fallbacks.get(planned.method.name, ()),
                )
                for planned in self.methods or (self.planned,)
            ],
            "folding": cast(
                Folding,
                {
                    **{key: int(self.folding.get(key, 0)) for key in FOLDING},
                    "choices": list(self.folding.get("choices", [])),
                },
            ),
            "timings": {
                "seconds": round(self.seconds, 3),
                "stages": {name: round(seconds, 4) for name, seconds in self.stage_seconds.items()},
            },
        }
        if self.quantization is not None:
            summary["quantization"] = self.quantization.summary()
        return summary


def _method_summary(
    planned: PlannedMethod, attention: tuple[Attention, ...], fallbacks: tuple[Fallback, ...]
) -> CompiledMethod:
    method = planned.method
    return {
        "name": method.name,
        "planner": planned.algorithm,
        "counts": {
            "values": len(method.values),
            "instructions": len(method.kernels),
            "operators": len({k.op for k in method.kernels if k.delegate is None}),
            "delegates": len(method.delegates),
        },
        "buffers": [
            {
                "mem_id": b.mem_id,
                "device": str(b.device),
                "size": b.size,
                "lower_bound": b.lower_bound,
                "tensors": b.tensors,
            }
            for b in planned.buffers
        ],
        "delegates": [
            {
                "index": i,
                "id": d.backend,
                "target_device": str(d.device),
                "payload_size": len(d.payload),
                "working_memory": working_memory(d.backend, d.payload),
                "window": {"mem_id": d.window[0], "offset": d.window[1], "size": d.arena} if d.window else None,
            }
            for i, d in enumerate(method.delegates)
        ],
        "kernels": libraries(k.op for k in method.kernels if k.delegate is None),
        "backends": sorted({d.backend for d in method.delegates}),
        "attention": [
            {"node": a.node, "module": a.module, "keys": a.keys, "block": a.block, "why": a.why} for a in attention
        ],
        "fallbacks": [{"backend": f.backend, "ops": list(f.ops), "why": f.why} for f in fallbacks],
    }


FOLDING = ("subgraphs", "shared_inputs", "constant_bytes_added", "run_bytes_removed")
