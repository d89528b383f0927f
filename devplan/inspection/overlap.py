"""Which tensors of a buffer share bytes, found without comparing every pair: a planned buffer
reuses the same offsets for thousands of tensors over time, so pairs that meet in bytes alone
grow with the square of the program (a 10,000-tensor program took 20 s)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any, Iterable, Iterator, Mapping, Sequence


def storages(timed: Sequence[Mapping[str, Any]]) -> list[int]:
    """For each tensor, a representative of its storage: tensors whose bytes meet while both
    hold them (views, in-place results, slices of one storage), and those they meet in turn,
    share one. Found in n log n by a sweep over the instructions in which each byte range
    remembers the latest tensor over it and until when any tensor held it: the tensors held
    over a byte at once always share a storage, so the latest one stands for them all, and a
    range one tensor covers is looked at once, when the next tensor over it comes. A tensor of
    no bytes meets nothing."""
    parent = list(range(len(timed)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    sized = [i for i, t in enumerate(timed) if t["nbytes"] > 0]
    points = sorted({t["offset"] + edge for i in sized for t in (timed[i],) for edge in (0, t["nbytes"])})
    if len(points) > 1:
        where = {point: index for index, point in enumerate(points)}
        covers = _Covers(len(points) - 1)
        for i in sorted(sized, key=lambda i: timed[i]["held"][0]):
            t = timed[i]
            first, last = t["held"]
            for j in covers.mark(where[t["offset"]], where[t["offset"] + t["nbytes"]], i, first, last):
                parent[find(j)] = find(i)
    return [find(i) for i in range(len(timed))]


class _Covers:
    """Over n byte segments, each segment's latest tensor and the last instruction any tensor
    over it holds it: a segment tree whose nodes keep the largest such instruction below them
    and, where one tensor covers the whole node, that tensor."""

    def __init__(self, n: int) -> None:
        self.n = n
        size = 4 * n
        self.until = [-1] * size  # the largest last instruction in the node
        self.whole = [-1] * size  # the tensor over the whole node, -1 where mixed or none
        self.pending = [-1] * size  # a last instruction not yet passed to the children, with whole

    def _push(self, node: int) -> None:
        if self.pending[node] >= 0:
            for child in (2 * node, 2 * node + 1):
                self.whole[child] = self.whole[node]
                self.until[child] = max(self.until[child], self.pending[node])
                self.pending[child] = max(self.pending[child], self.pending[node])
            self.pending[node] = -1

    def mark(self, low: int, high: int, tensor: int, first: int, last: int) -> set[int]:
        """The tensors over segments [low, high) still held at `first` (one for each run of
        segments a single tensor covers), then `tensor` over them until `last`."""
        met: set[int] = set()
        self._mark(1, 0, self.n, low, high, tensor, first, last, met)
        return met

    def _mark(
        self, node: int, lo: int, hi: int, low: int, high: int, tensor: int, first: int, last: int, met: set[int]
    ) -> None:
        if high <= lo or hi <= low:
            return
        if low <= lo and hi <= high:
            self._held(node, lo, hi, first, met)
            self.whole[node], self.until[node] = tensor, max(self.until[node], last)
            self.pending[node] = max(self.pending[node], last)
            return
        self._push(node)
        middle = (lo + hi) // 2
        self._mark(2 * node, lo, middle, low, high, tensor, first, last, met)
        self._mark(2 * node + 1, middle, hi, low, high, tensor, first, last, met)
        left, right = self.whole[2 * node], self.whole[2 * node + 1]
        self.whole[node] = left if left == right else -1
        self.until[node] = max(self.until[2 * node], self.until[2 * node + 1])

    def _held(self, node: int, lo: int, hi: int, first: int, met: set[int]) -> None:
        if self.until[node] < first:
            return
        if self.whole[node] >= 0:
            met.add(self.whole[node])
            return
        self._push(node)
        middle = (lo + hi) // 2
        self._held(2 * node, lo, middle, first, met)
        self._held(2 * node + 1, middle, hi, first, met)


class Coverage:
    """Bytes covered by a changing set of half-open ranges, aliases counted once: a segment
    tree over the ranges' ends counting the ranges over each node, so adding or removing one
    costs log n and the covered bytes are read at the root."""

    def __init__(self, ranges: Iterable[tuple[int, int]]) -> None:
        self.points = sorted({edge for start, end in ranges if end > start for edge in (start, end)})
        self.where = {point: index for index, point in enumerate(self.points)}
        size = 4 * max(1, len(self.points))
        self.count = [0] * size
        self.length = [0] * size

    @property
    def covered(self) -> int:
        return self.length[1]

    def add(self, start: int, end: int, delta: int = 1) -> None:
        if end > start:
            self._add(1, 0, len(self.points) - 1, self.where[start], self.where[end], delta)

    def remove(self, start: int, end: int) -> None:
        self.add(start, end, -1)

    def _add(self, node: int, lo: int, hi: int, low: int, high: int, delta: int) -> None:
        if high <= lo or hi <= low:
            return
        if low <= lo and hi <= high:
            self.count[node] += delta
        else:
            middle = (lo + hi) // 2
            self._add(2 * node, lo, middle, low, high, delta)
            self._add(2 * node + 1, middle, hi, low, high, delta)
        if self.count[node]:
            self.length[node] = self.points[hi] - self.points[lo]
        elif hi - lo == 1:
            self.length[node] = 0
        else:
            self.length[node] = self.length[2 * node] + self.length[2 * node + 1]


def busiest(held: Sequence[Mapping[str, Any]], steps: Iterable[int] | None = None) -> Iterator[tuple[int, int]]:
    """Bytes in use (aliases counted once) by tensors holding [offset, offset + nbytes) from
    held[0] to held[1]: at each instruction of `steps` (every instruction where given, else
    each instruction at which some tensor starts holding bytes), as (instruction, bytes)."""
    held = [t for t in held if t["held"][0] <= t["held"][1]]
    coverage = Coverage([(t["offset"], t["offset"] + t["nbytes"]) for t in held])
    starting = sorted(held, key=lambda t: t["held"][0])
    ending = sorted(held, key=lambda t: t["held"][1])
    joined = left = 0
    for at in steps if steps is not None else sorted({t["held"][0] for t in held}):
        while joined < len(starting) and starting[joined]["held"][0] <= at:
            t = starting[joined]
            coverage.add(t["offset"], t["offset"] + t["nbytes"])
            joined += 1
        while left < len(ending) and ending[left]["held"][1] < at:  # started before it ended, so added
            t = ending[left]
            coverage.remove(t["offset"], t["offset"] + t["nbytes"])
            left += 1
        yield at, coverage.covered


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
