"""Memory-aware instruction order: the reordered program computes the same values, and its
lower bound is the least any valid order of the method reaches."""

import itertools
import json
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings, strategies as st

import devplan
from devplan.ir.method import Kernel, Method
from devplan.passes.method.schedule import schedule
from devplan.planning.plan_method import plan_method
from devplan.spec import TensorSpec
from testbed.models import eager_outputs, run_executorch


class TwoBranches(torch.nn.Module):
    """Export runs both big products before either is reduced, so both are alive at once."""

    def forward(self, x):
        p = x @ x.mT
        q = (x @ x.mT) * 2.0
        return p.sum(0) + q.amax(0)


def test_an_early_reduction_frees_a_branch_before_the_next_is_computed():
    args = (torch.randn(32, 4),)
    ep = lambda: torch.export.export(TwoBranches(), args, strict=False)  # noqa: E731
    kept, reordered = devplan.compile(ep(), reorder=False), devplan.compile(ep())
    big = 32 * 32 * 4
    assert kept.planned.buffers[0].lower_bound >= 2 * big
    assert reordered.planned.buffers[0].size < 2 * big
    ops = [k.op for k in reordered.planned.method.kernels]
    assert ops.index("aten::sum.IntList_out") < ops.index("aten::mm.out", ops.index("aten::mm.out") + 1)
    torch.testing.assert_close(run_executorch(reordered.data, args)[0][0], eager_outputs(TwoBranches(), args)[0][0])


def test_state_written_early_lets_the_last_reader_work_in_place():
    class Accumulate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("total", torch.zeros(16))

        def forward(self, x):
            self.total.add_(x)
            return self.total * 2.0

    args = (torch.ones(16),)
    ep = lambda: torch.export.export(Accumulate(), args, strict=False)  # noqa: E731
    kept, reordered = devplan.compile(ep(), reorder=False), devplan.compile(ep())
    assert reordered.planned.buffers[0].size < kept.planned.buffers[0].size
    want = eager_outputs(Accumulate(), args, runs=3)
    torch.testing.assert_close(run_executorch(reordered.data, args, runs=3), want)


def _spec(size: int) -> TensorSpec:
    return TensorSpec((size,), "float32")


@st.composite
def methods(draw, most: int = 7):
    """Random straight-line methods of two-input kernels over one or two inputs."""
    values = [_spec(draw(st.integers(1, 40))) for _ in range(draw(st.integers(1, 2)))]
    inputs = tuple(range(len(values)))
    kernels = []
    for step in range(draw(st.integers(1, most))):
        a, b = draw(st.integers(0, len(values) - 1)), draw(st.integers(0, len(values) - 1))
        values.append(_spec(draw(st.integers(1, 40))))
        kernels.append(Kernel("aten::mm.out", (a, b, len(values) - 1), f"k{step}"))
    written = [k.args[-1] for k in kernels]
    outputs = tuple(sorted({written[-1], *draw(st.lists(st.sampled_from(written), max_size=2))}))
    return Method("forward", tuple(values), tuple(kernels), inputs, outputs, {}, {}, "", "")


def _valid(method: Method, order) -> bool:
    ready = set(method.inputs)
    for k in order:
        kernel = method.kernels[k]
        if not set(kernel.args[:-1]) <= ready:
            return False
        ready.add(kernel.args[-1])
    return True


def _bound(method: Method) -> int:
    return plan_method(method, algorithm="greedy-size").buffers[0].lower_bound


@settings(max_examples=60, deadline=None)
@given(methods())
def test_the_order_is_valid_and_no_order_has_a_lower_bound_below_it(method):
    new = schedule(method)
    order = [method.kernels.index(k) for k in new.kernels]
    assert sorted(order) == list(range(len(method.kernels))) and _valid(method, order)
    orders = [p for p in itertools.permutations(range(len(method.kernels))) if _valid(method, p)]
    best = min(_bound(replace(method, kernels=tuple(method.kernels[k] for k in p))) for p in orders)
    assert _bound(new) == best
    assert _bound(new) <= _bound(method)


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_keep_order_on_the_command_line_plans_the_exported_order(tmp_path):
    from testbed.cli import devplan as run_cli

    model = tmp_path / "branches.pt2"
    torch.export.save(torch.export.export(TwoBranches(), (torch.randn(32, 4),), strict=False), model)
    sizes = {}
    for flag in ("--reorder", "--keep-order"):
        run = run_cli("compile", model, "-o", tmp_path / f"{flag}.pte", "--json", flag)
        assert run.returncode == 0, run.stderr
        sizes[flag] = json.loads(run.stdout)["methods"][0]["buffers"][0]["size"]
    assert sizes["--reorder"] < sizes["--keep-order"]
