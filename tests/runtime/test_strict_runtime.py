"""The reference runtime is as strict as ExecuTorch's: a program that would give a silently
wrong answer (a constant it does not hold, a functional op whose result is dropped, a result
larger than its planned bytes, a move between values of different shapes) or run for ever is
refused in one line naming the instruction. Each case damages a program devplan compiled."""

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
from testbed.models import run_executorch
from testbed.small_programs import ARGS, Block, compiled


def damaged(data: bytes, change) -> bytes:
    """`data` rewritten after change(plan) edits a copy of its first method."""
    pte = read_pte(data)
    program = copy.deepcopy(pte.program)
    change(program.executionPlan[0])
    return dumps_pte(program, pte.segments)


def refused(data: bytes, *needles: str) -> str:
    with pytest.raises(DevplanError) as error:
        with registered("cuda", HostAllocator()):
            devplan.run(read_pte(data, name="bad.pte"), list(ARGS))
    message = str(error.value)
    assert message.startswith("bad.pte") and "\n" not in message
    for needle in needles:
        assert needle in message, message
    return message


def executorch_refuses(data: bytes, args: tuple = ARGS) -> bool:
    try:
        run_executorch(data, args)
    except Exception:  # its runtime raises RuntimeError or ValueError for a program it will not load
        return True
    return False


def executorch_refuses_in_a_child(data: bytes, tmp_path) -> bool:
    """For damage on which ExecuTorch's runtime aborts the process rather than raising."""
    path = tmp_path / "damaged.pte"
    path.write_bytes(data)
    load = "import sys; from executorch.runtime import Runtime; Runtime.get().load_program(sys.argv[1]).load_method('forward')"
    return subprocess.run([sys.executable, "-c", load, str(path)], capture_output=True).returncode != 0


def _constants(plan) -> list:
    return [
        v.val
        for v in plan.values
        if v.valType == KernelTypes.Tensor and v.val.dataBufferIdx > 0 and v.val.allocationInfo is None
    ]


def _kernel_calls(plan) -> list:
    return [i for i in plan.chains[0].instructions if i.instrArgsType == InstructionArguments.KernelCall]


def test_a_constant_the_program_does_not_hold_is_refused_not_zeros():
    def change(plan):
        _constants(plan)[0].dataBufferIdx = 999

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
        call = next(i.instrArgs for i in _kernel_calls(plan) if i.instrArgs.opIndex == relu_index)
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
    from devplan.pte.fb.Int import IntT
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
        call = next(i.instrArgs for i in _kernel_calls(plan) if i.instrArgs.opIndex == relu_index)
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
        call = _kernel_calls(plan)[0].instrArgs
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
        call = next(i.instrArgs for i in _kernel_calls(plan) if i.instrArgs.opIndex == index)
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
        call = _kernel_calls(plan)[-1].instrArgs
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
        call = next(i.instrArgs for i in _kernel_calls(plan) if i.instrArgs.opIndex == index)
        call.args[1] = next(i for i, v in enumerate(plan.values) if v.valType == KernelTypes.IntList)

    data = damaged(executorch_pte(torch.export.export(Cast(), ARGS)), change)
    refused(data, "_to_dim_order_copy.out's non_blocking value", "a IntList; the program is damaged")


def test_a_non_blocking_dim_order_copy_is_refused():
    """Found by the final fuzz run: a _to_dim_order_copy made non-blocking (one byte of
    ExecuTorch's own program) ran in devplan; ExecuTorch's kernel refuses it (InvalidArgument)."""
    from testbed.executorch import executorch_pte

    def change(plan):
        index = next(i for i, o in enumerate(plan.operators) if "_to_dim_order_copy" in str(o.name))
        call = next(i.instrArgs for i in _kernel_calls(plan) if i.instrArgs.opIndex == index)
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
        call = next(i.instrArgs for i in _kernel_calls(plan) if i.instrArgs.opIndex == linear)
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
        call = next(i.instrArgs for i in _kernel_calls(plan) if i.instrArgs.opIndex == index)
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
