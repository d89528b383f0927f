"""devplan's memory planner inside ExecuTorch's own pipeline: an algorithm for ExecuTorch's
MemoryPlanningPass, so that an ExecuTorch user's program, lowered their way, is placed by
devplan's algorithms and checked by devplan's verifier.

    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass
    from devplan.executorch import memory_planning_algo

    edge.to_executorch(ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(memory_planning_algo=memory_planning_algo)))

ExecuTorch 1.5.1's pass (exir/memory_planning.py, apply_algo) gives the algorithm each device's
tensor specs with their lifetimes (first and last node, both inclusive), once per graph and per
control-flow submodule, and takes back the buffer sizes (entry 0, the constants', unused), the
algorithm having set each spec's mem_id, mem_offset and mem_obj_id. The specs are read and
written by their attributes; ExecuTorch's own greedy is imported only when called, inside its
pass, to hold "best" to never planning more than ExecuTorch's default."""

from __future__ import annotations

from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from devplan.planning import Interval, Placed, plan, verify
from devplan.planning.model import align_up


def memory_planning_algo(
    alignment: int,
    specs: Iterable[Any],
    graph_module: Any,
    graph_signature: Any = None,
    extra_padding: int = 0,
    *,
    algorithm: str = "best",
) -> list[int]:
    """Place `specs` (ExecuTorch TensorSpecs) with devplan's `algorithm` (devplan.planning.ALGORITHMS;
    "best": the smallest of its greedy orders and its hill climb per buffer, or ExecuTorch's own
    greedy placement where that takes fewer bytes in all), verify the plan, set
    each spec's mem_id, mem_offset and mem_obj_id, and return the buffer sizes as ExecuTorch's
    greedy algorithm does: [0, size of buffer 1, ...], each used buffer `extra_padding` bytes
    longer (ExecuTorch's 64 for XNNPACK's reads past a tensor's end). A spec with a storage_base
    (an in-place view ExecuTorch placed inside another) sits at its offset inside its base.
    `graph_signature` is unused: the pass has already chosen the specs it plans."""
    specs = list(specs)
    for spec in specs:
        spec.realign(alignment)  # its allocated_memory, rounded up to the alignment
    # where each buffer starts: after what its control-flow submodules hold (planned first),
    # at the alignment (ExecuTorch's greedy starts right there, aligned or not)
    starts = [align_up(size, alignment) for size in getattr(graph_module, "input_mem_buffer_sizes", None) or []]
    roots = [spec for spec in specs if spec.storage_base is None]
    intervals = [
        Interval(key, spec.allocated_memory, spec.lifetime[0], spec.lifetime[1], spec.mem_id or 1)
        for key, spec in enumerate(roots)
    ]
    placement = plan(intervals, alignment, algorithm)
    for key, spec in enumerate(roots):
        spec.mem_id, spec.mem_obj_id = intervals[key].group, key
        spec.mem_offset = _start(starts, spec.mem_id) + placement.offsets[key]
    for spec in specs:
        if spec.storage_base is not None:
            base, within = _root(spec)
            spec.mem_id, spec.mem_obj_id, spec.mem_offset = base.mem_id, base.mem_obj_id, base.mem_offset + within
    sizes = [0] * (max((interval.group for interval in intervals), default=1) + 1)
    for group, size in placement.sizes.items():
        sizes[group] = _start(starts, group) + size + extra_padding
    _verify(specs, roots, sizes, alignment)
    if algorithm == "best":
        sizes = _executorch_if_smaller(alignment, specs, roots, sizes, starts, extra_padding)
    return sizes


def _executorch_if_smaller(
    alignment: int, specs: list[Any], roots: list[Any], sizes: list[int], starts: list[int], extra_padding: int
) -> list[int]:
    """ExecuTorch's greedy placement of `specs` when it takes fewer bytes than devplan's (`sizes`,
    already written to the specs), verified as devplan's is; else `sizes`. Its greedy (largest
    first, each into the first shared object with room) sometimes packs tighter than devplan's
    orders and climb, and the default it replaces is that greedy, so "best" never plans more.
    It is given the buffers' aligned starts, so that the two are compared on the same starts."""
    from executorch.exir.memory_planning import greedy

    theirs = greedy(alignment, specs, SimpleNamespace(input_mem_buffer_sizes=starts), None, extra_padding)
    if sum(theirs.bufsizes) >= sum(sizes):
        return sizes
    for spec, placed in theirs.spec_dict.items():
        spec.mem_id, spec.mem_offset, spec.mem_obj_id = placed.mem_id, placed.mem_offset, placed.mem_obj_id
    _verify(specs, roots, theirs.bufsizes, alignment)
    return list(theirs.bufsizes)


def _start(starts: list[int], group: int) -> int:
    return starts[group] if group < len(starts) else 0


def _root(spec: Any) -> tuple[Any, int]:
    """The spec whose storage `spec` lies in, and where in it (ExecuTorch chains views of views)."""
    within = 0
    while spec.storage_base is not None:
        within += spec.storage_base_offset
        spec = spec.storage_base
    return spec, within


def _verify(specs: list[Any], roots: list[Any], sizes: list[int], alignment: int) -> None:
    """devplan's verifier over the plan as ExecuTorch will write it: every tensor inside its
    buffer, aligned, and no two tensors of different storages sharing a byte while both live."""
    storage = {id(spec): key for key, spec in enumerate(roots)}
    placed = [
        Placed(
            name=f"tensor of {spec.allocated_memory} bytes alive {spec.lifetime[0]}..{spec.lifetime[1]}",
            group=spec.mem_id,
            offset=spec.mem_offset,
            size=spec.allocated_memory,
            first=spec.lifetime[0],
            last=spec.lifetime[1],
            storage=storage[id(_root(spec)[0])],
            within=_root(spec)[1],
        )
        for spec in specs
    ]
    verify(placed, dict(enumerate(sizes)), alignment)
