"""The checks between stages (devplan/wellformed.py): a deliberately broken pass is caught
right after it runs, and the internal error names its stage, not a later one that trips."""

from __future__ import annotations

import sys
from dataclasses import replace
from functools import partial

import pytest
import torch

import devplan
import devplan.compiler
from devplan.compiler import compile
from devplan.errors import InternalError
from devplan.ir.method import Kernel, Method
from devplan.ir.role import PROGRAM
from devplan.options import CompileOptions
from devplan.passes import AFTER_FOLD, PIPELINE, Pipeline, method_passes
from devplan.passes.graph.fold import fold_constants
from devplan.spec import TensorSpec
from devplan.wellformed import Malformed


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        return (self.linear(x).relu() + x).sum(0)


@pytest.fixture(scope="module")
def exported():
    return torch.export.export(Small(), (torch.randn(4, 8),))


def _caught(exported, pipeline: Pipeline) -> InternalError:
    with pytest.raises(InternalError) as caught:
        devplan.compile(exported, checks=True, pipeline=pipeline)
    assert isinstance(caught.value.__cause__, Malformed), caught.value.__cause__
    return caught.value


def _graph_pass(stage: str, broken) -> Pipeline:
    if stage == "fold":
        return replace(PIPELINE, fold=broken)
    return replace(PIPELINE, after_fold=tuple((name, broken if name == stage else run) for name, run in AFTER_FOLD))


def _method_pass(stage: str, broken) -> Pipeline:
    def chosen(options, role=PROGRAM):
        return [
            (name, (lambda m, run=run: broken(run(m))) if name == stage else run)
            for name, run in method_passes(options, role)
        ]

    return Pipeline(method_passes_for=chosen)


def test_the_graph_lint_names_a_pass_that_uses_a_node_before_defining_it(exported):
    def broken(low, **how):
        done = fold_constants(low, **how)
        relu = next(n for n in done.program.gm.graph.nodes if "relu" in str(n.target))
        next(iter(done.program.gm.graph.nodes)).prepend(relu)  # before the placeholders it reads
        return done

    error = _caught(exported, _graph_pass("fold", broken))
    assert error.stage == "fold" and "graph lint" in str(error.__cause__)


def test_the_graph_check_names_a_pass_that_drops_what_later_stages_read(exported):
    run = dict(AFTER_FOLD)["views"]

    def broken(low):
        low = run(low)
        add = next(n for n in low.gm.graph.nodes if "add" in str(n.target))
        del add.meta["val"]
        return low

    error = _caught(exported, _graph_pass("views", broken))
    assert error.stage == "views" and "has no meta['val']" in str(error.__cause__)


def _reversed(method: Method) -> Method:
    return replace(method, kernels=method.kernels[::-1])


def _arguments_to_spare(method: Method) -> Method:
    kernel = method.kernels[0]
    return replace(method, kernels=(replace(kernel, args=kernel.args * 2), *method.kernels[1:]))


def _a_tensor_without_a_spec(method: Method) -> Method:
    read = next(a for k in method.kernels for a in k.args if isinstance(method.values[a], TensorSpec))
    return replace(method, values=tuple(7 if i == read else v for i, v in enumerate(method.values)))


@pytest.mark.parametrize(
    ("stage", "broken", "needle"),
    [
        ("compact", _reversed, "before any instruction writes it"),
        ("alias", _arguments_to_spare, "its schema takes"),
        ("copies", _a_tensor_without_a_spec, ", a int"),
    ],
)
def test_the_method_check_names_the_pass_that_broke_it(exported, stage, broken, needle):
    error = _caught(exported, _method_pass(stage, broken))
    assert error.stage == stage and needle in str(error.__cause__), error.__cause__


def test_the_checks_are_off_in_a_normal_compile_and_on_with_debug(tmp_path, monkeypatch, capsys):
    import devplan.cli

    monkeypatch.delenv("DEVPLAN_CHECK_STAGES")
    assert CompileOptions().checks is False
    # the command's compile, handed the broken table
    monkeypatch.setattr(devplan.compiler, "compile", partial(compile, pipeline=_method_pass("compact", _reversed)))
    monkeypatch.setattr(
        sys, "argv", ["devplan", "--debug", "compile", "samples/mlp.pt2", "-o", str(tmp_path / "m.pte")]
    )
    with pytest.raises(SystemExit) as exit:
        devplan.cli.main()
    assert exit.value.code == 3
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("devplan: internal error in stage compact (devplan "), line
    assert "Malformed: instruction 0 (" in line
    assert not (tmp_path / "m.pte").exists()


def test_kernels_of_a_built_method_are_checked_against_their_schemas(exported):
    from devplan.wellformed import check_method

    planned = devplan.compile(exported, checks=True).planned
    check_method(planned.method)
    kernel = planned.method.kernels[0]
    wrong = replace(
        planned.method, kernels=(Kernel("aten::no_such_op.out", kernel.args, kernel.node), *planned.method.kernels[1:])
    )
    with pytest.raises(Malformed, match="no operator of that name has a schema"):
        check_method(wrong)
