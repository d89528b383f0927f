"""A method's graph from fold on: the graph passes after it, its delegates' payloads (each lowered
by these same stages on its backend's device), the method passes, and its plan."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from devplan.backend import Backend
from devplan.compiler.stages import Stages
from devplan.emit.build import build_method
from devplan.emit.program import stored_size, to_program
from devplan.errors import DevplanError
from devplan.ir.lowered import Lowered, Payload
from devplan.ir.planned import PlannedMethod
from devplan.ir.role import PROGRAM, Role
from devplan.options import CompileOptions
from devplan.passes import Pipeline
from devplan.passes.graph.delegates import Group, delegate_groups
from devplan.passes.graph.device_results import results_on_device
from devplan.passes.graph.fold import Folded, read_constants
from devplan.passes.graph.partition import partition
from devplan.planning.plan_method import plan_method
from devplan.pte import dumps_pte


@dataclass(frozen=True)
class Lowering:
    """What lowers one method: the compile's options, the pass tables it runs, the method's name."""

    options: CompileOptions
    pipeline: Pipeline
    name: str = "forward"

    @property
    def own(self) -> tuple[Backend, ...]:
        """The backends devplan lowers itself (ET12 payloads), in the order they take ops."""
        return tuple(d for d in self.options.delegates if isinstance(d, Backend))


def after_fold(done: Folded, lowering: Lowering, stage: Stages) -> tuple[PlannedMethod, dict[str, Any]]:
    """The folded graph through the rest of the graph stages and its delegates' payloads to its
    plan; with what folding did and what the program then stores."""
    low = done.program
    for pass_name, graph_pass in lowering.pipeline.after_fold:
        low = stage(pass_name, graph_pass, low)
    folding = {**done.folding, "stored": stored_size(read_constants(low))}
    if lowering.options.delegates:
        low = stage("partition", partition, low, lowering.own)
        # the recursion: each delegate's group is lowered by the program's own stages, as a payload
        payloads = {group.call: _payload(group, lowering, stage.within(group.call)) for group in delegate_groups(low)}
        low = replace(low, payloads={**low.payloads, **payloads})
    return lower_method(low, lowering, stage), folding


def _payload(group: Group, lowering: Lowering, stage: Stages) -> Payload:
    """A delegate's group through lower_method on its backend's device, then emitted and
    serialized as a program of its own; its stages named after its call (delegate_0.build)."""
    try:
        program = stage("device results", results_on_device, group.program, group.device)
        planned = lower_method(program, lowering, stage, Role.payload_on(group.device))
        data = stage(
            "serialize", dumps_pte, *stage("emit", to_program, planned, source=lowering.options.source), share=True
        )
    except DevplanError as error:
        raise group.refused(error) from None
    return group.payload(planned, data)


def lower_method(low: Lowered, lowering: Lowering, stage: Stages, role: Role = PROGRAM) -> PlannedMethod:
    """A Lowered graph to its planned method, for the program and, by `role`, for a delegate's
    payload: every tensor it computes on its backend's device, its inputs and outputs its caller's."""
    options = lowering.options
    method = stage("build", build_method, low, lowering.name, device_io=options.device_io and not role.payload)
    for pass_name, method_pass in lowering.pipeline.method_passes_for(options, role):
        method = stage(pass_name, method_pass, method)
    return stage(
        "plan",
        plan_method,
        method,
        alignment=options.alignment,
        algorithm=options.planner,
        budgets=() if role.payload else options.budgets,
        home=role.home,
        borrowed_io=role.payload,
    )
