"""Local search over greedy placement orders: the buffer's size is set by a tensor that
reaches its top, so try placing it, or a tensor alive at the same time, earlier in the
best-fit order and keep the new order when the buffer does not grow (a hill climb in the
spirit of TVM's USMP planner).

The work is bounded (a fixed number of full re-placements, fewer for big buffers) and the
random choices come from a fixed seed, so the result is deterministic."""

from __future__ import annotations

import random
from typing import Sequence

from devplan.planning.greedy import place_in_order
from devplan.planning.model import GroupProblem, buffer_size
from devplan.planning.occupancy import best_fit

MAX_TRIES = 60  # re-placements for a small buffer
MAX_WORK = 40_000  # tensors placed over all tries, so big buffers get fewer tries
SEED = 20200504


def hill_climb(problem: GroupProblem, order: Sequence[int], offsets: Sequence[int], floor: int) -> list[int]:
    """Improve `offsets` (the best-fit placement of `order`); stop early at `floor`, a size
    no placement can go below."""
    order, offsets = list(order), list(offsets)
    total = buffer_size(problem, offsets)
    tries = min(MAX_TRIES, MAX_WORK // max(1, len(problem)))
    rng = random.Random(SEED)
    for _ in range(tries):
        if total <= floor:
            break
        candidate = _move_a_crowding_tensor(problem, order, offsets, total, rng)
        candidate_offsets = place_in_order(problem, candidate, best_fit)
        candidate_total = buffer_size(problem, candidate_offsets)
        # equal sizes are accepted too, to walk across plateaus
        if candidate_total <= total:
            order, offsets, total = candidate, candidate_offsets, candidate_total
    return offsets


def _move_a_crowding_tensor(
    problem: GroupProblem, order: list[int], offsets: list[int], total: int, rng: random.Random
) -> list[int]:
    """`order` with a tensor moved to a random earlier place: one whose lifetime meets that
    of a tensor ending at the buffer's top (that tensor included). Above the floor, that
    top tensor is not first in the order (the first one sits at offset 0, alone), so there
    is always such a tensor to move."""
    sizes, firsts, lasts = problem.sizes, problem.firsts, problem.lasts
    top = rng.choice([index for index in order if offsets[index] + sizes[index] == total])
    crowding = [
        pos for pos, index in enumerate(order) if pos and firsts[index] <= lasts[top] and firsts[top] <= lasts[index]
    ]
    pos = rng.choice(crowding)
    target = rng.choice((0, rng.randrange(pos)))  # often to the very front: placed first
    return order[:target] + [order[pos]] + order[target:pos] + order[pos + 1 :]
