"""The two tiers of the suite: `python -m pytest` runs everything; `python -m pytest -m "not sweep"`
is the fast tier to run while working. A parametrized family keeps a sample in the fast tier
(one of each kind) and leaves the rest to the full suite."""

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
