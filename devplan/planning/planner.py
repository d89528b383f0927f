"""Choose byte offsets for tensors by name of algorithm; "best" tries them all."""

from __future__ import annotations

from typing import Callable, Sequence

from devplan.errors import DevplanError
from devplan.planning import greedy
from devplan.planning.bounds import live_bytes
from devplan.planning.model import (
    DEFAULT_ALIGNMENT,
    GroupProblem,
    Interval,
    Plan,
    assemble,
    buffer_size,
    split_groups,
)
from devplan.planning.search import hill_climb

Planner = Callable[[Sequence[Interval], int], Plan]


def _climb(problem: GroupProblem, by_size: list[int], by_breadth: list[int]) -> list[int]:
    """Hill climb from the smaller of the two best-fit placements (greedy-size on ties)."""
    starts = [(greedy.size_order, by_size), (greedy.breadth_order, by_breadth)]
    order, offsets = min(starts, key=lambda start: buffer_size(problem, start[1]))
    return hill_climb(problem, order(problem), offsets, floor=max(live_bytes(problem)))


def _hill_climb(problem: GroupProblem) -> list[int]:
    return _climb(problem, greedy.greedy_size(problem), greedy.greedy_breadth(problem))


def _candidates(problem: GroupProblem) -> list[tuple[str, list[int]]]:
    """Every non-naive algorithm's placement, in tie-break order; the hill climb reuses the
    greedy placements it starts from, and is skipped when a greedy one is already at the
    lower bound (nothing can beat it, and the climb is most of the time spent)."""
    by_size, by_breadth = greedy.greedy_size(problem), greedy.greedy_breadth(problem)
    greedy_ones = [
        ("greedy-order", greedy.greedy_order(problem)),
        ("greedy-size", by_size),
        ("greedy-breadth", by_breadth),
    ]
    if min(buffer_size(problem, offsets) for _, offsets in greedy_ones) <= max(live_bytes(problem), default=0):
        return greedy_ones
    return greedy_ones + [("hill-climb", _climb(problem, by_size, by_breadth))]


def _best_of(problem: GroupProblem) -> tuple[str, list[int]]:
    # min keeps the first of equal sizes, so ties go to the earlier algorithm
    return min(_candidates(problem), key=lambda candidate: buffer_size(problem, candidate[1]))


def _each_group(name: str, place: Callable[[GroupProblem], list[int]]) -> Planner:
    def run(intervals: Sequence[Interval], alignment: int = DEFAULT_ALIGNMENT) -> Plan:
        problems = split_groups(intervals, alignment)
        return assemble(problems, [place(problem) for problem in problems], name)

    return run


def _best(intervals: Sequence[Interval], alignment: int = DEFAULT_ALIGNMENT) -> Plan:
    """Per buffer, the smallest placement any algorithm finds; the plan's algorithm names
    the winners in tie-break order, joined by '+'."""
    problems = split_groups(intervals, alignment)
    chosen = [_best_of(problem) for problem in problems]
    won = {name for name, _ in chosen}
    names = [name for name in ALGORITHMS if name in won]
    return assemble(problems, [offsets for _, offsets in chosen], "+".join(names) or "best")


ALGORITHMS: dict[str, Planner] = {
    "naive": _each_group("naive", greedy.naive),
    "greedy-order": _each_group("greedy-order", greedy.greedy_order),
    "greedy-size": _each_group("greedy-size", greedy.greedy_size),
    "greedy-breadth": _each_group("greedy-breadth", greedy.greedy_breadth),
    "hill-climb": _each_group("hill-climb", _hill_climb),
    "best": _best,
}


def plan(intervals: Sequence[Interval], alignment: int = DEFAULT_ALIGNMENT, algorithm: str = "best") -> Plan:
    """Byte offsets for every interval such that tensors alive at the same instruction in the
    same group never share a byte; see ALGORITHMS for the choices."""
    if algorithm not in ALGORITHMS:
        raise DevplanError(f"unknown memory planning algorithm {algorithm!r}; use one of: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[algorithm](intervals, alignment)
