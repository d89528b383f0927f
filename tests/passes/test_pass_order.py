"""The method passes run in an order that holds what each takes as done (passes.RUNS_AFTER),
for every choice of options and for the program as for a delegate's payload."""

from __future__ import annotations

import itertools

import pytest

from devplan.ir.role import PROGRAM, Role
from devplan.options import CompileOptions
from devplan.passes import RUNS_AFTER, method_passes
from devplan.spec import Device

ROLES = [PROGRAM, Role.payload_on(Device.parse("cuda:0"))]


@pytest.mark.parametrize("inplace, reorder, role", itertools.product((True, False), (True, False), ROLES))
def test_each_method_pass_runs_after_what_it_takes_as_done(inplace, reorder, role):
    order = [name for name, _ in method_passes(CompileOptions.of(inplace=inplace, reorder=reorder), role)]
    for name, before in RUNS_AFTER.items():
        for earlier in before:
            if name in order and earlier in order:
                assert order.index(earlier) < order.index(name), f"{name} runs before {earlier}: {order}"
    assert set(RUNS_AFTER) | {p for ps in RUNS_AFTER.values() for p in ps} <= {
        name for name, _ in method_passes(CompileOptions.of(), ROLES[1])
    }  # the table names real passes
