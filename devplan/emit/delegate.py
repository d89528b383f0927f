"""Delegate payloads: each group partition() gave a backend is compiled, by devplan's own
pipeline, into an ET12 program whose planned tensors all live on the backend's device. The
runtime's DevplanDelegate backend runs that program, and `devplan inspect` reads it like any
other. The group's weights move into its program; only tensors computed at run time cross.
The payload's buffer is planned again by the calling method, as a window of its own buffer on
that device alive for the call (planning/assign.py)."""
from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import torch
from torch.utils import _pytree as pytree

from devplan.emit.build import build_method
from devplan.emit.program import to_program
from devplan.errors import DevplanError
from devplan.passes import method_passes
from devplan.passes.graph import Lowered
from devplan.planning.assign import plan_method
from devplan.pte import dumps_pte
from devplan.spec import TensorSpec


@dataclass(frozen=True)
class Payload:
    """A delegate call compiled: the ET12 program its backend runs, the argument nodes it
    takes at run time (in the order the payload's method takes them), and the bytes its one
    buffer plans on the backend's device, as planned and at the least any plan could."""

    data: bytes
    inputs: tuple[torch.fx.Node, ...]
    arena: int
    arena_bound: int


def compile_delegates(low: Lowered, *, alignment: int = 16, planner: str = "best", inplace: bool = True,
                      reorder: bool = True, source: bool = True) -> Lowered:
    """Every delegate call's Payload, planned with the same options as the program."""
    payloads = {}
    for node in low.gm.graph.nodes:
        if node.op == "call_module":
            try:
                payloads[node.target] = _payload(low, node, alignment, planner, inplace, reorder, source)
            except DevplanError as error:
                raise DevplanError(f"{node.target} (the ops delegated to {low.backends[node.target].device}): "
                                   f"{error}") from None
    return replace(low, payloads=payloads)


def _payload(low: Lowered, node: torch.fx.Node, alignment: int, planner: str, inplace: bool, reorder: bool,
             source: bool) -> Payload:
    sub = copy.deepcopy(low.gm.get_submodule(node.target))
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    constants, inputs, runtime_args, names = {}, [], [], {}
    for placeholder, arg in zip(placeholders, node.args):
        placeholder.meta.setdefault("val", arg.meta.get("val"))
        if arg.name in low.names:  # a weight that moves into the payload keeps the user's name
            names[placeholder.name] = low.names[arg.name]
        data = (low.constants.get(arg.name) if arg.op == "placeholder"
                else getattr(low.gm, arg.target) if arg.op == "get_attr" else None)
        if data is not None:
            constants[placeholder.name] = data
        else:
            inputs.append(placeholder.name)
            runtime_args.append(arg)
    output = sub.graph.output_node()
    results = output.args[0] if isinstance(output.args[0], (list, tuple)) else (output.args[0],)
    output.args = (tuple(results),)
    sub.recompile()
    in_spec, out_spec = _flat_spec((tuple(inputs), {})), _flat_spec(tuple(results))
    method = build_method(Lowered(sub, constants, {}, tuple(inputs), in_spec, out_spec, names=names))
    device = low.backends[node.target].device
    method = method.with_specs({i: replace(v, device=device) for i, v in enumerate(method.values)
                                if isinstance(v, TensorSpec) and not v.constant})
    for _, run in method_passes(inplace=inplace, reorder=reorder, alignment=alignment, borrowed_io=True):
        method = run(method)
    planned = plan_method(method, alignment=alignment, algorithm=planner, home=device, borrowed_io=True)
    # everything the payload plans is on its one device: one buffer, or none
    return Payload(dumps_pte(*to_program(planned, source=source)), tuple(runtime_args),
                   sum(b.size for b in planned.buffers), sum(b.lower_bound for b in planned.buffers))


def _flat_spec(tree) -> str:
    """The pytree spec of a flat call: the payload's method takes and returns plain tensors."""
    return pytree.treespec_dumps(pytree.tree_structure(pytree.tree_map(lambda _: 0, tree)))
