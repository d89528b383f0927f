"""The tiers of the suite: `python -m pytest` runs the suite; `python -m pytest -m "not sweep"`
is the fast tier to run while working; `python -m pytest --release -m release` (what
benchmarks/sweeps.py runs before a release) the rest of the long sweeps. A parametrized family
keeps a sample in the fast tier (one of each kind) and a CI-sized sample in the suite."""

from __future__ import annotations

from typing import Iterable

import pytest


def tiered(params: Iterable, fast: Iterable, suite: Iterable | None = None) -> list:
    """`params` for pytest.mark.parametrize, each one not in `fast` marked sweep (a tuple is
    the values of several names); given `suite`, those in neither marked release as well."""
    fast = set(fast)
    kept = None if suite is None else fast | set(suite)
    unknown = (kept or fast) - set(params := list(params))
    assert not unknown, f"tier picks that are not parameters: {sorted(unknown)}"

    def marks(p) -> list:
        if p in fast:
            return []
        return [pytest.mark.sweep] if kept is None or p in kept else [pytest.mark.sweep, pytest.mark.release]

    return [pytest.param(*(p if isinstance(p, tuple) else (p,)), marks=marks(p)) if marks(p) else p for p in params]


def rotating(cases: Iterable[str], options: list[str], each: int = 1) -> set[tuple[str, str]]:
    """A CI-sized sample of cases x options: every case with the first option (the default) and
    `each` more, rotating through the others, so that every option meets several cases and
    every case is held to more than the default."""
    others = options[1:]
    return {
        pair
        for index, case in enumerate(cases)
        for pair in [(case, options[0])] + [(case, others[(index * each + k) % len(others)]) for k in range(each)]
    }
