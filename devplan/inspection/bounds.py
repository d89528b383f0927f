"""The bounds the inspection document states of a method's buffers, worked out from where
the program put each tensor and when it holds its bytes: each buffer's peak (the bytes in use
at its busiest instruction) and lower bound (the least any placement of its storages could
take, at the alignment the plan kept), and per device what is alive there at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Any, Iterable, Mapping, TypedDict

from devplan.documents import DeviceTotal, InspectedBuffer, InspectedDelegate, InspectedTensor
from devplan.inspection.overlap import LatestWrites, busiest, storages
from devplan.inspection.placed import held_of, lifetime_of, offset_of
from devplan.planning.bounds import lower_bound
from devplan.planning.model import MAX_ALIGNMENT, Interval, align_up


class HeldWindow(TypedDict):
    """A delegate's window as its buffer holds it: the payload's bytes at the window's offset,
    from the delegate's first call to its last; `bound` is the payload's own lower bound."""

    mem_id: int
    offset: int
    nbytes: int
    bound: int
    held: list[int]


@dataclass(frozen=True)
class BufferBounds:
    peak: int
    peak_instruction: int | None
    lower_bound: int
    exact_bound: int  # unaligned: bytes that must be apart at some instruction
    live: tuple[Interval, ...]  # the storages' intervals at the bound's alignment, for the device's bound


def buffer_bounds(
    timed: list[InspectedTensor],
    size: int,
    windows: list[HeldWindow],
    written: AbstractSet[int],
    read: AbstractSet[int],
) -> BufferBounds:
    """The bounds of one buffer of `size` bytes holding the tensors `timed` (those with a
    lifetime; a view's `held` is moved back to when its bytes were written) and the delegate
    windows `windows` (their payloads' buffers, alive while they run)."""
    _hold_views(timed, written, read)
    sharing = storages(timed)
    peak, peak_instruction = 0, None
    # Bytes in use only grow where a tensor starts holding bytes, so the busiest instruction
    # is one of those; one sweep over them adds and removes each tensor's bytes once.
    held: list[Mapping[str, Any]] = [*timed, *windows]
    for at, in_use in busiest(held):
        if in_use > peak:
            peak, peak_instruction = in_use, at
    bound, live, exact = _lower_bound(timed, sharing, size, windows)
    return BufferBounds(peak, peak_instruction, bound, exact, live)


def _lower_bound(
    timed: list[InspectedTensor], sharing: list[int], size: int, windows: list[HeldWindow]
) -> tuple[int, tuple[Interval, ...], int]:
    """The planner's lower bound (aligned bytes alive at the busiest instruction) for the
    storages this buffer holds, inferred from where tensors sit, and each delegate window at
    its payload's own bound while the delegate runs. Tensors that share bytes while both hold
    them are one storage (a view, an in-place result, a slice of a larger tensor); a storage
    counts the bytes it spans for as long as any member holds them, which no placement of
    those storages beats. The alignment is the one the plan kept: the largest power of two
    up to 4096 dividing every storage's offset whose bound the buffer meets (a program
    planned with --alignment 256 is measured at 256, not at 16). Returns the bound, the
    intervals at that alignment, and the bound unaligned."""

    pools: dict[int, list[int]] = {}  # one per storage, first met first
    for i, t in enumerate(timed):
        start, end, (first, last) = offset_of(t), offset_of(t) + t["nbytes"], held_of(t)
        pool = pools.setdefault(sharing[i], [start, end, first, last])
        pool[:] = [min(pool[0], start), max(pool[1], end), min(pool[2], first), max(pool[3], last)]
    spans = [(start, end - start, first, last) for start, end, first, last in pools.values()]
    spans += [(w["offset"], w["bound"], w["held"][0], w["held"][1]) for w in windows]
    alignment = MAX_ALIGNMENT
    while alignment > 1 and any(start % alignment for start, *_ in spans):
        alignment //= 2

    def at(alignment: int) -> list[Interval]:
        return [
            Interval(key, align_up(nbytes, alignment), first, last)
            for key, (_, nbytes, first, last) in enumerate(spans)
        ]

    bound = lower_bound(at(alignment), alignment=1).get(1, 0)
    while alignment > 1 and bound > size:
        alignment //= 2
        bound = lower_bound(at(alignment), alignment=1).get(1, 0)
    # unaligned, the bound is bytes that must be apart at some instruction: a peak below it
    # means storages alive at once (a delegate's window among them) share bytes
    return bound, tuple(at(alignment)), lower_bound(at(1), alignment=1).get(1, 0)


def device_bounds(
    buffers: list[InspectedBuffer], live: list[tuple[Interval, ...]], delegates: list[InspectedDelegate]
) -> list[DeviceTotal]:
    """Per device: the bytes all the method's buffers there take, its delegates' own buffers
    (those not in a window) included, since a runtime holds them all at once; and the device's
    lower bound, the most bytes alive there at any instruction, a delegate's buffers counted
    (at its payload's bound) while it runs."""

    totals: dict[str, dict[str, Any]] = {}
    alive: dict[str, list[Interval]] = {}  # device -> what its buffers and delegates hold, and when

    def add(device: str, size: int, intervals: Iterable[Interval]) -> None:
        total = totals.setdefault(device, {"device": device, "buffers": 0, "size": 0})
        total["buffers"] += 1
        total["size"] += size
        alive.setdefault(device, []).extend(intervals)

    for b, intervals in zip(buffers, live):
        add(b["device"], b["size"], intervals)
    for d in delegates:
        if d["window"] is not None:
            continue
        for inner in d["payload_buffers"] or ():
            add(inner["device"], inner["size"], [Interval(0, inner["lower_bound"], call, call) for call in d["calls"]])
    rows: list[DeviceTotal] = []
    for device, total in sorted(totals.items(), key=lambda item: (item[0] != "cpu", item[0])):
        keyed = [Interval(key, i.size, i.first, i.last) for key, i in enumerate(alive[device])]
        bound = lower_bound(keyed, alignment=1).get(1, 0)
        rows.append({"device": device, "buffers": total["buffers"], "size": total["size"], "lower_bound": bound})
    return rows


def _hold_views(timed: list[InspectedTensor], written: AbstractSet[int], read: AbstractSet[int]) -> None:
    """A view (a tensor no instruction writes) holds its bytes from when they were last written:
    each byte holds what the latest tensor over it that started before the view's first use
    put there, and the view needs them all. An instruction reads its arguments before it
    writes; a view no instruction reads (an output the caller reads after the run) sees the
    writes of its first instruction too."""
    latest = LatestWrites()
    order = sorted(range(len(timed)), key=lambda i: held_of(timed[i])[0])
    painted = 0
    for i in sorted(range(len(timed)), key=lambda i: lifetime_of(timed[i])[0]):
        t = timed[i]
        if t["value"] in written:
            continue
        first = held_of(t)[0]
        before = first if t["value"] in read else first + 1
        while painted < len(order) and held_of(timed[order[painted]])[0] < before:
            j = order[painted]
            if timed[j]["value"] in written:
                latest.paint(offset_of(timed[j]), offset_of(timed[j]) + timed[j]["nbytes"], held_of(timed[j])[0])
            painted += 1
        held_of(t)[0] = latest.earliest(offset_of(t), offset_of(t) + t["nbytes"], first)
        latest.paint(offset_of(t), offset_of(t) + t["nbytes"], held_of(t)[0])
