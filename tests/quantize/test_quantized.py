"""PT2E-quantized programs: torchao's prepare_pt2e/convert_pt2e with ExecuTorch's XNNPACK
quantizer leave quantize and dequantize ops (quantized_decomposed::*) around float ops.
devplan lowers them to the out variants of ExecuTorch's quantized kernel library, keeps the
weights int8 in the program, and both runtimes compute what the quantized module computes
in eager, with plans no larger than ExecuTorch's own lowering of the same program."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import devplan
import devplan.runtime
from devplan.ops import QUANTIZED, schema_name
from testbed.cli import fresh_devplan
from testbed.lowerings import executorch_lowered
from testbed.models import run_executorch
from testbed.quantized import CONFIGS, MODELS, quantize
from tests.tiers import tiered

quantized_kernels = pytest.importorskip("executorch.kernels.quantized")

QUANTIZED_KERNELS = {schema_name(s) for s in QUANTIZED.values()}


def assert_calls_quantized_kernels(result) -> None:
    kernels = {k.op for k in result.planned.method.kernels}
    assert kernels & QUANTIZED_KERNELS, "the program calls no quantized kernel"


def assert_weights_stay_int8(ep, result) -> int:
    """The program stores every int8 tensor of the exported program as int8 (folding their
    dequantize would store them as float, four times the bytes); returns how many elements."""
    int8 = sum(t.numel() for t in [*ep.state_dict.values(), *ep.constants.values()] if t.dtype == torch.int8)
    kept = sum(t.numel() for t in result.planned.method.constants.values() if t.dtype == torch.int8)
    assert kept == int8, f"the program stores {kept} int8 weight elements, the exported program {int8}"
    return int8


# dynamic: linear layers only; the fast tier keeps each config once
@pytest.mark.parametrize(
    "model,config",
    tiered(
        [(m, c) for m in MODELS for c in CONFIGS if (m, c) != ("conv1d_bn", "dynamic")],
        [("mlp", "per_tensor"), ("cnn", "per_channel"), ("attention", "dynamic")],
    ),
)
def test_quantized_program_runs_in_both_runtimes(model, config):
    ep, module, args = quantize(model, config)
    want = module(*args)
    result = devplan.compile(ep)
    assert_calls_quantized_kernels(result)
    for got in (devplan.runtime.run(result.data, list(args))[0][0], run_executorch(result.data, args)[0][0]):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert assert_weights_stay_int8(ep, result) > 0
    from testbed.executorch import planned_bytes

    assert planned_bytes(result.data) <= planned_bytes(executorch_lowered(ep))


@pytest.mark.parametrize(
    "model,config",
    tiered(
        [(m, c) for m in MODELS for c in ("per_tensor", "dynamic") if (m, c) != ("conv1d_bn", "dynamic")],
        [("mlp", "per_tensor")],
    ),
)
def test_devplans_runtime_runs_executorchs_own_quantized_programs(model, config):
    """ExecuTorch's lowering of the same quantized program (its quantized kernels included)
    runs in devplan's runtime as in ExecuTorch's, through the same reader as devplan's own."""
    ep, module, args = quantize(model, config)
    theirs = executorch_lowered(ep)
    operators = {f"{op['name']}.{op['overload']}" for op in devplan.inspect(theirs)["methods"][0]["operators"]}
    assert operators & QUANTIZED_KERNELS
    got = devplan.runtime.run(theirs, list(args), runs=2)
    for run in got:
        torch.testing.assert_close(run[0], run_executorch(theirs, args)[0][0], rtol=0, atol=1e-6)
        torch.testing.assert_close(run[0], module(*args), rtol=0, atol=1e-6)


def test_out_schemas_are_the_quantized_librarys_own():
    """The hand-written out schemas equal those ExecuTorch's quantized library registers with
    torch, and its runtime has a kernel for each."""
    from executorch.extension.pybindings import portable_lib

    registered = set(portable_lib._get_operator_names())
    for schema in QUANTIZED.values():
        name, _, overload = schema_name(schema).removeprefix("quantized_decomposed::").partition(".")
        theirs = getattr(getattr(torch.ops.quantized_decomposed, name), overload)._schema
        assert str(schema) == str(theirs)
        assert schema_name(schema) in registered


