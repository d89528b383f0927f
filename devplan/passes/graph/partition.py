"""Partitioning: the ops a backend takes are grouped, by torch's CapabilityBasedPartitioner
(which never makes a group that would form a cycle), into submodules, each called once
from the graph. build turns each call into a delegate that runs on the backend's device."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Sequence

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import create_op_support

from devplan.backend import Backend
from devplan.ir.lowered import Lowered


def partition(low: Lowered, backends: Sequence[Backend]) -> Lowered:
    """Each backend in turn takes the ops it supports among those no earlier one took. Every
    call of a group is a `call_module` node named delegate_N (in graph order); the result's
    `backends` says which backend runs each (and `payloads` keeps those ExecuTorch's
    backends compiled)."""
    gm, taken = low.gm, dict(low.backends)
    for round, backend in enumerate(backends):
        support = create_op_support(functools.partial(_takes, backend))
        partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
        gm = partitioner.fuse_partitions(partitioner.propose_partitions())
        fresh = [node for node in gm.graph.nodes if node.op == "call_module" and node.target not in taken]
        # torch names every round's groups fused_<id> afresh
        taken |= {name: backend for name in _rename(gm, fresh, f"round{round}")}
    calls = [node for node in gm.graph.nodes if node.op == "call_module"]
    was = [node.target for node in calls]
    named = _rename(gm, calls, "delegate")
    gm.recompile()
    return replace(
        low,
        gm=gm,
        backends={new: taken[old] for old, new in zip(was, named)},
        payloads={new: low.payloads[old] for old, new in zip(was, named) if old in low.payloads},
    )


def _takes(backend: Backend, submodules: object, node: torch.fx.Node) -> bool:
    return backend.takes(node)


def _rename(gm: torch.fx.GraphModule, calls: list[torch.fx.Node], prefix: str) -> list[str]:
    modules = {node: gm.get_submodule(str(node.target)) for node in calls}  # a call_module's target: its name
    for node in calls:
        delattr(gm, str(node.target))
    names = [f"{prefix}_{number}" for number in range(len(calls))]
    for node, name in zip(calls, names):
        node.target = name
        gm.add_submodule(name, modules[node])
    return names
