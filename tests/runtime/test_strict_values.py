"""The reference runtime refuses, as ExecuTorch's does, the values and tables a kernel would
misread: a dtype, dim order or storage offset no tensor can have, an argument of another type
than its schema, a list without its items, a method without its chains or tables, a program of
a newer schema. Each case damages a program devplan compiled, in one line naming the file."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch
from torch import nn

import devplan
from devplan.errors import DevplanError
from devplan.pte import dumps_pte, read_pte
from devplan.pte.fb.EValue import EValueT
from devplan.pte.fb.Instruction import InstructionT
from devplan.pte.fb.Int import IntT
from devplan.pte.fb.KernelTypes import KernelTypes
from testbed.small_programs import ARGS, Block, compiled
from tests.runtime.damaged_programs import (
    damaged,
    executorch_refuses,
    executorch_refuses_in_a_child,
    kernel_calls,
    refused,
)


def test_a_quantized_op_given_the_wrong_dtype_is_one_line():
    """torch's quantized ops assert their input dtype (an AssertionError, not a RuntimeError):
    a float input retyped as int32 (same bytes, so the plan still fits) is refused by name."""
    from devplan.runtime import LoadedMethod
    from testbed.models import pt2e_quantize

    exported, _ = pt2e_quantize(Block(), ARGS)

    def change(plan):
        plan.values[plan.inputs[0]].val.scalarType = 4  # int32 where quantize_per_tensor wants float32

    loaded = LoadedMethod(read_pte(damaged(devplan.compile(exported).data, change), "bad.pte"))
    try:
        with pytest.raises(
            DevplanError,
            match=r"bad.pte: method forward: instruction \d+ "
            r"\(quantized_decomposed::quantize_per_tensor.out\) failed: .*dtype",
        ):
            loaded.execute(loaded.sample_inputs())
    finally:
        loaded.release()


def _first_tensor(plan):
    return next(v.val for v in plan.values if v.valType == KernelTypes.Tensor and len(v.val.sizes) == 2)


@pytest.mark.parametrize("order,needle", [([0, 0], "dim order [0, 0]"), ([0, 1, 2], "dim order [0, 1, 2]")])
def test_a_dim_order_that_is_no_order_of_the_dimensions_is_refused(order, needle):
    """Found by benchmarks/fuzz.py: a changed byte in a dim order ran in devplan's runtime."""

    def change(plan):
        _first_tensor(plan).dimOrder = order

    data = damaged(compiled(), change)
    refused(data, needle, "not an order of its 2 dimensions")
    assert executorch_refuses(data)


def test_a_storage_offset_is_refused():
    def change(plan):
        _first_tensor(plan).storageOffset = 24

    data = damaged(compiled(), change)
    refused(data, "storage offset 24")
    assert executorch_refuses(data)


def test_a_chain_without_instructions_or_an_instruction_without_a_call_is_refused():
    def no_list(plan):
        plan.chains[0].instructions = None

    def no_call(plan):
        plan.chains[0].instructions[0] = InstructionT()

    for change, needle in ((no_list, "a chain has no list of instructions"), (no_call, "instruction 0 has no call")):
        data = damaged(compiled(), change)
        refused(data, needle)
        assert executorch_refuses(data)


@pytest.mark.parametrize("field", ["values", "inputs", "outputs", "nonConstBufferSizes"])
def test_a_method_without_one_of_its_tables_is_refused(field, tmp_path):
    """A method without outputs ran with none, where ExecuTorch's runtime refuses it (the
    fuzz run's seed 339)."""

    def change(plan):
        setattr(plan, field, None)

    data = damaged(compiled(), change)
    refused(data, "has no ", " table")
    assert executorch_refuses_in_a_child(data, tmp_path)


