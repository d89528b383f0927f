"""The tiers of the suite: `python -m pytest` runs the suite; `python -m pytest -m "not sweep"`
is the fast tier to run while working; `python -m pytest --release -m release` (what
benchmarks/sweeps.py runs before a release) the rest of the long sweeps. A parametrized family
keeps a sample in the fast tier (one of each kind) and a CI-sized sample in the suite."""

from __future__ import annotations

from typing import Iterable

import pytest


def tiered(params: Iterable, fast: Iterable) -> list:
    """`params` for pytest.mark.parametrize, each one not in `fast` marked sweep (a tuple is
    the values of several names)."""
    fast = set(fast)
    unknown = fast - set(params := list(params))
    assert not unknown, f"fast-tier picks that are not parameters: {sorted(unknown)}"
    return [
        p if p in fast else pytest.param(*(p if isinstance(p, tuple) else (p,)), marks=pytest.mark.sweep)
        for p in params
    ]


def rotation(cases: Iterable[str], options: list[str], among: set | None = None) -> set[tuple[str, str]]:
    """Each case with one option, the options taken in turn (of the case's pairs in `among`,
    where given), so that every option meets several cases: a CI-sized sample of a cross."""
    kept = set()
    for index, case in enumerate(cases):
        have = [option for option in options if among is None or (case, option) in among]
        kept |= {(case, have[index % len(have)])} if have else set()
    return kept


def rotating(cases: Iterable[str], options: list[str]) -> set[tuple[str, str]]:
    """Every case with the first option (the default) and one more in turn (rotation): every
    case is held to more than the default, and every option meets several cases."""
    cases = list(cases)
    return {(case, options[0]) for case in cases} | rotation(cases, options[1:])
