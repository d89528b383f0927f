"""ExecuTorch as the baseline that tests and benchmarks measure devplan against: its default
lowering of a program, and the bytes its plan takes (testbed may import executorch; devplan
itself never does)."""

from __future__ import annotations

import copy

import torch


def executorch_pte(
    ep: torch.export.ExportedProgram, *, const_prop: bool = False, memory_planning_algo=None, xnnpack: bool = False
) -> bytes:
    """Lower `ep` with ExecuTorch's default portable pipeline (alignment 16, inputs, outputs
    and mutable buffers planned) and return the .pte bytes; `const_prop` turns on its
    constant propagation, `memory_planning_algo` is its MemoryPlanningPass's algorithm (its
    greedy one by default), `xnnpack` lets its XNNPACK partitioner take what it can first.
    Mutated buffers keep their initial values, as devplan's do."""
    (pte,) = executorch_ptes(ep, [memory_planning_algo], const_prop=const_prop, xnnpack=xnnpack)
    return pte


def executorch_ptes(
    ep: torch.export.ExportedProgram, algorithms: list, *, const_prop: bool = False, xnnpack: bool = False
) -> list[bytes]:
    """executorch_pte's program once per memory planning algorithm in `algorithms` (None: its
    greedy one), from one edge lowering (the most of the time), each planned on its own copy."""
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    # Buffer write-back copies a value computed from grad-requiring parameters into the
    # buffer, which autograd rejects outside no_grad.
    with torch.no_grad():
        if xnnpack:
            from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()] if xnnpack else None)
        signature = edge.exported_program().graph_signature
        mutated = set(signature.buffers_to_mutate.values())
        placeholders = [name for name, fqn in signature.inputs_to_buffers.items() if fqn in mutated]
        ptes = []
        for index, algorithm in enumerate(algorithms):
            config = ExecutorchBackendConfig(
                passes=[InitializedMutableBufferPass(placeholders)],
                do_quant_fusion_and_const_prop=const_prop,
                memory_planning_pass=MemoryPlanningPass(memory_planning_algo=algorithm),
            )
            # to_executorch transforms the edge program in place: the last one may take it
            own = edge if index == len(algorithms) - 1 else copy.deepcopy(edge)
            ptes.append(own.to_executorch(config).buffer)
        return ptes


def planned_bytes(pte: bytes) -> int:
    """Bytes of all planned (non-constant) buffers of a program's first method."""
    import devplan

    return int(sum(devplan.read_pte(pte).program.executionPlan[0].nonConstBufferSizes))