def test_a_quantize_whose_bounds_cross_is_refused():
    """Found by benchmarks/fuzz.py: torch's quantize runs with quant_min above quant_max, where
    ExecuTorch's quantized kernels abort the process (so its runtime is not asked here)."""
    pytest.importorskip("executorch.kernels.quantized")
    from testbed.quantized import quantize

    def change(plan):
        for value in plan.values:
            if value.valType == KernelTypes.Int and value.val.intVal == -128:  # every quant_min
                value.val.intVal = 1000

    data = damaged(devplan.compile(quantize("mlp", "per_tensor")[0]).data, change)
    with pytest.raises(DevplanError, match="quant_min 1000 is greater than quant_max 127"):
        devplan.run(read_pte(data, name="bad.pte"), [torch.randn(2, 8)])


def test_a_kernel_given_more_arguments_than_its_schema_and_results_is_refused():
    def change(plan):
        call = kernel_calls(plan)[0].instrArgs
        call.args = [*list(call.args), 0, 0]

    data = damaged(compiled(), change)
    refused(data, "instruction 0 gives aten::linear.out 7 arguments and results; its schema takes 4 and 1")
    assert executorch_refuses(data)


def test_a_list_of_numbers_holding_a_tensor_is_refused():
    """ExecuTorch's runtime aborts the process on it (so it is not asked here)."""

    def change(plan):
        numbers = next(v.val for v in plan.values if v.valType == KernelTypes.IntList and len(v.val.items))
        numbers.items = [next(i for i, v in enumerate(plan.values) if v.valType == KernelTypes.Tensor)]

    refused(damaged(compiled(), change), "a list of numbers, holds a value that is not a number")


@pytest.mark.parametrize(
    "name, overload",
    [
        ("aten::__class__", "__name__"),
        ("aten::add", "__class__"),
        ("__builtins__::eval", ""),
        ("aten::_ops", "default"),
    ],
)
def test_an_operator_name_is_looked_up_only_as_an_op(name, overload):
    """A name from the file reaches getattr on torch.ops: attributes that are not ops (a class,
    a string, a module) are an unknown operator, never called nor a traceback."""

    def change(plan):
        plan.operators[0].name, plan.operators[0].overload = name, overload

    refused(damaged(compiled(), change), "which the reference runtime does not know")


def test_a_constant_segment_without_offsets_is_refused_as_executorch_refuses_it():
    """Found by the 100,000-mutant fuzz run: one changed byte empties the constant segment's
    offsets, and ExecuTorch's runtime (built without the deprecated constant_buffer) refuses it."""
    from testbed.small_programs import NoConstants

    pte = read_pte(devplan.compile(torch.export.export(NoConstants(), (torch.randn(3, 4), torch.randn(3, 4)))).data)
    program = copy.deepcopy(pte.program)
    program.constantSegment.offsets = []  # a program without constants: no constant is looked up
    data = dumps_pte(program, pte.segments)
    with pytest.raises(DevplanError, match="the constant segment lists no offsets"):
        devplan.run(data, [torch.randn(3, 4), torch.randn(3, 4)])
    assert executorch_refuses(data, (torch.randn(3, 4), torch.randn(3, 4)))


def test_a_newer_program_schema_version_is_refused():
    pte = read_pte(compiled())
    program = copy.deepcopy(pte.program)
    program.version = 20  # as a fuzzed byte made it; ExecuTorch's runtime reads version 0 only
    data = dumps_pte(program, pte.segments)
    refused(data, "program schema version 20")
    assert executorch_refuses(data)


class Normed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4)

    def forward(self, x):
        return self.norm(x).sum(0)


