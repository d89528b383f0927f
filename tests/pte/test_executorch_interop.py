"""read_pte and dumps_pte against ExecuTorch 1.5.1's own deserializer and runtime."""

from __future__ import annotations

import copy
import struct

import flatbuffers
import numpy as np
import pytest
import torch

from devplan.pte import dumps_pte, read_pte
from devplan.pte.fb.DeviceType import DeviceType
from devplan.pte.fb.InstructionArguments import InstructionArguments
from devplan.pte.fb.KernelTypes import KernelTypes
from devplan.pte.fb.NonConstBufferDevice import NonConstBufferDeviceT

PROGRAMS = ("affine", "plain", "xnnpack")
_KERNEL_TYPE_NAMES = {value: name for name, value in vars(KernelTypes).items() if not name.startswith("_")}
_INSTRUCTION_NAMES = {value: name for name, value in vars(InstructionArguments).items() if not name.startswith("_")}


def executorch_read(data: bytes):
    from executorch.exir._serialize._program import deserialize_pte_binary

    return deserialize_pte_binary(data)


def _ints(vector) -> list[int]:
    return [] if vector is None else [int(item) for item in vector]


def _text(value: bytes | None) -> str:
    return "" if value is None else value.decode()


# Each pair of functions turns one side's object into the same plain structure.


def _our_value(evalue) -> tuple:
    kind, val = _KERNEL_TYPE_NAMES[evalue.valType], evalue.val
    if kind == "Tensor":
        info = val.allocationInfo
        allocation = None if info is None else (info.memoryId, info.memoryOffsetLow, info.memoryOffsetHigh)
        return (
            kind,
            val.scalarType,
            _ints(val.sizes),
            _ints(val.dimOrder),
            val.dataBufferIdx,
            allocation,
            val.shapeDynamism,
        )
    if kind in ("Int", "Bool", "Double"):
        return (kind, getattr(val, f"{kind.lower()}Val"))
    if kind == "String":
        return (kind, _text(val.stringVal))
    if kind.endswith("List"):
        return (kind, [item.item() for item in val.items] if val.items is not None else [])
    return (kind,)


def _their_value(evalue) -> tuple:
    kind, val = type(evalue.val).__name__, evalue.val
    if kind == "Tensor":
        info = val.allocation_info
        allocation = None if info is None else (info.memory_id, info.memory_offset_low, info.memory_offset_high)
        return (
            kind,
            int(val.scalar_type),
            list(val.sizes),
            list(val.dim_order),
            val.data_buffer_idx,
            allocation,
            int(val.shape_dynamism),
        )
    if kind in ("Int", "Bool", "Double"):
        return (kind, getattr(val, f"{kind.lower()}_val"))
    if kind == "String":
        return (kind, val.string_val)
    if kind.endswith("List"):
        return (kind, list(val.items))
    return (kind,)


def _our_instruction(instruction) -> tuple:
    kind, args = _INSTRUCTION_NAMES[instruction.instrArgsType], instruction.instrArgs
    if kind == "KernelCall":
        return (kind, args.opIndex, _ints(args.args))
    if kind == "DelegateCall":
        return (kind, args.delegateIndex, _ints(args.args))
    return (kind, *sorted(vars(args).items()))


def _their_instruction(instruction) -> tuple:
    kind, args = type(instruction.instr_args).__name__, instruction.instr_args
    if kind == "KernelCall":
        return (kind, args.op_index, list(args.args))
    if kind == "DelegateCall":
        return (kind, args.delegate_index, list(args.args))
    return (kind, *sorted(vars(args).items()))


def _our_plan(plan) -> dict:
    return {
        "name": _text(plan.name),
        "values": [_our_value(value) for value in plan.values],
        "inputs": _ints(plan.inputs),
        "outputs": _ints(plan.outputs),
        "operators": [(_text(op.name), _text(op.overload)) for op in plan.operators],
        "chains": [
            (_ints(chain.inputs), _ints(chain.outputs), [_our_instruction(i) for i in chain.instructions])
            for chain in plan.chains
        ],
        "non_const_buffer_sizes": _ints(plan.nonConstBufferSizes),
        "delegates": [
            (_text(d.id), [(_text(s.key), bytes(s.value)) for s in d.compileSpecs or []]) for d in plan.delegates or []
        ],
        "container": (_text(plan.containerMetaType.encodedInpStr), _text(plan.containerMetaType.encodedOutStr)),
    }


def _their_plan(plan) -> dict:
    return {
        "name": plan.name,
        "values": [_their_value(value) for value in plan.values],
        "inputs": list(plan.inputs),
        "outputs": list(plan.outputs),
        "operators": [(op.name, op.overload) for op in plan.operators],
        "chains": [
            (list(chain.inputs), list(chain.outputs), [_their_instruction(i) for i in chain.instructions])
            for chain in plan.chains
        ],
        "non_const_buffer_sizes": list(plan.non_const_buffer_sizes),
        "delegates": [(d.id, [(s.key, bytes(s.value)) for s in d.compile_specs]) for d in plan.delegates],
        "container": (plan.container_meta_type.encoded_inp_str, plan.container_meta_type.encoded_out_str),
    }


