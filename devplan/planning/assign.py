"""Plan a Method's memory: one buffer per device, an offset for every planned tensor,
checked by the independent verifier before anyone writes it down."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from devplan.errors import DevplanError
from devplan.method import Method
from devplan.planning.lifetimes import lifetimes, storages
from devplan.spec import CPU, Device


@dataclass(frozen=True)
class BufferPlan:
    mem_id: int
    device: Device
    size: int
    lower_bound: int
    tensors: int


@dataclass(frozen=True)
class PlannedMethod:
    method: Method                 # every planned tensor spec has lifetime, mem_id and offset
    buffers: tuple[BufferPlan, ...]
    algorithm: str


def mem_ids(devices) -> dict[Device, int]:
    """mem_id 0 is reserved by the format; the CPU buffer comes first, then other devices in order."""
    return {device: i + 1 for i, device in enumerate(sorted(set(devices), key=lambda d: (d.type != "cpu", d)))}


def plan_method(method: Method, *, alignment: int = 16, algorithm: str = "best",
                budgets: Mapping[str, int] | None = None, home: Device = CPU,
                reserved: Mapping[str, int] | None = None) -> PlannedMethod:
    """`home`: where the method's kernels run (the host; a delegate payload's device).
    `budgets`: bytes per buffer (by mem_id) or per device (all of its buffers together);
    `reserved`: bytes per device that delegates plan there themselves, counted against it."""
    from devplan.planning import Interval, Placed, lower_bound, plan, verify
    from devplan.planning.verify import verify_devices

    verify_devices(method, home)
    alive = lifetimes(method)
    specs = {i: method.values[i] for i in alive}
    ids = mem_ids(spec.device for spec in specs.values()) or {}
    storage, span = storages(method, alive)
    intervals = [Interval(root, specs[root].nbytes, *span[root], group=ids[specs[root].device]) for root in span]
    placement = plan(intervals, alignment=alignment, algorithm=algorithm)
    bounds = lower_bound(intervals, alignment=alignment)
    offset = {i: placement.offsets[storage[i]] + spec.alias_offset for i, spec in specs.items()}
    placed = [Placed(f"value {i}", ids[spec.device], offset[i], spec.nbytes, *alive[i],
                     storage=storage[i], within=spec.alias_offset) for i, spec in specs.items()]
    verify(placed, placement.sizes, alignment)
    if budgets:
        _check_budgets(budgets, ids, reserved or {}, placement.sizes, intervals, alignment)
    planned = {i: replace(spec, lifetime=alive[i], mem_id=ids[spec.device], offset=offset[i])
               for i, spec in specs.items()}
    buffers = tuple(BufferPlan(m, d, placement.sizes.get(m, 0), bounds.get(m, 0),
                               sum(1 for s in planned.values() if s.mem_id == m))
                    for d, m in sorted(ids.items(), key=lambda item: item[1]))
    return PlannedMethod(method.with_specs(planned), buffers, placement.algorithm)


def _check_budgets(budgets: Mapping[str, int], ids: Mapping[Device, int], reserved: Mapping[str, int],
                   sizes: Mapping[int, int], intervals, alignment: int) -> None:
    from devplan.planning import check_budget
    from devplan.planning.budget import budget_key

    named = {str(mem_id): mem_id for mem_id in ids.values()} | {str(d): m for d, m in ids.items()}
    by_id, taken = {}, {}
    for target, nbytes in budgets.items():
        key = budget_key(target)
        if key not in named:
            raise DevplanError(f"--budget {target}: no such buffer in this program; "
                               f"budget one of: {', '.join(sorted(named))}")
        inside = reserved.get(key, 0)
        if inside > nbytes:
            raise DevplanError(f"--budget {target}: the delegates on {key} plan {inside} bytes there themselves, "
                               f"more than the budget of {nbytes} bytes; raise the budget or delegate fewer ops")
        by_id[named[key]], taken[named[key]] = nbytes - inside, inside
    check_budget(sizes, by_id, intervals, alignment, taken)