@pytest.mark.parametrize(
    "op,argument,kind",
    [("aten::sum", 1, "Bool"), ("aten::native_layer_norm", 4, "Int"), ("aten::sum", 0, "Int")],
    ids=["int_list_given_a_bool", "float_given_an_int", "tensor_given_an_int"],
)
def test_an_argument_of_another_type_than_its_schema_is_refused(op, argument, kind):
    """ExecuTorch's kernels read an int[] argument with toIntList, a float with toDouble and a
    tensor with toTensor, which abort the process on a value of another type (found by the fuzz run); devplan refuses it."""

    def change(plan):
        index = next(
            i for i, o in enumerate(plan.operators) if (o.name.decode() if isinstance(o.name, bytes) else o.name) == op
        )
        call = next(i.instrArgs for i in kernel_calls(plan) if i.instrArgs.opIndex == index)
        other = next(i for i, v in enumerate(plan.values) if v.valType == getattr(KernelTypes, kind))
        call.args[argument] = other

    module = Normed()
    data = damaged(devplan.compile(torch.export.export(module, ARGS)).data, change)
    refused(data, f"a {kind}; the program is damaged")


def test_a_list_without_its_items_is_refused():
    def change(plan):
        next(v for v in plan.values if v.valType == KernelTypes.IntList).val.items = None

    data = damaged(compiled(), change)
    refused(data, "is a list without its items")
    assert executorch_refuses(data)


def test_a_kernel_call_without_its_result_is_refused():
    """ExecuTorch's kernels take exactly their schema's arguments and then their results."""

    def change(plan):
        call = kernel_calls(plan)[-1].instrArgs
        call.args = call.args[:-1]

    data = damaged(compiled(), change)
    refused(data, "arguments and results; its schema takes")
    assert executorch_refuses(data)


class Cast(nn.Module):
    def forward(self, x):
        return x.to(torch.float64) * 2


def test_a_dim_order_kernel_given_a_value_of_another_type_is_refused():
    """ExecuTorch's _to_dim_order_copy reads non_blocking with toBool, which aborts on an int list
    (found by the fuzz run in ExecuTorch's own program); devplan refuses it."""
    from testbed.executorch import executorch_pte

    def change(plan):
        index = next(i for i, o in enumerate(plan.operators) if "_to_dim_order_copy" in str(o.name))
        call = next(i.instrArgs for i in kernel_calls(plan) if i.instrArgs.opIndex == index)
        call.args[1] = next(i for i, v in enumerate(plan.values) if v.valType == KernelTypes.IntList)

    data = damaged(executorch_pte(torch.export.export(Cast(), ARGS)), change)
    refused(data, "_to_dim_order_copy.out's non_blocking value", "a IntList; the program is damaged")


def test_a_non_blocking_dim_order_copy_is_refused():
    """Found by the final fuzz run: a _to_dim_order_copy made non-blocking (one byte of
    ExecuTorch's own program) ran in devplan; ExecuTorch's kernel refuses it (InvalidArgument)."""
    from testbed.executorch import executorch_pte

    def change(plan):
        index = next(i for i, o in enumerate(plan.operators) if "_to_dim_order_copy" in str(o.name))
        call = next(i.instrArgs for i in kernel_calls(plan) if i.instrArgs.opIndex == index)
        plan.values[call.args[1]].val.boolVal = True

    data = executorch_pte(torch.export.export(Cast(), ARGS))
    bad = damaged(data, change)
    refused(bad, "(dim_order_ops::_to_dim_order_copy.out) failed: non_blocking is true")
    assert executorch_refuses(bad)
    assert devplan.run(data, list(ARGS))  # the program as ExecuTorch wrote it runs


def test_a_method_without_chains_is_refused():
    """ExecuTorch's runtime loads no method without a chain (found by the fuzz run)."""

    def change(plan):
        plan.chains = []

    data = damaged(compiled(), change)
    refused(data, "has no chain of instructions")
    assert executorch_refuses(data)


class _Add(nn.Module):
    def forward(self, x, y):
        return x + y