def _canonical(program) -> bytes:
    """Programs are equal when they pack to the same FlatBuffer."""
    builder = flatbuffers.Builder(1024)
    builder.Finish(program.Pack(builder))
    return bytes(builder.Output())


@pytest.mark.parametrize("which", PROGRAMS)
def test_plans_match_executorch_deserializer(executorch_programs, which):
    data = executorch_programs[which]
    ours, theirs = read_pte(data).program, executorch_read(data).program
    assert ours.version == theirs.version
    assert len(ours.executionPlan) == len(theirs.execution_plan) >= 1
    for our_plan, their_plan in zip(ours.executionPlan, theirs.execution_plan):
        assert _our_plan(our_plan) == _their_plan(their_plan)


@pytest.mark.parametrize("which", PROGRAMS)
def test_constants_match_executorch_deserializer(executorch_programs, which):
    data = executorch_programs[which]
    ours, theirs = read_pte(data), executorch_read(data).program
    # ExecuTorch moves constant-segment slices back into constant_buffer; index 0 is the
    # placeholder for "no constant".
    count = len(theirs.constant_buffer)
    assert ours.constant_data(0) is None
    for index in range(1, count):
        assert ours.constant_data(index) == bytes(theirs.constant_buffer[index].storage)
    assert ours.constant_data(max(count, 1)) is None


def test_constants_hold_the_module_weights(affine_case, affine_pte):
    module, _ = affine_case
    pte = read_pte(affine_pte)
    by_shape = {}
    for value in pte.program.executionPlan[0].values:
        if value.valType == KernelTypes.Tensor and value.val.dataBufferIdx > 0:
            tensor = value.val
            nbytes = 4 * int(np.prod(_ints(tensor.sizes)))
            by_shape[tuple(_ints(tensor.sizes))] = np.frombuffer(
                pte.constant_data(tensor.dataBufferIdx)[:nbytes], np.float32
            )
    np.testing.assert_array_equal(by_shape[(3,)], module.fc.bias.detach().numpy())
    np.testing.assert_array_equal(by_shape[(3, 4)], module.fc.weight.detach().numpy().reshape(-1))


def test_segments_and_header_match_the_file(executorch_programs):
    data = executorch_programs["affine"]
    pte = read_pte(data)
    assert pte.size == len(data)
    magic, length, program_size, base, data_size = struct.unpack_from("<4sIQQQ", data, 8)
    assert (magic, length) == (b"eh00", 32)
    assert (pte.header.program_size, pte.header.segment_base_offset, pte.header.segment_data_size) == (
        program_size,
        base,
        data_size,
    )
    assert base + data_size == len(data)
    for entry, segment in zip(pte.program.segments, pte.segments, strict=True):
        assert segment == data[base + entry.offset : base + entry.offset + entry.size]
    assert read_pte(executorch_programs["plain"]).header is None


def test_delegate_payload_and_named_data_match_executorch(xnnpack_pte):
    ours, theirs = read_pte(xnnpack_pte), executorch_read(xnnpack_pte)
    plan = ours.program.executionPlan[0]
    assert len(plan.delegates) == 1
    # ExecuTorch inlines segment payloads when it deserializes.
    their_reference = theirs.program.execution_plan[0].delegates[0].processed
    expected = bytes(theirs.program.backend_delegate_data[their_reference.index].data)
    assert len(expected) > 0
    assert ours.delegate_payload(0, 0) == expected
    stored = theirs.named_data
    for entry in ours.program.namedData:
        assert ours.segments[entry.segmentIndex] == stored.buffers[stored.pte_data[entry.key.decode()].buffer_index]


@pytest.mark.parametrize("which", PROGRAMS)
def test_round_trip_is_byte_identical_to_executorch(executorch_programs, which):
    data = executorch_programs[which]
    pte = read_pte(data)
    before = _canonical(pte.program)
    written = dumps_pte(pte.program, pte.segments)
    assert written == data
    assert _canonical(pte.program) == before  # dumps_pte left its argument alone
    again = read_pte(written)
    assert _canonical(again.program) == before
    assert again.segments == pte.segments


@pytest.mark.parametrize("which", PROGRAMS)
def test_executorch_reads_what_devplan_writes(executorch_programs, which):
    data = executorch_programs[which]
    pte = read_pte(data)
    written = dumps_pte(pte.program, pte.segments, segment_alignment=64)
    if pte.header is not None:
        assert written != data  # a different layout, so this is not the same file again
    original, rewritten = executorch_read(data).program, executorch_read(written).program
    assert [_their_plan(plan) for plan in rewritten.execution_plan] == [
        _their_plan(plan) for plan in original.execution_plan
    ]
    assert [bytes(b.storage) for b in rewritten.constant_buffer] == [bytes(b.storage) for b in original.constant_buffer]
    assert [bytes(b.data) for b in rewritten.backend_delegate_data] == [
        bytes(b.data) for b in original.backend_delegate_data
    ]


