"""Partitioning: the ops a backend takes are grouped, by torch's CapabilityBasedPartitioner
(which never makes a group that would form a cycle), into submodules, each called once
from the graph. build turns each call into a delegate that runs on the backend's device."""
from __future__ import annotations

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
        support = create_op_support(lambda submodules, node, backend=backend: backend.takes(node))
        partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
        gm = partitioner.fuse_partitions(partitioner.propose_partitions())
        fresh = [node for node in gm.graph.nodes if node.op == "call_module" and node.target not in taken]
        # torch names every round's groups fused_<id> afresh
        taken |= {name: backend for name in _rename(gm, fresh, f"round{round}")}
    calls = [node for node in gm.graph.nodes if node.op == "call_module"]
    was = [node.target for node in calls]
    named = _rename(gm, calls, "delegate")
    gm.recompile()
    return replace(low, gm=gm, backends={new: taken[old] for old, new in zip(was, named)},
                   payloads={new: low.payloads[old] for old, new in zip(was, named) if old in low.payloads})


def _rename(gm: torch.fx.GraphModule, calls: list[torch.fx.Node], prefix: str) -> list[str]:
    modules = {node: gm.get_submodule(node.target) for node in calls}
    for node in calls:
        delattr(gm, node.target)
    for number, node in enumerate(calls):
        node.target = f"{prefix}_{number}"
        gm.add_submodule(node.target, modules[node])
    return [node.target for node in calls]
