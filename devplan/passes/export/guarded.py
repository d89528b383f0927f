"""A user's ExecuTorch partitioner, watched while ExecuTorch's lowering runs it
(devplan/passes/export/backends.py): which one is running when something fails, its result checked
before it is trusted, the ops of devplan's earlier backends kept from it, and the ops its
backend refused (devplan/passes/export/refusals.py) hidden from it, so that the lowering run again
leaves them on portable kernels."""

from __future__ import annotations

import contextlib
import functools
import operator
from typing import Any, Callable, Iterator

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import create_op_support

from devplan.backend import Backend
from devplan.errors import DevplanError, first_line
from devplan.passes.export.refusals import Fallback, Refused, failing_node, left_out, op_name


class Guarded:
    """A user's partitioner, watched. `refused` (backend id, else the partitioner's label ->
    ops) is shared by every partitioner of one lowering and grows between its runs; one that
    failed with no op to blame is `dropped`: it takes nothing, so every op stays portable."""

    def __init__(
        self,
        partitioner: Any,
        label: str,
        earlier: tuple[Backend, ...],
        refused: dict[str, frozenset[str]],
        dropped: bool = False,
    ) -> None:
        self.inner, self.label, self.earlier, self.running, self.partitioned = partitioner, label, earlier, False, False
        self.refused, self.dropped = refused, dropped
        self.partitions: dict[str, tuple[str, str]] = {}  # tag -> (backend id, its first node)
        # what its refusals are kept under: the backend its partitions go to, where it says
        spec = getattr(partitioner, "delegation_spec", None)
        self.backend: str = getattr(spec, "backend_id", None) or label

    def __getattr__(self, name: str) -> Any:  # the rest of ExecuTorch's Partitioner interface, as the user's has it
        return getattr(self.inner, name)

    def ops_to_not_decompose(self, ep: torch.export.ExportedProgram) -> tuple[list[Any], Callable[..., bool] | None]:
        """The partitioner's ops kept whole, and those of devplan's earlier backends: they stay
        for those backends, so once partitioning is done ExecuTorch must not ask that this
        partitioner took them. None of an op a backend refused: it is decomposed as the
        portable kernels need."""
        keep = None if self.dropped else getattr(self.inner, "ops_to_not_decompose", None)
        ops, check = keep(ep) if keep else ([], None)
        gone = frozenset().union(*self.refused.values())
        ops = [op for op in ops if str(op) not in gone]
        mine = [
            getattr(packet, overload)
            for b in self.earlier
            for name in sorted(b.ops or ())
            for packet in [getattr(torch.ops.aten, name.removeprefix("aten::"))]
            for overload in packet.overloads()
            if not getattr(packet, overload)._schema.is_mutable
        ]
        if not self.earlier and check is None:
            return ops, None  # nothing to ask of a node: each refused op is already off the list

        def supported(node: torch.fx.Node) -> bool:
            if any(b.takes(node) for b in self.earlier):
                return not self.partitioned
            if node.op == "call_function" and op_name(node) in self.refused.get(self.backend, ()):
                return False  # never asked again of an op it failed on
            return check(node) if check else True

        return [*ops, *(op for op in mine if op not in ops)], supported

    def __call__(self, ep: torch.export.ExportedProgram) -> Any:
        return self.partition(ep)

    def partition(self, ep: torch.export.ExportedProgram) -> Any:
        from executorch.exir.backend.partitioner import PartitionResult

        self.running = True
        if self.dropped:
            result = PartitionResult(tagged_exported_program=ep, partition_tags={})
        else:
            try:
                with _hidden(ep.graph_module, self.refused.get(self.backend, frozenset())):
                    result = self.inner.partition(ep)
            except Exception as error:  # noqa: BLE001 - the op it failed on (else all it was offered) stays portable
                raise self.failed(error, ep, f"{self.label}: the partitioner failed: {first_line(error)}") from None
        if not isinstance(result, PartitionResult):
            raise DevplanError(
                f"{self.label}: the partitioner returned a {type(result).__name__}, not a PartitionResult"
            )
        _refuse_mutations(result, self.label)
        if self.earlier or self.refused:
            _give_back(result, functools.partial(left_out, self.earlier, self.refused, result.partition_tags))
        for node in result.tagged_exported_program.graph_module.graph.nodes:
            tag = node.meta.get("delegation_tag")
            if tag in result.partition_tags and tag not in self.partitions:
                self.partitions[tag] = (result.partition_tags[tag].backend_id, node.name)
        self.running, self.partitioned = False, True
        return result

    def failed(self, error: BaseException, ep: torch.export.ExportedProgram, message: str | None = None) -> Refused:
        """What this partitioner's failure leaves on portable kernels: the op of the node it
        failed on, else (dropping the partitioner) every op of the program it was offered."""
        node = failing_node(error)
        why = f"its partitioner failed: {first_line(error)}" if self.running else first_line(error)
        if node is not None:
            return Refused([Fallback(self.backend, (op_name(node),), why)], message, drop=None)
        offered = sorted({op_name(n) for n in ep.graph.nodes if n.op == "call_function"} - {str(operator.getitem)})
        return Refused([Fallback(self.backend, tuple(offered) or ("no ops",), why)], message, drop=self.label)


