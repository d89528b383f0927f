"""Properties every memory plan must have, over random lifetimes, sizes and groups."""

from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st

from devplan.planning import ALGORITHMS, Interval, lower_bound, plan, verify
from tests.planning.planning_cases import align, interval_sets, placed_from, reference_greedy

SINGLE = [name for name in ALGORITHMS if name != "best"]
alignments = st.sampled_from([1, 8, 16, 64])


@settings(max_examples=200, deadline=None)
@given(interval_sets(), alignments)
def test_every_algorithm_gives_a_sound_plan_no_smaller_than_the_lower_bound(intervals, alignment):
    floor = lower_bound(intervals, alignment)
    assert set(floor) == {i.group for i in intervals}
    plans = {name: plan(intervals, alignment, name) for name in ALGORITHMS}
    for name, result in plans.items():
        assert set(result.offsets) == {i.key for i in intervals}, name
        assert set(result.sizes) == set(floor), name
        verify(placed_from(result, intervals, alignment), result.sizes, alignment)
        for group, size in result.sizes.items():
            assert size >= floor[group], name
            assert size % alignment == 0, name
    for group in floor:
        assert plans["best"].sizes[group] == min(plans[name].sizes[group] for name in SINGLE if name != "naive")
        assert plans["naive"].sizes[group] == sum(align(i.size, alignment) for i in intervals if i.group == group)


@settings(max_examples=200, deadline=None)
@given(interval_sets(), alignments)
def test_greedy_size_and_order_match_a_pairwise_reference(intervals, alignment):
    by_size = reference_greedy(intervals, alignment, lambda i: (-align(i.size, alignment), i.first, i.key), True)
    by_order = reference_greedy(intervals, alignment, lambda i: (i.first, i.key), False)
    assert dict(plan(intervals, alignment, "greedy-size").offsets) == by_size
    assert dict(plan(intervals, alignment, "greedy-order").offsets) == by_order


@settings(max_examples=100, deadline=None)
@given(interval_sets(max_size=20), st.randoms(use_true_random=False))
def test_plans_do_not_depend_on_input_order(intervals, rng):
    shuffled = list(intervals)
    rng.shuffle(shuffled)
    for name in ALGORITHMS:
        assert plan(shuffled, 16, name) == plan(intervals, 16, name), name


@settings(max_examples=100, deadline=None)
@given(interval_sets(max_size=40, groups=(1,)))
def test_best_names_the_algorithm_whose_plan_it_kept(intervals):
    result = plan(intervals)
    for name in result.algorithm.split("+"):
        assert plan(intervals, 16, name).sizes == result.sizes


@settings(max_examples=40, deadline=None)
@given(st.randoms(use_true_random=False))
def test_long_programs_match_the_reference_across_many_tree_levels(rng):
    # hundreds of distinct instructions, so lifetimes span several levels of the occupancy tree
    intervals = []
    for key in range(rng.randrange(50, 250)):
        first = rng.randrange(600)
        length = rng.choice([0, 1, 1, 2, 7, rng.randrange(600)])
        intervals.append(Interval(key, rng.choice([16, 48, 256, 1000]), first, first + length))
    by_size = reference_greedy(intervals, 16, lambda i: (-align(i.size, 16), i.first, i.key), True)
    assert dict(plan(intervals, 16, "greedy-size").offsets) == by_size


def test_hill_climb_never_does_worse_than_the_greedy_plans_it_starts_from():
    rng = random.Random(7)
    intervals = []
    for key in range(300):
        first = rng.randrange(150)
        length = rng.choice([1, 1, 2, 3, 5, rng.randrange(1, 50)])
        intervals.append(Interval(key, 16 * rng.choice([1, 2, 4, 8, 32]) * rng.randint(1, 64), first, first + length))
    climbed = plan(intervals, 16, "hill-climb")
    verify(placed_from(climbed, intervals, 16), climbed.sizes, 16)
    for name in ("greedy-size", "greedy-breadth"):
        assert climbed.sizes[1] <= plan(intervals, 16, name).sizes[1]
