"""How small a buffer could possibly be: at every instruction all live tensors need their
own bytes, so no placement beats the largest total live at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from devplan.planning.model import DEFAULT_ALIGNMENT, GroupProblem, Interval, split_groups


@dataclass(frozen=True)
class Peak:
    """The first instruction where a buffer's live bytes are largest, and what is live there
    as (key, aligned size) pairs, largest first."""

    instruction: int
    nbytes: int
    alive: tuple[tuple[int, int], ...]


def live_bytes(problem: GroupProblem) -> list[int]:
    """Total aligned bytes alive at each step."""
    change = [0] * (problem.steps + 1)
    for size, first, last in zip(problem.sizes, problem.firsts, problem.lasts):
        change[first] += size
        change[last + 1] -= size
    live, total = [], 0
    for delta in change[:-1]:
        total += delta
        live.append(total)
    return live


def peak(problem: GroupProblem) -> Peak:
    live = live_bytes(problem)
    step = live.index(max(live))
    alive = [
        (key, size)
        for key, size, first, last in zip(problem.keys, problem.sizes, problem.firsts, problem.lasts)
        if first <= step <= last
    ]
    alive.sort(key=lambda pair: (-pair[1], pair[0]))
    return Peak(instruction=problem.times[step], nbytes=live[step], alive=tuple(alive))


def lower_bound(intervals: Sequence[Interval], alignment: int = DEFAULT_ALIGNMENT) -> dict[int, int]:
    """group -> the most aligned bytes alive at any one instruction."""
    return {problem.group: max(live_bytes(problem)) for problem in split_groups(intervals, alignment)}
