"""devplan.pte.decode: the one view of a method that inspect and the runtime read. Checked
against ExecuTorch's own deserializer on programs it wrote and on devplan's, and on damage
that both readers must refuse in one line."""

from __future__ import annotations

import pytest

import devplan
from devplan.errors import DevplanError
from devplan.pte import read_pte
from devplan.pte.decode import methods
from devplan.pte.fb.KernelTypes import KernelTypes
from testbed.small_programs import ARGS, compiled
from tests.runtime.damaged_programs import damaged


def _executorch_plans(data: bytes):
    from executorch.exir._serialize._program import deserialize_pte_binary

    return deserialize_pte_binary(data).program.execution_plan


def _programs(executorch_programs) -> dict[str, bytes]:
    return {**executorch_programs, "devplan": compiled(), "devplan_delegated": compiled(delegates=["cuda:0"])}


@pytest.mark.parametrize("name", ["affine", "plain", "xnnpack", "devplan", "devplan_delegated"])
def test_views_say_what_executorch_reads(name, executorch_programs):
    from executorch.exir.schema import DelegateCall, FreeCall, JumpFalseCall, KernelCall, MoveCall, Tensor as EtTensor

    data = _programs(executorch_programs)[name]
    views, plans = methods(read_pte(data)), _executorch_plans(data)
    assert [view.name for view in views] == [plan.name for plan in plans]
    for view, plan in zip(views, plans):
        assert view.inputs == tuple(plan.inputs) and view.outputs == tuple(plan.outputs)
        assert view.buffer_sizes == tuple(plan.non_const_buffer_sizes)
        assert [view.operator(i) for i in range(len(plan.operators))] == [
            f"{op.name}.{op.overload}" if op.overload else op.name for op in plan.operators
        ]
        tensors = {i: v.val for i, v in enumerate(plan.values) if isinstance(v.val, EtTensor)}
        assert set(view.tensors) == set(tensors)
        for index, expected in tensors.items():
            got = view.tensors[index]
            assert got.shape == tuple(expected.sizes) and got.dim_order == tuple(expected.dim_order)
            assert got.data == expected.data_buffer_idx
            info = expected.allocation_info
            if info is None:
                assert got.mem_id is None
            else:
                assert (got.mem_id, got.offset) == (
                    info.memory_id,
                    info.memory_offset_low + (info.memory_offset_high << 32),
                )
        calls = [i for chain in plan.chains for i in chain.instructions]
        assert len(view.instructions) == len(calls)
        for row, instruction in zip(view.instructions, calls):
            args = instruction.instr_args
            expected = {
                KernelCall: lambda a: ("kernel", tuple(a.args)),
                DelegateCall: lambda a: ("delegate", tuple(a.args)),
                MoveCall: lambda a: ("move", (a.move_from, a.move_to)),
                JumpFalseCall: lambda a: ("jump_false", (a.cond_value_index,)),
                FreeCall: lambda a: ("free", (a.value_index,)),
            }[type(args)](args)
            assert (row.kind, row.args) == expected
        assert len(view.delegates) == len(plan.delegates)
        assert [d.id for d in view.delegates] == [d.id for d in plan.delegates]


def test_lifetimes_writers_and_named_values_follow_the_instructions():
    """What the document and the runtime used to work out apart: inputs from instruction 0,
    outputs to the last, a kernel writes its last argument, a tensor list's items count."""
    (view,) = methods(read_pte(compiled()))
    last = len(view.instructions) - 1
    for value in view.inputs:
        assert view.lifetimes[value][0] == 0 and value in view.written
    for value in view.outputs:
        assert view.lifetimes[value][1] == last
    for row in view.instructions:
        for value in row.args:
            first, end = view.lifetimes[value]
            assert first <= row.index <= end and value in view.named and value in view.read
        if row.kind == "kernel":
            assert view.first_writers[row.args[-1]] <= row.index
    unnamed = set(range(len(view.kinds))) - view.named
    assert all(view.kinds[i] != KernelTypes.Tensor or view.tensors[i].data > 0 for i in unnamed)


def test_decoding_is_done_once_per_file_and_shared_payload():
    pte = read_pte(compiled(delegates=["cuda:0"]))
    assert methods(pte)[0] is methods(pte)[0]
    payload = pte.delegate_program(0, 0)
    assert methods(payload)[0] is methods(pte.delegate_program(0, 0))[0]


def _contentless_value(plan):
    plan.values[0].val = None


def _contentless_instruction(plan):
    plan.chains[0].instructions[0].instrArgs = None


@pytest.mark.parametrize(
    "change, needle",
    [
        (_contentless_value, "value 0 has a type but no content"),
        (_contentless_instruction, "instruction 0 has a type but no content"),
    ],
)
def test_a_type_without_content_is_one_line_for_inspect_and_run(change, needle):
    data = damaged(compiled(), change)
    for read in (devplan.inspect, lambda d: devplan.run(d, list(ARGS))):
        with pytest.raises(DevplanError, match=needle):
            read(data)


def test_a_value_of_no_type_is_shown_by_inspect_and_refused_by_run_as_executorch_refuses_it():
    from tests.runtime.damaged_programs import executorch_refuses

    def change(plan):
        plan.values[-1].valType, plan.values[-1].val = KernelTypes.NONE, None

    data = damaged(compiled(), change)
    assert devplan.inspect(data)["methods"][0]["values"]["none"] == 1
    assert executorch_refuses(data)
    with pytest.raises(DevplanError, match=r"value \d+ has no type"):
        devplan.run(data, list(ARGS))