def _run(data: bytes, args: tuple) -> list[torch.Tensor]:
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(data)
    return [output.clone() for output in program.load_method("forward").execute(list(args))]


def test_executorch_runs_a_devplan_rewritten_program(affine_case, affine_pte):
    module, args = affine_case
    pte = read_pte(affine_pte)
    plan = pte.program.executionPlan[0]
    (bias,) = [
        v.val
        for v in plan.values
        if v.valType == KernelTypes.Tensor and v.val.dataBufferIdx > 0 and _ints(v.val.sizes) == [3]
    ]
    # Rewrite the constant segment with bias + 1 and move the segment by a new alignment.
    sub = pte.program.constantSegment
    start = int(sub.offsets[bias.dataBufferIdx])
    segment = bytearray(pte.segments[sub.segmentIndex])
    new_bias = np.frombuffer(segment, np.float32, 3, start) + np.float32(1)
    segment[start : start + 12] = new_bias.tobytes()
    segments = list(pte.segments)
    segments[sub.segmentIndex] = bytes(segment)
    rewritten = dumps_pte(pte.program, segments, segment_alignment=256)
    assert read_pte(rewritten).header.segment_base_offset % 256 == 0

    shifted = copy.deepcopy(module)
    with torch.no_grad():
        shifted.fc.bias += 1
        expected_original, expected_shifted = module(*args), shifted(*args)
    torch.testing.assert_close(_run(affine_pte, args)[0], expected_original)
    torch.testing.assert_close(_run(rewritten, args)[0], expected_shifted)
    assert not torch.allclose(expected_original, expected_shifted)


def test_executorch_runs_xnnpack_program_rewritten_by_devplan(xnnpack_pte):
    torch.manual_seed(1)
    x = torch.randn(2, 4)
    pte = read_pte(xnnpack_pte)
    rewritten = dumps_pte(pte.program, pte.segments, segment_alignment=64)
    assert rewritten != xnnpack_pte
    torch.testing.assert_close(_run(rewritten, (x,))[0], _run(xnnpack_pte, (x,))[0])


def test_non_cpu_buffer_device_reaches_executorch(affine_pte):
    pte = read_pte(affine_pte)
    program = copy.copy(pte.program)
    plan = copy.copy(program.executionPlan[0])
    plan.nonConstBufferDevice = [NonConstBufferDeviceT(bufferIdx=1, deviceType=DeviceType.CUDA, deviceIndex=0)]
    program.executionPlan = [plan]
    written = dumps_pte(program, pte.segments)

    (entry,) = executorch_read(written).program.execution_plan[0].non_const_buffer_device
    assert (entry.buffer_idx, int(entry.device_type), entry.device_index) == (1, 1, 0)
    (ours,) = read_pte(written).program.executionPlan[0].nonConstBufferDevice
    assert (ours.bufferIdx, ours.deviceType, ours.deviceIndex) == (1, DeviceType.CUDA, 0)
    assert pte.program.executionPlan[0].nonConstBufferDevice is None  # the original is untouched


def test_device_table_only_where_a_buffer_is_off_the_cpu():
    """As ExecuTorch's serializer writes them: no NonConstBufferDevice table when every buffer
    is the CPU's; with a device buffer, an entry for every buffer."""
    import devplan
    from tests.compile.test_cli import ROOT

    on_cpu = devplan.compile(ROOT / "samples" / "cnn.pt2").data
    assert not executorch_read(on_cpu).program.execution_plan[0].non_const_buffer_device
    on_cuda = devplan.compile(ROOT / "samples" / "cnn.pt2", delegates=["cuda:0=aten::convolution"]).data
    table = executorch_read(on_cuda).program.execution_plan[0].non_const_buffer_device
    assert [(e.buffer_idx, int(e.device_type)) for e in table] == [(1, DeviceType.CPU), (2, DeviceType.CUDA)]


def test_named_data_counts_as_constants(xnnpack_pte):
    """An XNNPACK program keeps its weights by key in segments of their own: inspect counts
    them as constant data, per key, as ExecuTorch's deserializer lists them."""
    import io

    from rich.console import Console

    import devplan
    from devplan.inspection.render import render

    stored = executorch_read(xnnpack_pte).named_data  # ExecuTorch moves them out of the program
    doc = devplan.inspect(xnnpack_pte)
    named = doc["file"]["named_data"]
    assert sorted(e["key"] for e in named) == sorted(stored.pte_data)
    assert all(e["size"] >= len(stored.buffers[stored.pte_data[e["key"]].buffer_index]) for e in named)
    segments = {s["index"]: s["size"] for s in doc["file"]["segments"]}
    assert named and all(e["size"] == segments[e["segment"]] for e in named)
    assert doc["file"]["constant_bytes"] >= sum({e["segment"]: e["size"] for e in named}.values()) == 48 + 12
    out = io.StringIO()
    render(doc, Console(file=out, width=100), ["summary"])
    assert f"under {len(named)} key" in out.getvalue()
