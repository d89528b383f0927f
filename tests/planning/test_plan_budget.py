"""Memory budgets: parsing TARGET=SIZE and explaining plans that do not fit."""

from __future__ import annotations

import pytest

from devplan.errors import DevplanError
from devplan.planning import Interval, check_budget, parse_budget


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1=512KiB", ("1", 512 * 1024)),
        ("cuda:0=2GiB", ("cuda:0", 2 * 1024**3)),
        ("1=1048576", ("1", 1048576)),
        ("2=1.5MiB", ("2", 1572864)),
        (" 1 = 3 MB ", ("1", 3_000_000)),
        ("cpu=64kb", ("cpu", 64_000)),
        ("1=7B", ("1", 7)),
        ("1=1GB", ("1", 10**9)),
        ("1=0", ("1", 0)),
    ],
)
def test_budgets_parse_to_target_and_bytes(text, expected):
    assert parse_budget(text) == expected


@pytest.mark.parametrize("text", ["1", "=5KiB", "1=", "1=abc", "1=5XB", "1=-5", "1=5 KiB extra", "a=b=1"])
def test_malformed_budgets_are_rejected_with_the_accepted_form(text):
    with pytest.raises(DevplanError, match="TARGET=SIZE"):
        parse_budget(text)


def test_fractional_bytes_are_rejected():
    with pytest.raises(DevplanError, match="whole number of bytes"):
        parse_budget("1=0.5B")


# At instruction 1, values 11, 12 and 13 are alive: 64 + 160 + 32 = 256 bytes.
INTERVALS = [
    Interval(10, 100, 0, 0),
    Interval(11, 64, 0, 1),
    Interval(12, 150, 1, 2),
    Interval(13, 20, 1, 1),
    Interval(20, 4000, 0, 5, group=2),
]


def test_plans_within_budget_pass():
    check_budget({1: 256, 2: 4000}, {1: 256, 2: 8000}, INTERVALS, 16)
    check_budget({1: 256}, {3: 0}, INTERVALS, 16)


def test_a_budget_below_the_lower_bound_says_that_nothing_can_fit():
    with pytest.raises(DevplanError) as caught:
        check_budget({1: 288, 2: 4000}, {1: 200}, INTERVALS, 16)
    message = str(caught.value)
    assert "memory buffer 1 needs 288 B but its budget is 200 B" in message
    assert "the lower bound is 256 B (held at its peak, instruction 1: v12 (160 B), v11 (64 B), v13 (32 B))" in message
    assert "no placement can fit" in message
    assert "\n" not in message


def test_a_budget_between_the_bound_and_the_plan_suggests_a_tighter_placement():
    with pytest.raises(DevplanError, match="buffer 1 needs 320 B but its budget is 300 B.*might fit"):
        check_budget({1: 320}, {1: 300}, INTERVALS, 16)


def test_the_peak_lists_only_the_largest_tensors():
    crowd = [Interval(key, 16 * (key + 1), 0, 0) for key in range(8)]
    with pytest.raises(DevplanError, match=r"v7 \(128 B\), .*v3 \(64 B\) and 3 more"):
        check_budget({1: 576}, {1: 100}, crowd, 16)


@pytest.mark.parametrize(
    "budgets, refusal",
    [
        ({"1": "64KiB"}, "map a mem_id such as '1'"),  # a size as text, as --budget writes it
        ({"cpu": -1}, "0 or more"),
    ],
)
def test_compile_refuses_a_malformed_budgets_mapping_as_check_does(budgets, refusal):
    import devplan

    with pytest.raises(DevplanError, match=refusal) as caught:
        devplan.compile("samples/mlp.pt2", budgets=budgets)
    assert type(caught.value) is DevplanError  # the user's input (exit 2), not devplan's bug (exit 3)


def test_compile_takes_a_mem_id_budget_as_an_int_as_check_does():
    import devplan
    from devplan.errors import BudgetExceeded

    with pytest.raises(BudgetExceeded, match="buffer 1"):
        devplan.compile("samples/mlp.pt2", budgets={1: 10})
