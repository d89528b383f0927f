"""devplan's runtime agrees with ExecuTorch's or refuses (issue 29, findings 2 and 3): jumps
count within their chain as ExecuTorch's runtime counts them, and what ExecuTorch's runtime
refuses or could only crash on (a tensor without data or dim order, a DYNAMIC_UNBOUND shape,
an Int jump condition, a kernel its libraries do not register, a tensor said to live on
another device than its buffer) is refused in one line. Each program is a compiled one,
damaged or rearranged here."""

from __future__ import annotations

import copy

import pytest
import torch

import devplan
from devplan.pte import read_pte
from devplan.pte.fb.Bool import BoolT
from devplan.pte.fb.DeviceType import DeviceType
from devplan.pte.fb.EValue import EValueT
from devplan.pte.fb.ExtraTensorInfo import ExtraTensorInfoT
from devplan.pte.fb.Instruction import InstructionT
from devplan.pte.fb.InstructionArguments import InstructionArguments
from devplan.pte.fb.Int import IntT
from devplan.pte.fb.JumpFalseCall import JumpFalseCallT
from devplan.pte.fb.KernelCall import KernelCallT
from devplan.pte.fb.KernelTypes import KernelTypes
from devplan.pte.fb.TensorShapeDynamism import TensorShapeDynamism
from testbed.models import run_executorch
from testbed.small_programs import ARGS, compiled
from tests.runtime.damaged_programs import damaged, executorch_refuses, refused


def _value(plan, kind, table, field, value) -> int:
    evalue = EValueT()
    evalue.valType, evalue.val = kind, table()
    setattr(evalue.val, field, value)
    plan.values.append(evalue)
    return len(plan.values) - 1


def _jump(condition: int, destination: int) -> InstructionT:
    jump = InstructionT()
    jump.instrArgsType, jump.instrArgs = InstructionArguments.JumpFalseCall, JumpFalseCallT()
    jump.instrArgs.condValueIndex, jump.instrArgs.destinationInstruction = condition, destination
    return jump


def _double_the_output(plan) -> InstructionT:
    """A kernel call doubling the output in place: the program's own mul.Scalar_out (its
    instruction 2, `relu * 2`) with the output as its input and out."""
    mul = next(
        i
        for i in plan.chains[0].instructions
        if i.instrArgsType == InstructionArguments.KernelCall and i.instrArgs.opIndex == 2
    )
    out = plan.outputs[0]
    double = InstructionT()
    double.instrArgsType, double.instrArgs = InstructionArguments.KernelCall, KernelCallT()
    double.instrArgs.opIndex, double.instrArgs.args = 2, [out, mul.instrArgs.args[1], out, out]
    return double


def _past_its_chain(plan, false: int) -> list[list]:
    """Chain 0 ends in a jump to 6, past its own 5 instructions: ExecuTorch ends the chain there
    and runs chain 1 from its start (a program-wide 6 would skip chain 1's first doubling)."""
    original = list(plan.chains[0].instructions)
    return [original + [_jump(false, len(original) + 2)], [_double_the_output(plan), _double_the_output(plan)]]


def _within_the_second_chain(plan, false: int) -> list[list]:
    """Chain 1 jumps over its first doubling to its own instruction 2 (program-wide 2 would run
    chain 0 again from its instruction 2, and so on for ever)."""
    original = list(plan.chains[0].instructions)
    return [original, [_jump(false, 2), _double_the_output(plan), _double_the_output(plan)]]


def _negative(plan, false: int) -> list[list]:
    """A negative destination is past every chain's end as ExecuTorch reads it (an unsigned
    index): chain 0 ends and chain 1 runs (clamped to 0, it would loop for ever)."""
    original = list(plan.chains[0].instructions)
    return [original + [_jump(false, -1), _double_the_output(plan)], [_double_the_output(plan)]]


