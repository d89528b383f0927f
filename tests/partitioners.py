"""ExecuTorch partitioners and a backend written for the tests of `--partitioner`: each takes
ops the way a third-party backend's would, or misbehaves in one way devplan must refuse.
Importable as `tests.partitioners:NAME` from the repository root (as the CLI's --partitioner
names them)."""

from __future__ import annotations

import operator
import os
import signal
import tempfile
from pathlib import Path

import torch
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.backend.utils import tag_constant_data, tag_mutated_buffer

from testbed.processes import children, meet


def _computing(gm: torch.fx.GraphModule):
    return [
        n
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target is not operator.getitem and "add" in str(n.target)
    ]


class AddsTo(Partitioner):
    """Every add op, one partition each, for `backend` (a BackendDetails class name), on
    `target_device` when given (as ExecuTorch's device-aware partitioners say it)."""

    def __init__(self, backend: str = "ConcatBytes", target_device: str | None = None) -> None:
        specs = [CompileSpec("target_device", target_device.encode())] if target_device else []
        super().__init__()
        self.delegation_spec = DelegationSpec(backend, specs)  # the attribute ExecuTorch's own partitioners name

    def partition(self, ep: torch.export.ExportedProgram) -> PartitionResult:
        tags = {}
        for number, node in enumerate(_computing(ep.graph_module)):
            node.meta["delegation_tag"] = f"add{number}"
            tags[f"add{number}"] = self.delegation_spec
        tag_constant_data(ep)
        return PartitionResult(tagged_exported_program=ep, partition_tags=tags)


class Raises(AddsTo):
    def partition(self, ep):
        raise RuntimeError("this partitioner always fails")


class StumblesOnRelu(AddsTo):
    """A partitioner whose check of each op raises on a relu (as a partitioner's may on an op
    its author did not expect) before it takes the adds."""

    def partition(self, ep):
        for node in ep.graph_module.graph.nodes:
            if node.op == "call_function" and "relu" in str(node.target):
                raise ValueError(f"cannot partition {node.target}")
        return super().partition(ep)


class KeepsLinearWhole(AddsTo):
    """Asks ExecuTorch to keep linear whole, then takes only the adds: the linears end up
    neither decomposed nor delegated, which ExecuTorch's lowering refuses."""

    def ops_to_not_decompose(self, ep):
        return [torch.ops.aten.linear.default], None


class NotAResult(AddsTo):
    def partition(self, ep):
        return {"tags": {}}


class EmptyPayload(AddsTo):
    def __init__(self) -> None:
        super().__init__("MakesNothing")


class RaisingBackend(AddsTo):
    def __init__(self) -> None:
        super().__init__("FailsToCompile")


class InProcesses(AddsTo):
    def __init__(self) -> None:
        super().__init__("NamesItsProcess")
        _compiling[:] = os.getpid(), Path(tempfile.mkdtemp(prefix="devplan-test-jobs-"))


class DiesInAWorker(InProcesses):
    def __init__(self) -> None:
        super().__init__()
        self.delegation_spec = DelegationSpec("DiesOutsideTheTest", [])


class TakesState(AddsTo):
    """Tags the adds and the buffers they update, so that the delegate would own state."""

    def partition(self, ep):
        result = super().partition(ep)
        tag_mutated_buffer(ep)
        return result


class ConcatBytes(BackendDetails):
    """A backend whose payload names the ops it was given (nothing runs it: devplan plans and
    writes its delegates, inspect reads them)."""

    @staticmethod
    def preprocess(edge_program, compile_specs):
        ops = [str(n.target) for n in edge_program.graph_module.graph.nodes if n.op == "call_function"]
        return PreprocessResult(processed_bytes=" ".join(ops).encode())


class MakesNothing(BackendDetails):
    @staticmethod
    def preprocess(edge_program, compile_specs):
        return PreprocessResult(processed_bytes=b"")


class FailsToCompile(BackendDetails):
    @staticmethod
    def preprocess(edge_program, compile_specs):
        raise ValueError("this backend cannot compile anything")


class NamesItsProcess(BackendDetails):
    """A payload naming the process whose preprocess made it: which partitions --jobs gave to
    other processes."""

    @staticmethod
    def preprocess(edge_program, compile_specs):
        _meet()
        return PreprocessResult(processed_bytes=str(os.getpid()).encode())


class DiesOutsideTheTest(BackendDetails):
    """A preprocess that kills any process but the compile's own: a --jobs worker crashing."""

    @staticmethod
    def preprocess(edge_program, compile_specs):
        _meet()
        if os.getpid() != _compiling[0]:
            os.kill(os.getpid(), signal.SIGKILL)
        return PreprocessResult(processed_bytes=b"made in the compiling process")


# The compiling process (the one that made the partitioner; --jobs workers fork from it) and a
# folder where each process of the compile marks itself on its first preprocess
_compiling: list = [None, None]


def _meet() -> None:
    """On a process's first preprocess, wait until the compile's other process has taken a
    partition too, where there is one (a --jobs 2 worker, or this process's worker)."""
    maker, room = _compiling
    if os.getpid() != maker or children():
        meet(room, 2)
