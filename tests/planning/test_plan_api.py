"""plan() and lower_bound() on hand-checked cases and bad arguments."""

from __future__ import annotations

import pytest

from devplan.errors import DevplanError
from devplan.planning import ALGORITHMS, Interval, lower_bound, plan, verify
from tests.planning.planning_cases import placed_from


def test_greedy_size_beats_first_fit_in_order_of_appearance():
    # x (16 B) dies at once; y (32 B) lives long and lands above x; z (48 B) then fits
    # neither under y nor in x's old 16 bytes. Largest first puts z at 0, y above it, and x
    # in the gap z leaves below y: 80 bytes, the most alive at once (y + z at instruction 1).
    intervals = [Interval(0, 16, 0, 0), Interval(1, 32, 0, 3), Interval(2, 48, 1, 1)]
    assert lower_bound(intervals) == {1: 80}
    assert plan(intervals, 16, "greedy-order").sizes == {1: 96}
    by_size = plan(intervals, 16, "greedy-size")
    assert dict(by_size.offsets) == {0: 0, 1: 48, 2: 0}
    assert by_size.sizes == {1: 80}
    assert plan(intervals).sizes == {1: 80}


def test_lower_bound_is_the_most_aligned_bytes_alive_at_one_instruction_per_group():
    intervals = [
        Interval(0, 1, 0, 2),  # 16 bytes once aligned
        Interval(1, 20, 2, 3),  # 32
        Interval(2, 100, 4, 4),  # 112
        Interval(3, 64, 0, 9, group=7),
        Interval(4, 0, 0, 9, group=7),
    ]
    assert lower_bound(intervals) == {1: 112, 7: 64}
    assert lower_bound(intervals, alignment=1) == {1: 100, 7: 64}
    assert lower_bound([]) == {}


def test_every_algorithm_plans_empty_input_as_an_empty_plan():
    for name in ALGORITHMS:
        result = plan([], 16, name)
        assert (dict(result.offsets), dict(result.sizes)) == ({}, {})


def test_groups_are_planned_apart_and_never_get_entries_they_do_not_use():
    intervals = [Interval(1, 64, 0, 5, group=3), Interval(2, 64, 0, 5, group=5), Interval(3, 0, 0, 0, group=9)]
    for name in ALGORITHMS:
        result = plan(intervals, 16, name)
        assert dict(result.sizes) == {3: 64, 5: 64, 9: 0}
        assert dict(result.offsets) == {1: 0, 2: 0, 3: 0}
        verify(placed_from(result, intervals, 16), result.sizes, 16)


def test_plans_are_immutable():
    result = plan([Interval(1, 8, 0, 0)])
    with pytest.raises(TypeError):
        result.offsets[1] = 16  # type: ignore[index]
    with pytest.raises(AttributeError):
        result.algorithm = "naive"  # type: ignore[misc]


def test_unknown_algorithm_lists_the_choices():
    with pytest.raises(
        DevplanError, match="unknown memory planning algorithm 'fastest'; use one of: naive, greedy-order, .*best"
    ):
        plan([], 16, "fastest")


@pytest.mark.parametrize("alignment", [0, -16, 1.5, True])
def test_bad_alignment_is_a_user_error(alignment):
    with pytest.raises(DevplanError, match="alignment"):
        plan([Interval(1, 8, 0, 0)], alignment)


@pytest.mark.parametrize(
    "intervals",
    [
        [Interval(1, 8, 0, 0), Interval(1, 8, 1, 1)],
        [Interval(1, -8, 0, 0)],
        [Interval(1, 8, 3, 2)],
    ],
)
def test_malformed_intervals_are_the_callers_bug(intervals):
    with pytest.raises(ValueError):
        plan(intervals)


def test_best_climbs_only_when_no_greedy_plan_reaches_the_bound(monkeypatch):
    import devplan.planning.planner as planner

    climbs = []
    real = planner.hill_climb
    monkeypatch.setattr(planner, "hill_climb", lambda *a, **k: climbs.append(1) or real(*a, **k))
    at_bound = [Interval(0, 16, 0, 0), Interval(1, 32, 1, 1)]  # greedy reaches 32, the bound
    assert plan(at_bound).sizes == {1: 32} and plan(at_bound).algorithm == "greedy-order" and not climbs
    # every greedy order leaves a gap here (176 B); the climb finds the bound, 144 B
    above = [
        Interval(0, 32, 2, 3),
        Interval(1, 32, 0, 5),
        Interval(2, 64, 4, 4),
        Interval(3, 48, 3, 5),
        Interval(4, 64, 2, 2),
        Interval(5, 48, 5, 6),
    ]
    assert min(plan(above, 16, name).sizes[1] for name in ("greedy-order", "greedy-size", "greedy-breadth")) == 176
    assert plan(above).sizes == lower_bound(above) == {1: 144} and climbs


def test_the_package_names_stay_its_functions_whatever_submodules_were_imported():
    # a submodule named as one of the package's names (planning/plan.py) would replace
    # devplan.planning.plan, the function, once anything imported it
    import importlib
    import pkgutil

    import devplan.planning as planning

    for module in pkgutil.iter_modules(planning.__path__):
        importlib.import_module(f"devplan.planning.{module.name}")
    assert [name for name in planning.__all__ if type(getattr(planning, name)).__name__ == "module"] == []


def test_the_planners_names_are_the_algorithms_in_their_tie_break_order():
    """options reads the names from planning.model, without the algorithms' numpy."""
    from devplan.planning.model import PLANNERS

    assert tuple(ALGORITHMS) == PLANNERS
