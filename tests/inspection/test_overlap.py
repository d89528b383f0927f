"""The sweeps of devplan/inspection/overlap.py against the pairwise definitions they replace, on
random tensors: which tensors share a storage (bytes that meet while both hold them, and so
on transitively), and the bytes in use at each instruction, aliases counted once."""

from __future__ import annotations

import random

import pytest

from devplan.inspection.overlap import busiest, storages


def pairwise_storages(timed: list[dict]) -> list[int]:
    parent = list(range(len(timed)))

    def find(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for i, a in enumerate(timed):
        for j, b in enumerate(timed[:i]):
            meet_bytes = a["offset"] < b["offset"] + b["nbytes"] and b["offset"] < a["offset"] + a["nbytes"]
            meet_time = a["held"][0] <= b["held"][1] and b["held"][0] <= a["held"][1]
            if a["nbytes"] and b["nbytes"] and meet_bytes and meet_time:
                parent[find(i)] = find(j)
    return [find(i) for i in range(len(timed))]


def in_use(timed: list[dict], at: int) -> int:
    covered = set()
    for t in timed:
        if t["held"][0] <= at <= t["held"][1]:
            covered.update(range(t["offset"], t["offset"] + t["nbytes"]))
    return len(covered)


def same_groups(a: list[int], b: list[int]) -> bool:
    seen_a, seen_b = {}, {}
    return [seen_a.setdefault(x, len(seen_a)) for x in a] == [seen_b.setdefault(x, len(seen_b)) for x in b]


@pytest.mark.parametrize("seed", range(6))
def test_the_sweeps_agree_with_the_pairwise_definitions(seed):
    rng = random.Random(seed)
    for _ in range(150):
        steps = rng.choice([3, 8, 20])
        timed = []
        for _ in range(rng.randint(1, 40)):
            first = rng.randint(0, steps)
            timed.append(
                {
                    "offset": rng.randrange(rng.choice([4, 12, 40])) * 4,
                    "nbytes": rng.choice([0, 4, 8, 16, 32]),
                    "held": [first, first + rng.randint(0, 5)],
                }
            )
        assert same_groups(storages(timed), pairwise_storages(timed)), timed
        starts = sorted({t["held"][0] for t in timed})
        assert list(busiest(timed)) == [(at, in_use(timed, at)) for at in starts]
        assert list(busiest(timed, range(steps + 6))) == [(at, in_use(timed, at)) for at in range(steps + 6)]
