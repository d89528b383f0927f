"""Which tensors of a buffer share bytes, found without comparing every pair: a planned buffer
reuses the same offsets for thousands of tensors over time, so pairs that meet in bytes alone
grow with the square of the program (a 10,000-tensor program took 20 s)."""
from __future__ import annotations

from bisect import bisect_left, bisect_right


def meeting(timed: list[dict]):
    """meeting(i): the tensors whose bytes meet tensor i's while both hold them (views, in-place
    results, slices of one storage), found by a sweep over the instructions in which only the
    tensors held at once are compared."""
    order = sorted(range(len(timed)), key=lambda i: timed[i]["held"][0])
    found: dict[int, list[int]] = {i: [] for i in range(len(timed))}
    active: list[int] = []
    for i in order:
        start, (first, last) = timed[i]["offset"], timed[i]["held"]
        end = start + timed[i]["nbytes"]
        active = [j for j in active if timed[j]["held"][1] >= first]
        for j in active:
            if timed[j]["offset"] < end and timed[j]["offset"] + timed[j]["nbytes"] > start:
                found[i].append(j)
                found[j].append(i)
        active.append(i)
    return found.__getitem__


class LatestWrites:
    """For every byte of a buffer, the latest instruction from which a tensor has held it:
    ranges painted with the larger of their old and new instruction."""

    def __init__(self) -> None:
        self.starts: list[int] = []  # disjoint ranges, sorted: starts, ends and instructions
        self.ends: list[int] = []
        self.marks: list[int] = []

    def paint(self, start: int, end: int, mark: int) -> None:
        if start >= end:
            return
        low = bisect_right(self.ends, start)  # the first range ending after start
        high = bisect_left(self.starts, end)  # ranges from low to high meet [start, end)
        pieces: list[tuple[int, int, int]] = []
        cursor = start
        for a, b, m in zip(self.starts[low:high], self.ends[low:high], self.marks[low:high]):
            if a < start:
                pieces.append((a, start, m))
            if cursor < max(a, start):
                pieces.append((cursor, max(a, start), mark))
            pieces.append((max(a, start), min(b, end), max(m, mark)))
            if b > end:
                pieces.append((end, b, m))
            cursor = min(b, end)
        if cursor < end:
            pieces.append((cursor, end, mark))
        self.starts[low:high] = [p[0] for p in pieces]
        self.ends[low:high] = [p[1] for p in pieces]
        self.marks[low:high] = [p[2] for p in pieces]

    def earliest(self, start: int, end: int, default: int) -> int:
        """The earliest of the latest marks over [start, end): from when all its bytes have
        held what they hold; `default` where nothing has written them."""
        low, high = bisect_right(self.ends, start), bisect_left(self.starts, end)
        return min(self.marks[low:high], default=default)