@pytest.mark.parametrize("dtype, code", [("uint16", 27), ("uint32", 28)])  # (uint64 would outgrow the buffer)
def test_a_tensor_of_a_barebones_unsigned_type_is_refused(dtype, code, tmp_path):
    """Found by the fuzz run: an add given a uint32 input ran in devplan's runtime, where
    ExecuTorch's type promotion asserts and aborts the process."""
    args = (torch.randn(2, 3), torch.randn(2, 3))

    def change(plan):
        plan.values[plan.inputs[1]].val.scalarType = code

    data = damaged(devplan.compile(torch.export.export(_Add(), args)).data, change)
    with pytest.raises(
        DevplanError,
        match=f"bad.pte: method forward: value \\d+ has element type {dtype}, which "
        f"ExecuTorch's kernels do not compute on",
    ):
        devplan.run(read_pte(data, name="bad.pte"), [args[0], torch.zeros(2, 3, dtype=getattr(torch, dtype))])
    if dtype == "uint32":  # ExecuTorch's runtime aborts the process on it, so it is asked in a child
        path = tmp_path / "unsigned.pte"
        path.write_bytes(data)
        execute = (
            "import sys, torch; from executorch.runtime import Runtime; "
            "m = Runtime.get().load_program(sys.argv[1]).load_method('forward'); "
            "m.execute([torch.randn(2, 3), torch.zeros(2, 3, dtype=torch.uint32)])"
        )
        assert subprocess.run([sys.executable, "-c", execute, str(path)], capture_output=True).returncode != 0


def test_a_linear_bias_executorchs_kernel_refuses_is_refused():
    """Found by the final fuzz run: a quantized MLP whose linear bias was made 2-D ran in devplan
    (torch broadcasts the bias) where ExecuTorch's linear kernel refuses it (InvalidArgument)."""
    from testbed.quantized import quantize

    ep, _, args = quantize("mlp", "per_tensor")
    data = devplan.compile(ep).data
    plan = read_pte(data).program.executionPlan[0]
    linear = next(i for i, o in enumerate(plan.operators) if o.name in (b"aten::linear", "aten::linear"))

    def change(plan):
        call = next(i.instrArgs for i in kernel_calls(plan) if i.instrArgs.opIndex == linear)
        bias = plan.values[call.args[2]].val
        bias.sizes, bias.dimOrder = [1, *bias.sizes], [0, 1]  # the same bytes as a [1, m] tensor

    bad = damaged(data, change)
    with pytest.raises(
        DevplanError, match=r"failed: bias is torch.float32\[1, \d+\]; ExecuTorch's linear kernel takes"
    ):
        devplan.run(bad, list(args))
    assert executorch_refuses(bad, args)
    assert devplan.run(data, list(args))  # the program as compiled runs


@pytest.mark.parametrize("code", [-19, 99])
def test_a_dtype_code_torch_does_not_define_is_refused_for_every_kernel(code, tmp_path):
    """sum.IntList_out's optional dtype given a number no ScalarType has: torch's own kernel
    reads its dtype table past the end and crashes the process (SIGSEGV at -19); devplan's
    runtime refuses it in one line, in a fresh process as `devplan run` would."""

    def change(plan):
        index = next(
            i
            for i, o in enumerate(plan.operators)
            if (o.name.decode() if isinstance(o.name, bytes) else o.name) == "aten::sum"
        )
        call = next(i.instrArgs for i in kernel_calls(plan) if i.instrArgs.opIndex == index)
        value = EValueT()
        value.valType, value.val = KernelTypes.Int, IntT()
        value.val.intVal = code
        plan.values.append(value)
        call.args[3] = len(plan.values) - 1  # self, dim, keepdim, dtype

    path = tmp_path / "bad.pte"
    path.write_bytes(damaged(compiled(), change))
    torch.save(list(ARGS), tmp_path / "args.pt")
    script = "import sys, torch, devplan; devplan.run(sys.argv[1], torch.load(sys.argv[2]))"
    done = subprocess.run(
        [sys.executable, "-c", script, str(path), str(tmp_path / "args.pt")], capture_output=True, text=True
    )
    assert done.returncode == 1 and f"dtype is {code}, no ScalarType code" in done.stderr, (
        done.returncode,
        done.stderr[-2000:],
    )
