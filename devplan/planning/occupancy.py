"""Which byte ranges of one buffer are taken during a span of instructions.

A segment tree over (renumbered) instructions. A placed tensor's byte range is filed under
the few nodes whose spans exactly tile its lifetime ("own"); every node also keeps the
union of the ranges filed anywhere in its subtree ("below"). The tensors whose lifetimes
meet a query span are then exactly those filed under a node inside the span (found in the
"below" union of the nodes tiling the span) or under a node that sticks out of it (such a
node holds the span's first or last instruction, so it lies on one of two root-to-leaf
paths). Ranges are kept as flat sorted lists [start0, end0, start1, end1, ...] of
disjoint, non-touching byte ranges, so a query costs the number of fragments, not the
number of tensors it meets: tightly packed bytes collapse into few fragments."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Callable, Iterable

# Chooses an offset for `size` bytes given the taken (start, end) ranges in start order.
Fit = Callable[[Iterable[tuple[int, int]], int], int]

SHIFT = 3
FANOUT = 1 << SHIFT  # children per node: fewer levels to update per tensor, more tiles per span


class Occupancy:
    """The byte ranges placed so far in one buffer, by lifetime."""

    def __init__(self, steps: int) -> None:
        # Levels of FANOUT-ary nodes from the leaves (one per step) up to a single root,
        # numbered consecutively: level L's node i is number bases[L] + i.
        self._bases = []
        nodes, count = 0, max(1, steps)
        while True:
            self._bases.append(nodes)
            nodes += count
            if count == 1:
                break
            count = -(-count // FANOUT)
        self._own: list[list[int] | None] = [None] * nodes
        self._below: list[list[int] | None] = [None] * nodes

    def place(self, first: int, last: int, size: int, fit: Fit) -> int:
        """Put `size` bytes, alive over [first, last], where `fit` chooses among the
        ranges taken during that span; return the chosen offset."""
        own, below = self._own, self._below
        tiles, sticking_out = self._tiles(first, last), self._sticking_out(first, last)
        parts = [part for node in tiles if (part := below[node])]
        parts += [part for node in sticking_out if (part := own[node])]
        if len(parts) == 1:
            bounds = iter(parts[0])
            offset = fit(zip(bounds, bounds), size)
        else:
            bounds = iter([bound for part in parts for bound in part])
            offset = fit(sorted(zip(bounds, bounds)), size)
        end = offset + size
        for node in tiles:
            own[node] = _add_range(own[node], offset, end)
            below[node] = _add_range(below[node], offset, end)
        for node in sticking_out:
            below[node] = _add_range(below[node], offset, end)
        return offset

    def _tiles(self, first: int, last: int) -> list[int]:
        """The maximal nodes whose spans lie inside [first, last]: climbing level by level,
        the nodes at either end of the span that do not fill a whole parent."""
        tiles: list[int] = []
        low, high = first, last + 1  # the span's nodes at this level, half open
        for base in self._bases:
            parent_low, parent_high = (low + FANOUT - 1) >> SHIFT, high >> SHIFT
            if parent_low >= parent_high:
                tiles.extend(range(base + low, base + high))
                break
            tiles.extend(range(base + low, base + (parent_low << SHIFT)))
            tiles.extend(range(base + (parent_high << SHIFT), base + high))
            low, high = parent_low, parent_high
        return tiles

    def _sticking_out(self, first: int, last: int) -> list[int]:
        """The nodes that meet [first, last] without lying inside it, which are the
        ancestors of the tiles: at each level, the node holding `first` or `last` when it
        reaches past that end of the span."""
        nodes = []
        for level in range(1, len(self._bases)):
            shift = SHIFT * level
            left, right = first >> shift, last >> shift
            if left << shift != first or (left + 1) << shift > last + 1:
                nodes.append(self._bases[level] + left)
            if right != left and (right + 1) << shift > last + 1:
                nodes.append(self._bases[level] + right)
        return nodes


def _add_range(ranges: list[int] | None, start: int, end: int) -> list[int]:
    """Union [start, end) into a flat sorted list of disjoint, non-touching ranges."""
    if ranges is None:
        return [start, end]
    low = bisect_left(ranges, start)
    high = bisect_right(ranges, end)
    # An odd position means the bound falls inside (or touches) an existing range, which
    # then supplies the merged range's start or end.
    ranges[low:high] = ([start] if low % 2 == 0 else []) + ([end] if high % 2 == 0 else [])
    return ranges


def best_fit(taken: Iterable[tuple[int, int]], size: int) -> int:
    """Start of the smallest free gap that holds `size` bytes (the lowest such gap on ties,
    the gap below the first taken range included); past the last range if none does."""
    best, best_gap, reach = -1, 0, 0
    for start, end in taken:
        gap = start - reach
        if gap >= size and (best < 0 or gap < best_gap):
            best, best_gap = reach, gap
        if end > reach:
            reach = end
    return best if best >= 0 else reach


def first_fit(taken: Iterable[tuple[int, int]], size: int) -> int:
    """Start of the lowest free gap that holds `size` bytes; past the last range if none does."""
    reach = 0
    for start, end in taken:
        if start - reach >= size:
            return reach
        if end > reach:
            reach = end
    return reach
