"""The error taxonomy (devplan/errors.py): which failures are the user's (exit 2), which are a
failed check (exit 1) and which are devplan's own bugs (exit 3, naming the stage)."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from devplan.errors import EXIT_INTERNAL


def test_a_plan_the_verifier_refuses_inside_compile_is_an_internal_error(tmp_path, monkeypatch, capsys):
    import devplan.cli
    from devplan.planning import planner

    best = planner.ALGORITHMS["best"]

    def overlapping(intervals, alignment=16):
        # a planner bug: every tensor at byte 0, so tensors alive at once share bytes
        plan = best(intervals, alignment)
        return replace(plan, offsets={key: 0 for key in plan.offsets})

    monkeypatch.setitem(planner.ALGORITHMS, "best", overlapping)
    monkeypatch.setattr(sys, "argv", ["devplan", "compile", "samples/mlp.pt2", "-o", str(tmp_path / "m.pte")])
    with pytest.raises(SystemExit) as exit:
        devplan.cli.main()
    assert exit.value.code == EXIT_INTERNAL == 3
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("devplan: internal error in stage plan "), line
    assert "PlanError: plan check failed: " in line and "overlap while both alive" in line
    assert line.endswith("please report it")
    assert not (tmp_path / "m.pte").exists()
