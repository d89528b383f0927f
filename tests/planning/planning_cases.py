"""Shared hypothesis strategies and slow-but-obvious reference code for the planning tests."""

from __future__ import annotations

from hypothesis import strategies as st

from devplan.planning import Interval, Placed, Plan


@st.composite
def interval_sets(draw, max_size: int = 30, groups: tuple[int, ...] = (1, 2, 3)) -> list[Interval]:
    """Random lifetimes, sizes and groups; keys are unique but not in any particular order."""
    count = draw(st.integers(0, max_size))
    keys = draw(st.lists(st.integers(0, 10_000), min_size=count, max_size=count, unique=True))
    intervals = []
    for key in keys:
        first = draw(st.integers(0, 25))
        length = draw(st.one_of(st.integers(0, 3), st.integers(0, 25)))
        size = draw(st.one_of(st.just(0), st.integers(1, 64), st.integers(1, 4096)))
        intervals.append(Interval(key, size, first, first + length, draw(st.sampled_from(groups))))
    return intervals


def align(nbytes: int, alignment: int) -> int:
    return (nbytes + alignment - 1) // alignment * alignment


def placed_from(plan: Plan, intervals: list[Interval], alignment: int) -> list[Placed]:
    """The plan's tensors as the verifier sees them, each holding its aligned size."""
    return [
        Placed(f"value {i.key}", i.group, plan.offsets[i.key], align(i.size, alignment), i.first, i.last)
        for i in intervals
    ]


def brute_force_clash(placed: list[Placed], sizes: dict[int, int], alignment: int) -> bool:
    """True when some tensor is misplaced or two of them collide, by checking every pair."""
    for tensor in placed:
        if tensor.group not in sizes or tensor.offset < 0 or tensor.offset % alignment:
            return True
        if tensor.offset + tensor.size > sizes[tensor.group]:
            return True
    for index, a in enumerate(placed):
        for b in placed[index + 1 :]:
            same_storage = a.storage is not None and a.storage == b.storage
            meet_in_time = a.first <= b.last and b.first <= a.last
            share_bytes = max(a.offset, b.offset) < min(a.offset + a.size, b.offset + b.size)
            if a.group == b.group and meet_in_time and share_bytes and not same_storage:
                return True
    return False


def reference_greedy(intervals: list[Interval], alignment: int, order_key, best_fit: bool) -> dict[int, int]:
    """Textbook greedy placement: for each tensor in order, look at every already placed
    tensor of its group whose lifetime meets its own and take the best-fitting (or first)
    gap between them, counting the gap below the lowest one; past them all if none fits."""
    offsets: dict[int, int] = {}
    placed: list[Interval] = []
    for interval in sorted(intervals, key=order_key):
        size = align(interval.size, alignment)
        if size == 0:
            offsets[interval.key] = 0
            continue
        ranges = sorted(
            (offsets[p.key], offsets[p.key] + align(p.size, alignment))
            for p in placed
            if p.group == interval.group and p.first <= interval.last and interval.first <= p.last
        )
        choice, choice_gap, reach = None, None, 0
        for start, end in ranges:
            gap = start - reach
            if gap >= size and (choice is None or (best_fit and gap < choice_gap)):
                choice, choice_gap = reach, gap
            reach = max(reach, end)
        offsets[interval.key] = reach if choice is None else choice
        placed.append(interval)
    return offsets
