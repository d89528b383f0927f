"""What the planner takes and gives: tensor lifetimes in, byte offsets and buffer sizes out,
plus the per-buffer form the placement algorithms work on."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Sequence

from devplan.errors import DevplanError

DEFAULT_ALIGNMENT = 16  # bytes, as ExecuTorch's planner aligns
MAX_ALIGNMENT = 4096  # a page: no device asks for more, and a larger one only inflates the buffers
# the placement algorithms by name, in tie-break order (planner.ALGORITHMS holds their code): the
# names are data, so that parsing --planner loads no numpy
PLANNERS = ("naive", "greedy-order", "greedy-size", "greedy-breadth", "hill-climb", "best")
# Per device type, the alignment of a buffer's tensors there unless --alignment says. CUDA:
# torch's caching allocator hands eager tensors 512-byte-aligned blocks, and torch's kernels
# choose by pointer alignment (on an H200, a conv net's bias add over a 16-byte-aligned plan
# ran 1.7x as long).
DEVICE_ALIGNMENT = MappingProxyType({"cuda": 512})


@dataclass(frozen=True)
class Interval:
    """One tensor (or one in-place alias group) to place. It occupies `size` bytes of buffer
    `group` from instruction `first` through instruction `last`, both inclusive."""

    key: int
    size: int
    first: int
    last: int
    group: int = 1


@dataclass(frozen=True)
class Plan:
    """offsets: key -> byte offset inside its group's buffer; sizes: group -> buffer bytes."""

    offsets: Mapping[int, int]
    sizes: Mapping[int, int]
    algorithm: str


def buffer_alignment(device_type: str, alignment: int | None) -> int:
    """A buffer's alignment: the one asked for, else its device type's (the host's 16)."""
    return alignment or DEVICE_ALIGNMENT.get(device_type, DEFAULT_ALIGNMENT)


def align_up(nbytes: int, alignment: int) -> int:
    return -(-nbytes // alignment) * alignment


def check_alignment(alignment: int) -> None:
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 1:
        raise DevplanError(f"memory alignment must be a positive number of bytes, got {alignment!r}")


@dataclass(frozen=True)
class GroupProblem:
    """One buffer's tensors, in key order, with sizes already aligned. Lifetimes are
    renumbered to steps 0..len(times)-1 keeping their order (times[step] is the instruction),
    so that two lifetimes intersect exactly when the originals do and per-step tables stay
    as small as the tensor count."""

    group: int
    keys: tuple[int, ...]
    sizes: tuple[int, ...]
    firsts: tuple[int, ...]
    lasts: tuple[int, ...]
    times: tuple[int, ...]

    @property
    def steps(self) -> int:
        return len(self.times)

    def __len__(self) -> int:
        return len(self.keys)


def split_groups(intervals: Sequence[Interval], alignment: int) -> list[GroupProblem]:
    """The problems, one per group in group order. Malformed intervals are the caller's bug."""
    check_alignment(alignment)
    by_group: dict[int, list[Interval]] = {}
    seen: set[int] = set()
    for interval in intervals:
        if interval.key in seen:
            raise ValueError(f"interval key {interval.key} appears twice")
        if interval.size < 0 or interval.first > interval.last:
            raise ValueError(f"malformed interval {interval}")
        seen.add(interval.key)
        by_group.setdefault(interval.group, []).append(interval)
    return [_problem(group, by_group[group], alignment) for group in sorted(by_group)]


def _problem(group: int, members: list[Interval], alignment: int) -> GroupProblem:
    members = sorted(members, key=lambda interval: interval.key)
    times = sorted({i.first for i in members} | {i.last for i in members})
    rank = {time: index for index, time in enumerate(times)}
    return GroupProblem(
        group=group,
        keys=tuple(i.key for i in members),
        sizes=tuple(align_up(i.size, alignment) for i in members),
        firsts=tuple(rank[i.first] for i in members),
        lasts=tuple(rank[i.last] for i in members),
        times=tuple(times),
    )


def buffer_size(problem: GroupProblem, offsets: Sequence[int]) -> int:
    return max((offset + size for offset, size in zip(offsets, problem.sizes)), default=0)


def assemble(problems: Sequence[GroupProblem], offsets: Sequence[Sequence[int]], algorithm: str) -> Plan:
    """The plan from each problem's offsets (indexed like problem.keys)."""
    by_key: dict[int, int] = {}
    sizes: dict[int, int] = {}
    for problem, group_offsets in zip(problems, offsets):
        by_key.update(zip(problem.keys, group_offsets))
        sizes[problem.group] = buffer_size(problem, group_offsets)
    return Plan(
        offsets=MappingProxyType(dict(sorted(by_key.items()))),
        sizes=MappingProxyType(sizes),
        algorithm=algorithm,
    )
