"""`compile --etrecord FILE`: ExecuTorch's ETRecord for the program devplan wrote (the
`devplan[executorch]` extra), so that ExecuTorch's `Inspector` maps the events of an ETDump
(`devplan run --executorch --etdump`) to the model's ops, modules and source lines, and its
`calculate_numeric_gap` compares each instruction's output with the export's.

An ETRecord ties three things together by debug handles: a graph whose nodes carry them (for
ExecuTorch, its edge program; here the export devplan compiled, whose ATen nodes are the ops its
instructions were lowered from), a map from each instruction's index to the handles of the
nodes it computes, and the inputs that graph is run on to compare outputs. Each node of the
export gets a handle of its own; an instruction names its node through `Kernel.origin` (a
decomposed op's instructions all name the node they came from, so the last of them is compared
with the node's output, as ExecuTorch does); a call of an ExecuTorch backend's delegate names
the nodes of the module and op its payload's nodes were made from (`Delegate.handles`)."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence

import torch

from devplan.errors import DevplanError
from devplan.extras import import_module
from devplan.files import write_atomic
from devplan.gate.load import load
from devplan.ir.planned import PlannedMethod
from devplan.pte import read_pte
from devplan.runtime.executor import method_view, sample_inputs

HANDLE = "debug_handle"  # the node meta key ExecuTorch's Inspector reads handles from
FORWARD = "forward"  # the one method Inspector reads an ETRecord's maps for


def require_etrecord() -> None:
    """Refuse --etrecord in one line before any work is done when the extra is missing."""
    import_module("executorch.devtools.etrecord", "--etrecord")


def write_etrecord(
    path: str | os.PathLike[str],
    model: str | os.PathLike[str] | torch.export.ExportedProgram,
    methods: Sequence[PlannedMethod],
    program: str | os.PathLike[str] | bytes,
) -> None:
    """Write the ETRecord of `program` (the .pte written, or its bytes) compiled from `model`
    (forward's .pt2 or ExportedProgram) with `methods`' plans. Its representative inputs are the
    ones `devplan run --executorch` makes by default (seed 0), so a run with them is what
    `calculate_numeric_gap` compares."""
    etrecord = import_module("executorch.devtools.etrecord", "--etrecord")
    ep = load(model) if isinstance(model, (str, os.PathLike)) else model
    forward = next(planned for planned in methods if planned.method.name == FORWARD)
    inputs = sample_inputs(method_view(read_pte(program), FORWARD), 0)
    nodes = [node for node in ep.graph.nodes if node.op == "call_function"]
    handles = {node.name: at for at, node in enumerate(nodes, start=1)}
    by_instruction, delegates = instruction_handles(forward, nodes, handles)
    record = etrecord.ETRecord(
        edge_dialect_program=ep,
        _debug_handle_map={FORWARD: by_instruction},
        _delegate_map={FORWARD: delegates},
        _instruction_id_to_num_outs_map={FORWARD: {}},
        _representative_inputs=[tuple(inputs)],
    )
    if not by_instruction:
        raise DevplanError(f"--etrecord {path}: no instruction of forward came from a node of the export")
    before = {node: node.meta.get(HANDLE) for node in nodes}
    try:  # the handles are the ETRecord's; an ExportedProgram the caller gave is left as it was
        for node in nodes:
            node.meta[HANDLE] = handles[node.name]
        saved = io.BytesIO()
        record.save(saved)
    finally:
        for node, handle in before.items():
            if handle is None:
                node.meta.pop(HANDLE, None)
            else:
                node.meta[HANDLE] = handle
    write_atomic(path, saved.getvalue())


def instruction_handles(
    planned: PlannedMethod, nodes: list[torch.fx.Node], handles: dict[str, int]
) -> tuple[dict[str, list[int]], dict[str, dict[str, object]]]:
    """(instruction index -> the handles of the nodes it computes, instruction index -> the
    backend of the delegate it calls), keyed by the index's text as ETRecord's JSON has them."""
    by_instruction: dict[str, list[int]] = {}
    delegates: dict[str, dict[str, object]] = {}
    method = planned.method
    for at, kernel in enumerate(method.kernels):
        if kernel.delegate is not None:
            delegate = method.delegates[kernel.delegate]
            found = sorted({h for _, module, _, op in delegate.handles for h in _made_by(nodes, handles, module, op)})
            delegates[str(at)] = {"name": delegate.backend, "delegate_map": {}}
        else:
            found = [handles[kernel.origin]] if kernel.origin in handles else []
        if found:
            by_instruction[str(at)] = found
    return by_instruction, delegates


def _made_by(nodes: list[torch.fx.Node], handles: dict[str, int], module: str, op: str) -> list[int]:
    """The handles of the export's nodes in module `module` that call `op`; of the module's
    nodes when none does (a backend's edge program may have decomposed the op)."""
    inside = [node for node in nodes if _module(node) == module]
    calling = [node for node in inside if str(node.target) == op]
    return [handles[node.name] for node in calling or inside]


def _module(node: torch.fx.Node) -> str:
    stack = list((node.meta.get("nn_module_stack") or {}).values())
    return stack[-1][0] if stack else ""