@pytest.mark.sweep  # end to end through a fresh process
def test_a_saved_quantized_archive_compiles_in_a_fresh_process(tmp_path):
    """Loading a .pt2 needs the quantized_decomposed ops defined; devplan defines them itself."""
    ep, _, _ = quantize("mlp", "per_tensor")
    torch.export.save(ep, tmp_path / "q.pt2")
    done = fresh_devplan("compile", tmp_path / "q.pt2", "-o", tmp_path / "q.pte")
    assert done.returncode == 0, done.stderr
    assert devplan.read_pte(tmp_path / "q.pte").program.executionPlan[0].operators


@pytest.mark.sweep  # end to end through fresh processes; the full suite runs it
def test_an_op_no_library_defines_is_named_in_one_line(tmp_path):
    """A .pt2 whose graph calls a custom op that is not defined where devplan runs: named in
    one line with --kernels, which imports the module that defines it, so that the archive
    loads (and the op, which has no kernel, is what is refused then)."""
    library = (
        "import torch\n"
        "lib = torch.library.Library('devplan_test', 'DEF')\n"
        "lib.define('twice(Tensor x) -> Tensor')\n"
        "lib.impl('twice', lambda x: x * 2, 'CompositeExplicitAutograd')\n"
        "torch.library.register_fake('devplan_test::twice')(lambda x: torch.empty_like(x))\n"
    )
    (tmp_path / "twice_ops.py").write_text(library)
    script = (
        "import torch, twice_ops\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x): return torch.ops.devplan_test.twice(x) + 1\n"
        f"torch.export.save(torch.export.export(M(), (torch.randn(3),)), {str(tmp_path / 'c.pt2')!r})\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, cwd=tmp_path)
    compile_c = ["compile", tmp_path / "c.pt2", "-o", tmp_path / "c.pte"]
    done = fresh_devplan(*compile_c, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and len(done.stderr) < 300
    assert "devplan_test::twice" in done.stderr and "pass --kernels MODULE" in done.stderr
    done = fresh_devplan(*compile_c, "--kernels", "twice_ops", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0
    assert "custom op devplan_test.twice.default has no out variant" in done.stderr, done.stderr
    assert not (tmp_path / "c.pte").exists()


@pytest.mark.parametrize(
    "op_name, argument, code",
    [
        # issue 29's fuzz run: torch's functional quantize read its dtype table past the end (SIGSEGV)
        ("quantized_decomposed::quantize_per_tensor", "dtype", 50),
        # issue 36's 100k run: a changed byte pointed dequantize's keyword-only `out_dtype` (a
        # ScalarType?) at an int value of -19, which torch's functional dequantize read as a dtype
        ("quantized_decomposed::dequantize_per_tensor", "out_dtype", -19),
    ],
)
def test_a_dtype_code_torch_does_not_define_is_refused_not_a_crash(op_name, argument, code):
    """A dtype argument (optional or keyword-only too) holding a number no ScalarType has:
    torch's functional quantized ops crash the process on it; devplan's runtime refuses it in
    one line."""
    import copy

    from devplan.errors import DevplanError
    from devplan.pte import dumps_pte, read_pte

    ep, _, args = quantize("mlp", "per_tensor")
    pte = read_pte(devplan.compile(ep).data)
    program = copy.deepcopy(pte.program)
    plan = program.executionPlan[0]
    op = next(
        i for i, o in enumerate(plan.operators) if (o.name.decode() if isinstance(o.name, bytes) else o.name) == op_name
    )
    call = next(
        i.instrArgs
        for c in plan.chains
        for i in c.instructions
        if hasattr(i.instrArgs, "opIndex") and i.instrArgs.opIndex == op
    )
    position = [a.name for a in QUANTIZED[op_name].arguments].index(argument)
    dtype = [a.name for a in QUANTIZED[op_name].arguments].index("dtype")
    value = copy.deepcopy(plan.values[call.args[dtype]])  # an int value, whatever the argument held
    value.val.intVal = code
    plan.values.append(value)
    call.args[position] = len(plan.values) - 1
    with pytest.raises(DevplanError, match=rf"{argument} is {code}, no ScalarType code"):
        devplan.runtime.run(dumps_pte(program, pte.segments), list(args))
