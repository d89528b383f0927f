"""Memory planning: give every planned tensor a byte offset in its buffer so that tensors
alive at the same time never share bytes, and check plans independently of how they were made.

    plan(intervals, alignment=16, algorithm="best") -> Plan
    lower_bound(intervals, alignment=16)            -> {group: bytes}
    verify(placed, sizes, alignment)                 raises PlanError
    parse_budget("1=512KiB") / check_budget(...)     memory budgets"""

from __future__ import annotations

import importlib
from typing import Any

from devplan.planning.bounds import lower_bound
from devplan.planning.budget import check_budget, parse_budget
from devplan.planning.model import Interval, Plan
from devplan.planning.verify import Placed, PlanError, verify

__all__ = [
    "ALGORITHMS",
    "Interval",
    "Placed",
    "Plan",
    "PlanError",
    "check_budget",
    "lower_bound",
    "parse_budget",
    "plan",
    "verify",
]


def __getattr__(name: str) -> Any:
    # the placement algorithms on first use: the CLI parses budgets (planning.budget) without
    # importing numpy, which they need
    if name not in ("ALGORITHMS", "plan"):
        raise AttributeError(f"module 'devplan.planning' has no attribute {name!r}")
    return getattr(importlib.import_module("devplan.planning.planner"), name)