@contextlib.contextmanager
def _hidden(gm: torch.fx.GraphModule, ops: frozenset[str]) -> Iterator[None]:
    """The nodes of `ops` shown to a partitioner as an op no partitioner knows, so that one
    which failed on such a node is not asked about it again; their own ops back afterwards."""
    nodes = {n: n.target for n in gm.graph.nodes if n.op == "call_function" and op_name(n) in ops}
    for node in nodes:
        node.target = _refused_op
    try:
        yield
    finally:
        for node, target in nodes.items():
            node.target = target


def _refused_op(*args: object, **kwargs: object) -> None:
    """Stands for an op its backend refused while that backend's partitioner runs (never called)."""
    raise AssertionError("an op hidden from a partitioner was called")


def culprit(error: BaseException, guarded: list[Guarded]) -> Guarded | None:
    """The partitioner a failure of ExecuTorch's lowering outside any preprocess belongs to:
    the innermost frame's that holds one (its own methods' `self`, the lowering's loop over
    partitioners), else the one running, else the only one."""
    found, tb = None, error.__traceback__
    while tb is not None:
        held = [g for g in guarded if any(value is g for value in tb.tb_frame.f_locals.values())]
        found = held[0] if held else found
        tb = tb.tb_next
    running = [g for g in guarded if g.running]
    return found or (running[0] if running else None) or (guarded[0] if len(guarded) == 1 else None)


def blame(guarded: list[Guarded]) -> str:
    """Who failed: the partitioner that was running, else the backends compiling the
    partitions the partitioners made (each named with its first node)."""
    running = [g.label for g in guarded if g.running]
    if running:
        return running[0]
    parts = [
        f"{g.label} (backend {backend}, partition {tag} from node {node})"
        for g in guarded
        for tag, (backend, node) in list(g.partitions.items())[:1]
    ]
    return "; ".join(parts) or " and ".join(g.label for g in guarded)


def _refuse_mutations(result: Any, label: str) -> None:
    """A foreign delegate holds no state across calls in devplan's programs: a partition that
    takes a buffer the program updates (so that the delegate would own it), or an op that
    writes in place, is refused by that node. A new value it computes is fine: the program
    writes it back, as it does every state update."""
    ep = result.tagged_exported_program
    state = set(ep.graph_signature.buffers_to_mutate.values())
    for node in ep.graph_module.graph.nodes:
        tag = node.meta.get("delegation_tag")
        if tag is None:
            continue
        owned = node.op == "placeholder" and ep.graph_signature.inputs_to_buffers.get(node.name) in state
        writes = isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable
        if owned or writes:
            what = "takes state the program updates" if owned else f"writes in place ({node.target})"
            raise DevplanError(
                f"{label}: partition {tag} crosses a mutation: node {node.name} {what}; a delegate "
                f"must leave state to the program, so leave that node out of the partition"
            )


def _give_back(result: Any, leave: Callable[[torch.fx.Node], bool]) -> None:
    """Untag the nodes `leave` says stay out; what is left of each partition is regrouped
    without cycles (torch's CapabilityBasedPartitioner), each group its own tag."""
    gm = result.tagged_exported_program.graph_module
    kept = {}
    for node in gm.graph.nodes:
        tag = node.meta.get("delegation_tag")
        if tag is None:
            continue
        if leave(node):
            del node.meta["delegation_tag"]
        else:
            kept[node] = tag
    for node in kept:
        del node.meta["delegation_tag"]
    specs = dict(result.partition_tags)
    result.partition_tags.clear()
    for tag in dict.fromkeys(kept.values()):
        support = create_op_support(functools.partial(_tagged, kept, tag))
        for number, part in enumerate(
            CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True).propose_partitions()
        ):
            for node in part.nodes:
                node.meta["delegation_tag"] = f"{tag}_{number}"
            result.partition_tags[f"{tag}_{number}"] = specs[tag]


def _tagged(kept: dict[torch.fx.Node, str], tag: str, submodules: object, node: torch.fx.Node) -> bool:
    """Whether ExecuTorch's partitioner tagged `node` with `tag` (an op support's question)."""
    return kept.get(node) == tag
