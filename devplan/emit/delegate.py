"""Delegate payloads: each group partition() gave a backend is compiled, by devplan's own
pipeline, into an ET12 program whose planned tensors all live on the backend's device. The
runtime's DevplanDelegate backend runs that program, and `devplan inspect` reads it like any
other. The group's weights move into its program; only tensors computed at run time cross."""
from __future__ import annotations

import copy
from dataclasses import replace

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


def compile_delegates(low: Lowered, *, alignment: int = 16, planner: str = "best", inplace: bool = True,
                      reorder: bool = True, source: bool = True) -> Lowered:
    """Store on every delegate call node its payload ('payload'), the argument nodes it takes
    at run time ('delegate_inputs', in the order the payload's method takes them) and the
    bytes it plans on its device ('payload_bytes'). The payloads are planned with the same
    options as the program."""
    for node in low.gm.graph.nodes:
        if node.op == "call_module":
            try:
                node.meta["payload"], node.meta["delegate_inputs"], node.meta["payload_bytes"] = _payload(
                    low, node, alignment, planner, inplace, reorder, source)
            except DevplanError as error:
                raise DevplanError(f"{node.target} (the ops delegated to {node.meta['backend'].device}): {error}") from None
    return low


def reserved_bytes(low: Lowered) -> dict[str, int]:
    """Device -> bytes the delegates' payloads plan there, which a device budget must leave them."""
    reserved: dict[str, int] = {}
    for node in low.gm.graph.nodes:
        if node.op == "call_module":
            device = str(node.meta["backend"].device)
            reserved[device] = reserved.get(device, 0) + node.meta["payload_bytes"]
    return reserved


def _payload(low: Lowered, node: torch.fx.Node, alignment: int, planner: str,
             inplace: bool, reorder: bool, source: bool) -> tuple[bytes, tuple[torch.fx.Node, ...], int]:
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
    device = node.meta["backend"].device
    method = method.with_specs({i: replace(v, device=device) for i, v in enumerate(method.values)
                                if isinstance(v, TensorSpec) and not v.constant})
    for _, run in method_passes(inplace=inplace, reorder=reorder, alignment=alignment):
        method = run(method)
    planned = plan_method(method, alignment=alignment, algorithm=planner, home=device)
    return dumps_pte(*to_program(planned, source=source)), tuple(runtime_args), sum(b.size for b in planned.buffers)


def _flat_spec(tree) -> str:
    """The pytree spec of a flat call: the payload's method takes and returns plain tensors."""
    return pytree.treespec_dumps(pytree.tree_structure(pytree.tree_map(lambda _: 0, tree)))
