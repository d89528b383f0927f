"""Greedy placement: visit one buffer's tensors in some order and put each into a free gap
among the tensors already placed whose lifetimes meet its own.

Orders (all break ties by key, so results never depend on input order):
  appearance  by first instruction (first fit: a linear-scan allocator);
  size        largest first (best fit: the TFLite arena planner's greedy by size,
              Pisarchyk & Lee 2020);
  breadth     instructions by decreasing total live bytes, and at each one its not yet
              placed tensors largest first (Pisarchyk & Lee's greedy by breadth)."""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from typing import Sequence

import numpy as np

from devplan.planning.bounds import live_bytes
from devplan.planning.model import GroupProblem
from devplan.planning.occupancy import Fit, Occupancy, best_fit, first_fit


def place_in_order(problem: GroupProblem, order: Sequence[int], fit: Fit) -> list[int]:
    """Offsets indexed like problem.keys. Empty tensors take no bytes and sit at offset 0."""
    offsets = [0] * len(problem)
    occupancy = Occupancy(problem.steps)
    sizes, firsts, lasts = problem.sizes, problem.firsts, problem.lasts
    for index in order:
        size = sizes[index]
        if size:
            offsets[index] = occupancy.place(firsts[index], lasts[index], size, fit)
    return offsets


def appearance_order(problem: GroupProblem) -> list[int]:
    firsts = problem.firsts
    return sorted(range(len(problem)), key=lambda index: (firsts[index], index))


def size_order(problem: GroupProblem) -> list[int]:
    sizes, firsts = problem.sizes, problem.firsts
    return sorted(range(len(problem)), key=lambda index: (-sizes[index], firsts[index], index))


def breadth_order(problem: GroupProblem) -> list[int]:
    breadth = np.array(live_bytes(problem), dtype=np.int64)
    # Instructions are visited widest first (earliest on ties); a tensor is placed at the
    # first visited instruction where it is alive: the lowest visit rank over its lifetime.
    visit = np.lexsort((np.arange(problem.steps), -breadth))
    rank = np.empty(problem.steps, dtype=np.int64)
    rank[visit] = np.arange(problem.steps)
    firsts = np.array(problem.firsts, dtype=np.int64)
    lasts = np.array(problem.lasts, dtype=np.int64)
    placed_at = _range_min(rank, firsts, lasts)
    return sorted(range(len(problem)), key=lambda index: (int(placed_at[index]), -problem.sizes[index], index))


def _range_min(values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """min(values[start..end]) for each inclusive (start, end) pair, by a sparse table."""
    table = [values]
    while 2 ** len(table) <= len(values):
        half = 2 ** (len(table) - 1)
        previous = table[-1]
        table.append(np.minimum(previous[:-half], previous[half:]))
    widths = ends - starts + 1
    level = np.floor(np.log2(widths)).astype(np.int64)
    result = np.empty(len(starts), dtype=values.dtype)
    for index, row in enumerate(table):
        chosen = level == index
        if chosen.any():
            result[chosen] = np.minimum(row[starts[chosen]], row[ends[chosen] - 2**index + 1])
    return result


def naive(problem: GroupProblem) -> list[int]:
    """Every tensor its own bytes, in order of appearance: the size with no reuse at all."""
    offsets = [0] * len(problem)
    end = 0
    for index in appearance_order(problem):
        offsets[index] = end
        end += problem.sizes[index]
    return offsets


def greedy_order(problem: GroupProblem) -> list[int]:
    """First fit in order of appearance. The tensors placed before one that meet its
    lifetime are just those still alive when it starts, so a sweep over the live byte
    ranges gives the same offsets as place_in_order(..., first_fit), only faster."""
    offsets = [0] * len(problem)
    live: list[tuple[int, int]] = []  # (start, end) of live tensors: disjoint, sorted
    ending: list[tuple[int, int, int]] = []  # heap of (last step, start, end)
    for index in appearance_order(problem):
        size = problem.sizes[index]
        if size:
            while ending and ending[0][0] < problem.firsts[index]:
                _, start, end = heapq.heappop(ending)
                del live[bisect_left(live, (start, end))]
            offset = offsets[index] = first_fit(live, size)
            insort(live, (offset, offset + size))
            heapq.heappush(ending, (problem.lasts[index], offset, offset + size))
    return offsets


def greedy_size(problem: GroupProblem) -> list[int]:
    return place_in_order(problem, size_order(problem), best_fit)


def greedy_breadth(problem: GroupProblem) -> list[int]:
    return place_in_order(problem, breadth_order(problem), best_fit)