@pytest.mark.parametrize(
    "layout, doublings",
    [(_past_its_chain, 2), (_within_the_second_chain, 1), (_negative, 1)],
    ids=["past_its_chain", "within_the_second_chain", "negative"],
)
def test_a_jump_counts_within_its_chain_as_in_executorch(layout, doublings):
    def change(plan):
        false = _value(plan, KernelTypes.Bool, BoolT, "boolVal", False)
        chains = layout(plan, false)
        plan.chains = [copy.deepcopy(plan.chains[0]) for _ in chains]
        for chain, instructions in zip(plan.chains, chains):
            chain.instructions, chain.stacktrace = instructions, None

    plain = compiled()
    data = damaged(plain, change)
    (expected,) = run_executorch(plain, ARGS)[0]
    (theirs,) = run_executorch(data, ARGS)[0]
    torch.testing.assert_close(theirs, expected * 2**doublings)
    (ours,) = devplan.run(read_pte(data, name="jumps.pte"), list(ARGS))[0]
    torch.testing.assert_close(ours, theirs)


def test_a_tensor_with_no_data_that_is_no_input_or_output_is_refused_not_zeros():
    """A constant whose data index is 0 and that has no place in a buffer: ExecuTorch's
    runtime gives it no memory (its kernel reads a null pointer); devplan's used to read zeros."""

    def change(plan):
        plan.values[0].val.dataBufferIdx = 0  # the linear's weight

    refused(
        damaged(compiled(), change),
        "value 0",
        "is a tensor with no data and no place in a buffer",
        "instruction 0 reads it",
    )


def _first_planned(plan):
    return next(
        v.val
        for v in plan.values
        if v.valType == KernelTypes.Tensor and v.val.allocationInfo is not None and len(v.val.sizes) == 2
    )


def _no_dim_order(plan):
    _first_planned(plan).dimOrder = None


def _unbound(plan):
    _first_planned(plan).shapeDynamism = TensorShapeDynamism.DYNAMIC_UNBOUND


def _int_condition(plan):
    plan.chains[0].instructions.append(_jump(_value(plan, KernelTypes.Int, IntT, "intVal", 0), 0))


def _said_on_cuda(plan):
    tensor = _first_planned(plan)
    tensor.extraTensorInfo = ExtraTensorInfoT()
    tensor.extraTensorInfo.deviceType, tensor.extraTensorInfo.deviceIndex = DeviceType.CUDA, 0


def _renamed(name: str):
    def change(plan):  # relu.out's schema is (self, *, out), as erfinv.out's and sgn.out's
        relu = next(op for op in plan.operators if op.name in (b"aten::relu", "aten::relu"))
        relu.name = name

    return change


def _unplanned_intermediate(plan):
    plan.values[4].val.allocationInfo = None  # the relu's out tensor


@pytest.mark.parametrize(
    "change, needles, executorch_too",
    [
        (_no_dim_order, ["value 2", "has no dim order"], True),
        (_unbound, ["value 2", "DYNAMIC_UNBOUND"], True),
        (_int_condition, ["instruction 4", "value 12, of type Int", "only a Bool or a bool tensor"], True),
        (_said_on_cuda, ["value 2", "cuda:0", "buffer 1", "on cpu"], False),
        (_renamed("aten::erfinv"), ["instruction 1", "aten::erfinv.out", "do not register"], True),
        (_renamed("aten::sgn"), ["instruction 1", "aten::sgn.out", "do not register"], True),
        (
            _unplanned_intermediate,
            ["value 4", "is a tensor with no data and no place in a buffer", "instruction 1 writes it"],
            False,
        ),
    ],
    ids=["no_dim_order", "unbound", "int_condition", "said_on_cuda", "erfinv", "sgn", "unplanned_intermediate"],
)
def test_what_executorch_refuses_or_cannot_run_is_refused(change, needles, executorch_too):
    """`executorch_too`: ExecuTorch's runtime refuses it as well (the others it runs on other
    terms than devplan's, or crashes on, so it is not asked)."""
    data = damaged(compiled(), change)
    refused(data, *needles)
    if executorch_too:
        assert executorch_refuses(data)
