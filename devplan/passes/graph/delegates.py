"""Delegate payloads: each group partition() gave a backend is a program of its own, which
the driver (compiler/lower.py) lowers by the program's own stages (lower_method) into an ET12 program whose planned tensors all live on the backend's device. The
runtime's DevplanDelegate backend runs that program, and `devplan inspect` reads it like any
other. The group's weights move into its program; only tensors computed at run time cross.
The payload's buffer is planned again by the calling method, as a window of its own buffer on
that device alive for the call (planning/plan_method.py)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Iterator

import torch
from torch.utils import _pytree as pytree

from devplan.errors import DevplanError
from devplan.ir.lowered import Lowered, Payload
from devplan.ir.planned import PlannedMethod
from devplan.spec import Device


@dataclass(frozen=True)
class Group:
    """A delegate call's group of ops, as a program of its own."""

    call: str  # the call_module's target (delegate_0)
    device: Device  # where its backend runs it
    program: Lowered  # its weights its constants, its run-time arguments its inputs
    runtime_args: tuple[torch.fx.Node, ...]  # the caller's nodes for those inputs, in order

    def refused(self, error: DevplanError) -> DevplanError:
        """An error lowering the group, said of the delegate call."""
        return DevplanError(f"{self.call} (the ops delegated to {self.device}): {error}")

    def payload(self, planned: PlannedMethod, data: bytes) -> Payload:
        """The call's Payload: the group's program as planned and serialized."""
        # everything the payload plans is on its one device: one buffer, or none
        return Payload(
            data, self.runtime_args, sum(b.size for b in planned.buffers), sum(b.lower_bound for b in planned.buffers)
        )


def delegate_groups(low: Lowered) -> Iterator[Group]:
    """The delegate calls still without a payload (an ExecuTorch backend's calls come
    compiled already), in graph order."""
    for node in low.gm.graph.nodes:
        if node.op == "call_module" and node.target not in low.payloads:
            program, runtime_args = _group(low, node)
            yield Group(node.target, low.backends[node.target].device, program, runtime_args)


def _group(low: Lowered, node: torch.fx.Node) -> tuple[Lowered, tuple[torch.fx.Node, ...]]:
    """The group a delegate call runs, as a program: its weights are its constants, the
    tensors computed at run time its inputs (the argument nodes, in order), its results a
    flat tuple."""
    sub = copy.deepcopy(low.gm.get_submodule(str(node.target)))  # a call_module's target: its name
    assert isinstance(sub, torch.fx.GraphModule)  # partition() fused each group into one
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    constants, inputs, runtime_args, names = {}, [], [], {}
    for placeholder, arg in zip(placeholders, node.args):
        assert isinstance(arg, torch.fx.Node)  # a fused group's arguments are the nodes it reads
        placeholder.meta.setdefault("val", arg.meta.get("val"))
        if arg.name in low.names:  # a weight that moves into the payload keeps the user's name
            names[placeholder.name] = low.names[arg.name]
        data = (
            low.constants.get(arg.name)
            if arg.op == "placeholder"
            else getattr(low.gm, str(arg.target))
            if arg.op == "get_attr"
            else None
        )
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
    return Lowered(sub, constants, {}, tuple(inputs), in_spec, out_spec, names=names), tuple(runtime_args)


def _flat_spec(tree: object) -> str:
    """The pytree spec of a flat call: the payload's method takes and returns plain tensors."""
    return pytree.treespec_dumps(pytree.tree_structure(pytree.tree_map(lambda _: 0, tree)))
