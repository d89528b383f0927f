"""Plan a Method's memory: one buffer per device, an offset for every planned tensor,
checked by the independent verifier before anyone writes it down."""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping, Sequence

from devplan.errors import DevplanError
from devplan.ir.method import Method
from devplan.ir.planned import BufferPlan, PlannedMethod
from devplan.planning.bounds import lower_bound
from devplan.planning.budget import BACKENDS, budget_key, check_budget
from devplan.planning.lifetimes import lifetimes, storages
from devplan.planning.model import DEFAULT_ALIGNMENT, Interval, align_up, buffer_alignment
from devplan.planning.planner import plan
from devplan.planning.verify import Placed, verify, verify_devices
from devplan.spec import CPU, Device, TensorSpec


def mem_ids(devices: Iterable[Device]) -> dict[Device, int]:
    """mem_id 0 is reserved by the format; the CPU buffer comes first, then other devices in order."""
    return {device: i + 1 for i, device in enumerate(sorted(set(devices), key=lambda d: (d.type != "cpu", d)))}


def plan_method(
    method: Method,
    *,
    alignment: int | None = None,
    algorithm: str = "best",
    budgets: Sequence[tuple[str, int]] = (),
    home: Device = CPU,
    borrowed_io: bool = False,
) -> PlannedMethod:
    """`home`: where the method's kernels run (the host; a delegate payload's device).
    `borrowed_io` (a delegate payload): inputs and outputs that are storages of their own are
    left unplanned, because the runtime hands the payload its caller's tensors for them.
    `alignment`: every buffer's; None, each its device's (planning.model.DEVICE_ALIGNMENT).
    `budgets`: (target, bytes) pairs, as CompileOptions holds them: a buffer by mem_id or a
    device (all of its buffers together).
    A delegate's own buffer is planned here too, as a window of the method's buffer on its
    device that is alive while the delegate runs, so delegates that never run at once share
    bytes, and the device's bound counts what is alive there, the running delegate's included."""
    verify_devices(method, home)
    alive = lifetimes(method)
    if borrowed_io:
        alive = {i: span for i, span in alive.items() if i not in _borrowed(method, alive)}
    specs = {i: spec for i in alive if isinstance(spec := method.values[i], TensorSpec)}  # alive: tensors only
    steps: dict[int, list[int]] = {}
    for step, kernel in enumerate(method.kernels):
        if kernel.delegate is not None and method.delegates[kernel.delegate].arena:
            steps.setdefault(kernel.delegate, []).append(step)
    # a window is alive from the delegate's first call to its last (devplan calls each once)
    windows = {
        len(method.values) + d: (method.delegates[d], min(s), max(s)) for d, s in steps.items()
    }  # keys apart from values
    ids = mem_ids([spec.device for spec in specs.values()] + [d.device for d, *_ in windows.values()]) or {}
    aligned = {m: buffer_alignment(d.type, alignment) for d, m in ids.items()}
    floor = alignment or DEFAULT_ALIGNMENT  # what each buffer's alignment is a multiple of
    storage, span = storages(method, alive)
    # sizes rounded to their buffer's alignment, so every offset the planner sums from them is one
    group = {root: ids[specs[root].device] for root in span}
    intervals = [Interval(r, align_up(specs[r].nbytes, aligned[group[r]]), *span[r], group=group[r]) for r in span]
    planned_windows = [
        Interval(key, align_up(d.arena, aligned[ids[d.device]]), first, last, ids[d.device])
        for key, (d, first, last) in windows.items()
    ]
    placement = plan(intervals + planned_windows, alignment=floor, algorithm=algorithm)
    bounds = lower_bound(
        intervals + [replace(w, size=windows[w.key][0].arena_bound) for w in planned_windows], alignment=floor
    )
    offset = {i: placement.offsets[storage[i]] + spec.alias_offset for i, spec in specs.items()}
    placed = [
        Placed(
            f"value {i}",
            ids[spec.device],
            offset[i],
            spec.nbytes,
            *alive[i],
            storage=storage[i],
            within=spec.alias_offset,
        )
        for i, spec in specs.items()
    ]
    names = {key: f"delegate {key - len(method.values)}'s buffer" for key in windows}
    placed += [
        Placed(names[w.key], w.group, placement.offsets[w.key], w.size, w.first, w.last) for w in planned_windows
    ]
    verify(placed, placement.sizes, floor, aligned)
    if budgets:
        _check_budgets(budgets, ids, placement.sizes, intervals + planned_windows, floor, names)
    planned = {
        i: replace(spec, lifetime=alive[i], mem_id=ids[spec.device], offset=offset[i]) for i, spec in specs.items()
    }
    delegates = tuple(
        replace(d, window=(ids[d.device], placement.offsets[len(method.values) + i])) if i in steps else d
        for i, d in enumerate(method.delegates)
    )
    buffers = tuple(
        BufferPlan(m, d, placement.sizes.get(m, 0), bounds.get(m, 0), sum(1 for s in planned.values() if s.mem_id == m))
        for d, m in sorted(ids.items(), key=lambda item: item[1])
    )
    return PlannedMethod(replace(method.with_specs(planned), delegates=delegates), buffers, placement.algorithm)


def _check_budgets(
    budgets: Sequence[tuple[str, int]],
    ids: Mapping[Device, int],
    sizes: Mapping[int, int],
    intervals: Sequence[Interval],
    alignment: int,
    names: Mapping[int, str],
) -> None:
    named = {str(mem_id): mem_id for mem_id in ids.values()} | {str(d): m for d, m in ids.items()}
    by_id = {}
    for target, nbytes in budgets:
        key = budget_key(target)
        if key.endswith(BACKENDS) and key[: -len(BACKENDS)] in named:
            continue  # with the backends' own memory, checked once every plan is made (compiler/budgets.py)
        if key not in named:
            raise DevplanError(
                f"--budget {target}: no such buffer in this program; budget one of: {', '.join(sorted(named))}"
            )
        by_id[named[key]] = nbytes
    check_budget(
        sizes, by_id, intervals, alignment, names=names, buffers={m: f"buffer {m} ({d})" for d, m in ids.items()}
    )


def _borrowed(method: Method, alive: Mapping[int, tuple[int, int]]) -> set[int]:
    """A payload's inputs and outputs that its caller's tensors can stand in for: storages of
    their own that nothing else shares (a result written over an input, a view of one, an
    output that is also an input keep their planned bytes, and the runtime copies)."""
    storage, _ = storages(method, alive)
    shared = {root for i, root in storage.items() if i != root}
    io = [*method.inputs, *method.outputs]
    return {i for i in io if i in storage and storage[i] == i and i not in shared and io.count(i) == 1}
