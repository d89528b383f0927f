"""The reference runtime is as strict as ExecuTorch's: a program that would give a silently
wrong answer (a constant it does not hold, a functional op whose result is dropped, a result
larger than its planned bytes, a move between values of different shapes) or run for ever is
refused in one line naming the instruction. Each case damages a program devplan compiled."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import devplan
from devplan.errors import DevplanError
from devplan.pte import read_pte
from devplan.pte.fb.Bool import BoolT
from devplan.pte.fb.EValue import EValueT
from devplan.pte.fb.FreeCall import FreeCallT
from devplan.pte.fb.Instruction import InstructionT
from devplan.pte.fb.InstructionArguments import InstructionArguments
from devplan.pte.fb.Int import IntT
from devplan.pte.fb.JumpFalseCall import JumpFalseCallT
from devplan.pte.fb.KernelTypes import KernelTypes
from devplan.pte.fb.MoveCall import MoveCallT
from devplan.runtime import HostAllocator, registered
from testbed.cli import devplan as devplan_cli
from testbed.small_programs import ARGS, compiled
from tests.runtime.damaged_programs import (
    constants,
    damaged,
    executorch_refuses,
    kernel_calls,
    refused,
)


def test_a_constant_the_program_does_not_hold_is_refused_not_zeros():
    def change(plan):
        constants(plan)[0].dataBufferIdx = 999

    data = damaged(compiled(), change)
    refused(data, "names constant 999, which the program does not hold")
    assert executorch_refuses(data)


def test_a_functional_op_in_place_of_its_out_variant_is_refused():
    def change(plan):
        relu = next(op for op in plan.operators if op.name == b"aten::relu" or op.name == "aten::relu")
        relu.overload = "default"

    data = damaged(compiled(), change)
    refused(data, "aten::relu.default, which is not an out variant")
    assert executorch_refuses(data)


def test_a_result_larger_than_its_planned_tensor_is_refused():
    def change(plan):
        # the relu's out tensor declared one row short: its kernel would write past it
        relu_index = next(i for i, op in enumerate(plan.operators) if op.name in (b"aten::relu", "aten::relu"))
        call = next(i.instrArgs for i in kernel_calls(plan) if i.instrArgs.opIndex == relu_index)
        out = plan.values[call.args[-1]].val
        out.sizes = [2, *list(out.sizes)[1:]]

    data = damaged(compiled(), change)
    refused(data, "aten::relu", "where the plan holds (2, 6)")
    assert executorch_refuses(data)


def test_a_delegate_result_larger_than_its_planned_tensor_is_refused():
    def change(plan):
        call = next(
            i.instrArgs for i in plan.chains[0].instructions if i.instrArgsType == InstructionArguments.DelegateCall
        )
        out = plan.values[call.args[-1]].val
        out.sizes = [1, *list(out.sizes)[1:]] if len(out.sizes) > 1 else [1]

    # the payload writes its output straight into the program's tensor, which no longer has its shape
    refused(damaged(compiled(delegates=["cuda:0"]), change), "delegate output 0 does not match the payload's output")


def test_a_move_between_values_of_different_shapes_is_refused():
    def change(plan):
        tensors = [i for i, v in enumerate(plan.values) if v.valType == KernelTypes.Tensor]
        shapes = {i: tuple(plan.values[i].val.sizes) for i in tensors}
        source = next(i for i in tensors if shapes[i] != shapes[plan.outputs[0]])
        move = InstructionT()
        move.instrArgsType, move.instrArgs = InstructionArguments.MoveCall, MoveCallT()
        move.instrArgs.moveFrom, move.instrArgs.moveTo = source, plan.outputs[0]
        plan.chains[0].instructions.append(move)

    refused(damaged(compiled(), change), "moves value", "of another type or shape")


def test_a_jump_loop_padded_with_free_calls_is_bounded_by_what_it_executes():
    """The bound counts instructions executed beyond one pass: 20,000 FreeCalls in the loop
    body do not buy it 20,000 times more iterations (it was 1000x the program's length)."""

    def change(plan):
        false = EValueT()
        false.valType, false.val = KernelTypes.Bool, BoolT()
        false.val.boolVal = False
        plan.values.append(false)
        body = []
        for _ in range(20_000):
            free = InstructionT()
            free.instrArgsType, free.instrArgs = InstructionArguments.FreeCall, FreeCallT()
            free.instrArgs.valueIndex = 0
            body.append(free)
        jump = InstructionT()
        jump.instrArgsType, jump.instrArgs = InstructionArguments.JumpFalseCall, JumpFalseCallT()
        jump.instrArgs.condValueIndex, jump.instrArgs.destinationInstruction = len(plan.values) - 1, 0
        plan.chains[0].instructions = body + [jump]

    refused(damaged(compiled(), change), "executed 1020001 instructions without finishing; its jumps loop")


class Wide(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(256, 256)

    def forward(self, x):
        return self.proj(x).relu()


def test_a_jump_loop_of_heavy_kernels_is_bounded_by_the_elements_it_touches():
    """Instructions run again by a jump count the tensor elements they read and write, not only
    their number: a loop over a 64x256 linear layer (a few hundred thousand elements a turn)
    is refused after EXTRA_ELEMENTS of them, not after a million instructions."""
    import time

    from devplan.runtime.interpreter import EXTRA_ELEMENTS

    args = (torch.randn(64, 256),)
    data = devplan.compile(torch.export.export(Wide().eval().requires_grad_(False), args)).data

    def loop(plan):
        false = EValueT()
        false.valType, false.val = KernelTypes.Bool, BoolT()
        false.val.boolVal = False
        plan.values.append(false)
        jump = InstructionT()
        jump.instrArgsType, jump.instrArgs = InstructionArguments.JumpFalseCall, JumpFalseCallT()
        jump.instrArgs.condValueIndex, jump.instrArgs.destinationInstruction = len(plan.values) - 1, 0
        plan.chains[0].instructions = [*plan.chains[0].instructions, jump]

    started = time.monotonic()
    with pytest.raises(DevplanError) as error:
        devplan.run(read_pte(damaged(data, loop), name="bad.pte"), list(args))
    message = str(error.value)
    assert message.startswith("bad.pte") and "\n" not in message
    assert f"more than {EXTRA_ELEMENTS} tensor elements beyond one pass" in message and "jumps loop" in message
    assert time.monotonic() - started < 60


def test_names_from_the_file_cannot_split_the_error_line_or_drive_the_terminal(tmp_path):

    def change(plan):
        plan.operators[0].name = "aten::\x1b[2J\x1b[31mevil\nsecond line"

    path = tmp_path / "bad.pte"
    path.write_bytes(damaged(compiled(), change))
    run = devplan_cli("run", path)
    assert run.returncode == 2
    (line,) = run.stderr.splitlines()
    assert "\x1b" not in line and "aten::\\x1b[2J\\x1b[31mevil\\nsecond line" in line
    shown = devplan_cli("inspect", path, "-s", "instructions")
    assert shown.returncode == 0 and "\x1b" not in shown.stdout
    assert "evil\\nsecond line" in shown.stdout


def _first_planned(plan):
    return next(v.val for v in plan.values if v.valType == KernelTypes.Tensor and v.val.allocationInfo is not None)


def _negative_size(plan):
    _first_planned(plan).sizes = [-3, 6]


def _outside_its_buffer(plan):
    _first_planned(plan).allocationInfo.memoryOffsetLow = 1 << 20


def _overflowing_shape(plan):
    _first_planned(plan).sizes = [1 << 30] * 4


@pytest.mark.parametrize(
    "change, needle",
    [
        (_negative_size, "has the shape [-3, 6], which no tensor has"),
        (_outside_its_buffer, "lies outside its buffer"),
        (_overflowing_shape, "which no tensor has"),
    ],
    ids=["negative", "outside", "overflow"],
)
@pytest.mark.parametrize(
    "command",
    [
        ["inspect"],
        ["inspect", "--json"],
        ["inspect", "--svg", "{tmp}/x.svg"],
        ["inspect", "--trace", "{tmp}/x.json"],
        ["check"],
        ["check", "--max-ratio", "1.5"],
    ],
    ids=["inspect", "json", "svg", "trace", "check", "max_ratio"],
)
def test_impossible_shapes_and_places_are_one_line_in_every_view(tmp_path, change, needle, command):
    """A damaged size or offset is named, never a traceback, and check never passes it."""

    path = tmp_path / "bad.pte"
    path.write_bytes(damaged(compiled(), change))
    run = devplan_cli(command[0], path, *(a.format(tmp=tmp_path) for a in command[1:]))
    assert run.returncode == 2, run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"devplan: error: {path}: method forward: value ") and needle in line


def test_an_unplanned_value_nothing_uses_takes_no_memory():
    """A 3 GiB tensor value that no instruction, input or output names (a 300-byte damage)
    is never materialized: the run needs only what the plan and the constants need."""
    from devplan.pte.fb.Tensor import TensorT
    from devplan.runtime import LoadedMethod

    def change(plan):
        huge = EValueT()
        huge.valType, huge.val = KernelTypes.Tensor, TensorT()
        huge.val.scalarType, huge.val.sizes, huge.val.dimOrder = 6, [3 << 28], [0]  # float32: 3 GiB
        plan.values.append(huge)

    data = compiled()
    loaded = LoadedMethod(read_pte(damaged(data, change)))
    try:
        assert loaded.values[-1].numel() == 0
        (got,) = loaded.execute(list(ARGS))
        torch.testing.assert_close(got, devplan.run(data, list(ARGS))[0][0])
    finally:
        loaded.release()


def _int_list(plan, numbers: list[int]) -> int:
    """Append Int values and an IntList of them to `plan`; the list's value index."""
    from devplan.pte.fb.IntList import IntListT

    items = []
    for number in numbers:
        value = EValueT()
        value.valType, value.val = KernelTypes.Int, IntT()
        value.val.intVal = number
        plan.values.append(value)
        items.append(len(plan.values) - 1)
    listed = EValueT()
    listed.valType, listed.val = KernelTypes.IntList, IntListT()
    listed.val.items = items
    plan.values.append(listed)
    return len(plan.values) - 1


def _empty_dim_order_into_relu_out(size: list[int]):
    """A change making the relu's instruction a dim_order_ops::_empty_dim_order.out that takes
    its size, `size`, from the program and writes the relu's (static) out tensor."""

    def change(plan):
        relu_index = next(i for i, op in enumerate(plan.operators) if op.name in (b"aten::relu", "aten::relu"))
        plan.operators[relu_index].name, plan.operators[relu_index].overload = "dim_order_ops::_empty_dim_order", "out"
        call = next(i.instrArgs for i in kernel_calls(plan) if i.instrArgs.opIndex == relu_index)
        none = EValueT()
        none.valType = KernelTypes.Null
        plan.values.append(none)
        out = call.args[-1]
        call.args = [_int_list(plan, size), len(plan.values) - 1, out, out]

    return change


@pytest.mark.parametrize(
    "size, needle",
    [
        ([1 << 40], "does not fit the"),  # torch would grow the arena to 4 TiB
        ([2, 6], "where the plan holds (3, 6)"),  # fits the arena, but not the planned tensor
    ],
    ids=["past_the_arena", "past_the_tensor"],
)
def test_a_size_from_the_file_cannot_grow_a_tensor(size, needle):
    refused(damaged(compiled(), _empty_dim_order_into_relu_out(size)), "_empty_dim_order.out", needle)


@pytest.mark.sweep  # test_inputs_count_against_the_memory_limit_before_they_are_made keeps the kind fast
def test_memory_past_the_limit_is_refused_naming_the_buffer_or_value(tmp_path):

    from devplan.pte.fb.Tensor import TensorT
    from devplan.runtime import LoadedMethod

    data = compiled()
    with pytest.raises(DevplanError, match=r"bad.pte: method forward: buffer 1 \(cpu\) needs \d+ bytes.*--max-memory"):
        LoadedMethod(read_pte(data, "bad.pte"), max_memory=64)

    def change(plan):  # a 3 GiB unplanned output: the caller's memory, sized by the file
        huge = EValueT()
        huge.valType, huge.val = KernelTypes.Tensor, TensorT()
        huge.val.scalarType, huge.val.sizes, huge.val.dimOrder = 6, [3 << 28], [0]
        plan.values.append(huge)
        plan.outputs = [*plan.outputs, len(plan.values) - 1]

    # it takes no memory until a run needs it, and then it is refused
    loaded = LoadedMethod(read_pte(damaged(data, change), "bad.pte"), max_memory=1 << 30)
    with pytest.raises(DevplanError, match=r"value \d+, an unplanned tensor of \[805306368\] needs 3221225472 bytes"):
        loaded.execute(loaded.sample_inputs())
    loaded.release()
    path = tmp_path / "model.pte"
    path.write_bytes(data)
    for limit, needle in (("16B", "buffer 1 (cpu) needs"), ("lots", "bad --max-memory 'lots'"), ("64MiB", None)):
        run = devplan_cli("run", path, "--max-memory", limit)
        assert run.returncode == (2 if needle else 0), run.stderr
        assert needle is None or (len(run.stderr.splitlines()) == 1 and needle in run.stderr), run.stderr


def test_inputs_count_against_the_memory_limit_before_they_are_made(tmp_path):
    """An input the file declares 4 GiB (left to the caller, as an unplanned input is): its
    sample is counted against --max-memory before it is made, and refused in one line."""
    from testbed.peak import run_measured

    def huge_input(plan):
        tensor = plan.values[plan.inputs[0]].val
        tensor.sizes, tensor.allocationInfo = [1 << 16, 1 << 14], None

    path = tmp_path / "bad.pte"
    path.write_bytes(damaged(compiled(), huge_input))
    run, peak = run_measured(
        ["-m", "devplan", "run", str(path), "--max-memory", "64MiB"], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, run.stderr
    assert "bad.pte: method forward: input 0, a sample tensor of [65536, 16384] needs 4294967296 bytes" in run.stderr
    assert "--max-memory" in run.stderr
    assert peak is not None and peak < 1 << 30, peak


def test_an_arena_the_allocator_cannot_give_is_one_line():
    class Exhausted(HostAllocator):
        def allocate(self, nbytes, device):
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 TiB")

    with pytest.raises(
        DevplanError,
        match=r"bad.pte: method forward: buffer \d+ \(cuda:0\) of \d+ bytes cannot be "
        r"allocated \(CUDA out of memory",
    ):
        with registered("cuda", Exhausted()):
            devplan.run(read_pte(compiled(delegates=["cuda:0"]), name="bad.pte"), list(ARGS))
