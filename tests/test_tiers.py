"""The suite's tiers (tests/tiers.py, tests/conftest.py): the CI-sized samples of a cross that the
suite keeps, and the release tier left out of the suite unless --release asks for it."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.tiers import rotating, rotation

ROOT = Path(__file__).resolve().parents[1]
CASES = [f"case{i}" for i in range(9)]
OPTIONS = ["default", "a", "b", "c"]


def test_a_rotation_gives_each_case_one_option_and_each_option_several_cases():
    kept = rotation(CASES, OPTIONS)
    assert sorted(case for case, _ in kept) == sorted(CASES)
    assert set(Counter(option for _, option in kept).values()) <= {2, 3} and len({o for _, o in kept}) == 4


def test_a_rotation_takes_only_the_pairs_a_case_has():
    among = {(case, option) for case in CASES for option in OPTIONS if not (case == "case0" and option == "default")}
    kept = rotation(CASES, OPTIONS, among=among)
    assert kept <= among and {case for case, _ in kept} == set(CASES)


def test_rotating_keeps_every_case_at_its_default_and_one_option_more():
    kept = rotating(CASES, OPTIONS)
    by_case = {case: {option for c, option in kept if c == case} for case in CASES}
    assert all(len(options) == 2 and "default" in options for options in by_case.values())
    assert {option for options in by_case.values() for option in options} == set(OPTIONS)


@pytest.mark.sweep  # a fresh pytest collecting the delegate sweep: its imports take seconds
def test_the_release_tier_is_left_out_unless_asked_for():
    from tests.runtime.test_delegate_sweep import MODELS, SETTINGS, SUITE

    def collected(*args: str) -> int:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        return sum(1 for line in run.stdout.splitlines() if "::" in line)

    sweep = "tests/runtime/test_delegate_sweep.py"
    assert collected(sweep) == len(SUITE) < len(MODELS) * len(SETTINGS)
    assert collected(sweep, "--release") == len(MODELS) * len(SETTINGS)
    assert collected(sweep, "--release", "-m", "release") == len(MODELS) * len(SETTINGS) - len(SUITE)
