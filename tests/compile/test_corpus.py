"""Every corpus model and sample: devplan compiles it, ExecuTorch's runtime and devplan's
reference runtime run it, and the outputs match eager PyTorch (two runs in a row for models
that keep state)."""

import os
import subprocess
import sys

import pytest
import torch
from torch.utils import _pytree as pytree

import devplan
from samples.make_samples import sample_models
from testbed.models import CORPUS, STATEFUL, eager_outputs, run_executorch
from tests.compile.test_cli import ROOT

CASES = {**CORPUS, **{f"sample_{name}": (lambda name=name: sample_models()[name]) for name in sample_models()}}


@pytest.mark.parametrize("name", sorted(CASES))
def test_both_runtimes_match_eager(name):
    from devplan.runtime import run

    module, args = CASES[name]()
    expected = eager_outputs(module, args, runs=2)
    result = devplan.compile(torch.export.export(module, args, strict=False))
    runs = run_executorch(result.data, args, runs=2)
    reference = run(result.data, pytree.tree_leaves(args), runs=2)
    for got_run, want_run in [*zip(runs, expected), *zip(reference, expected)]:
        assert len(got_run) == len(want_run)
        for got, want in zip(got_run, want_run):
            assert got.shape == want.shape and got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    if name in STATEFUL:
        assert not torch.equal(runs[0][0], runs[1][0]), "state did not carry over between runs"


@pytest.mark.parametrize("name", sorted(CASES))
def test_executorch_and_devplan_read_the_program(name):
    from executorch.exir._serialize._program import deserialize_pte_binary

    module, args = CASES[name]()
    result = devplan.compile(torch.export.export(module, args, strict=False))
    theirs = deserialize_pte_binary(result.data).program.execution_plan[0]
    ours = devplan.inspect(result.data)["methods"][0]
    assert len(theirs.values) == ours["counts"]["values"] == len(result.planned.method.values)
    assert len(theirs.chains[0].instructions) == ours["counts"]["instructions"]
    assert [f"{op.name}.{op.overload}" for op in theirs.operators] == [op_name(o) for o in ours["operators"]]
    assert theirs.non_const_buffer_sizes == [0] + [b["size"] for b in ours["buffers"]]
    assert list(theirs.inputs) == ours["inputs"] and list(theirs.outputs) == ours["outputs"]
    assert [b["lower_bound"] for b in ours["buffers"]] == [b.lower_bound for b in result.planned.buffers]


def op_name(op: dict) -> str:
    return f"{op['name']}.{op['overload']}"


def test_same_input_gives_identical_bytes():
    module, args = CORPUS["transformer_encoder"]()
    ep = torch.export.export(module, args, strict=False)
    assert devplan.compile(ep).data == devplan.compile(ep).data


def test_only_portable_kernels_are_emitted():
    from executorch.extension.pybindings import portable_lib

    registered = set(portable_lib._get_operator_names())
    for name in ("transformer_encoder", "residual_cnn", "activations", "shape_ops"):
        module, args = CORPUS[name]()
        method = devplan.compile(torch.export.export(module, args, strict=False)).planned.method
        assert {k.op for k in method.kernels} <= registered


def test_the_operator_list_is_what_executorchs_kernel_libraries_register(tmp_path):
    """devplan/executorch_ops.txt, written again from the installed ExecuTorch in a fresh process
    (this one may have loaded other kernels), comes out byte for byte the same."""
    from devplan.runtime.executorch import OPERATOR_LIST

    written = tmp_path / "ops.txt"
    subprocess.run(
        [sys.executable, "-m", "devplan.runtime.executorch", str(written)],
        check=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
    )
    assert written.read_text() == OPERATOR_LIST.read_text(), "rewrite it: python -m devplan.runtime.executorch"
