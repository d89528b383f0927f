"""Planned Methods to ET12 program objects: per method its values, operators, one chain of kernel
calls, per-buffer sizes and devices; the constant data of all laid out as one segment."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import astuple
from typing import Any, Callable

import numpy as np
import torch

from devplan.dtypes import code_of
from devplan.errors import DevplanError
from devplan.ir.method import (
    BoolList,
    Delegate,
    DoubleList,
    IntList,
    Method,
    OptionalTensorList,
    Source,
    TensorList,
    Value,
)
from devplan.ir.planned import PlannedMethod
from devplan.pte.fb import InstructionArguments, KernelTypes
from devplan.pte.fb.AllocationDetails import AllocationDetailsT
from devplan.pte.fb.BackendDelegate import BackendDelegateT
from devplan.pte.fb.BackendDelegateDataReference import BackendDelegateDataReferenceT
from devplan.pte.fb.Bool import BoolT
from devplan.pte.fb.BoolList import BoolListT
from devplan.pte.fb.Chain import ChainT
from devplan.pte.fb.CompileSpec import CompileSpecT
from devplan.pte.fb.ContainerMetadata import ContainerMetadataT
from devplan.pte.fb.DataLocation import DataLocation
from devplan.pte.fb.DelegateCall import DelegateCallT
from devplan.pte.fb.Double import DoubleT
from devplan.pte.fb.DoubleList import DoubleListT
from devplan.pte.fb.EValue import EValueT
from devplan.pte.fb.ExecutionPlan import ExecutionPlanT
from devplan.pte.fb.ExtraTensorInfo import ExtraTensorInfoT
from devplan.pte.fb.FrameList import FrameListT
from devplan.pte.fb.Instruction import InstructionT
from devplan.pte.fb.Int import IntT
from devplan.pte.fb.IntList import IntListT
from devplan.pte.fb.KernelCall import KernelCallT
from devplan.pte.fb.NamedData import NamedDataT
from devplan.pte.fb.NonConstBufferDevice import NonConstBufferDeviceT
from devplan.pte.fb.Null import NullT
from devplan.pte.fb.Operator import OperatorT
from devplan.pte.fb.OptionalTensorList import OptionalTensorListT
from devplan.pte.fb.Program import ProgramT
from devplan.pte.fb.String import StringT
from devplan.pte.fb.SubsegmentOffsets import SubsegmentOffsetsT
from devplan.pte.fb.Tensor import TensorT
from devplan.pte.fb.TensorDataLocation import TensorDataLocation
from devplan.pte.fb.TensorList import TensorListT
from devplan.pte.fb.TensorShapeDynamism import TensorShapeDynamism
from devplan.pte.frames import FrameCache, frame_list
from devplan.pte.ptd import Entry, Layout, ptd_image
from devplan.pte.window import window_spec
from devplan.pte.writer import Spread
from devplan.spec import CPU, Device, TensorSpec

CONSTANT_ALIGNMENT = 16


def stored_size(tensors: Iterable[torch.Tensor]) -> int:
    """The bytes a program's constant segment takes for these tensors: equal ones once, each aligned."""
    blob = _Blob()
    for tensor in tensors:
        blob.add(tensor)
    return blob.size


class _Blob:
    """One data segment of deduplicated, aligned tensors, held as the tensors' own bytes (never
    copied: a compile holds its weights once); item 0 is the format's empty placeholder. Equal
    tensors are found by size and a fingerprint of a few sampled bytes, then compared in full."""

    def __init__(self, *, snapshot: bool = False) -> None:
        # `snapshot` copies each tensor: the initial values of state, which running the model
        # (a KV cache) changes in place before the program's bytes may be asked for
        self.snapshot = snapshot
        self.tensors: list[np.ndarray[Any, Any]] = []  # each distinct tensor's bytes (a numpy view), item i + 1's
        self.size = 0
        self.offsets = [0]
        self.index: dict[tuple[int, bytes], list[tuple[torch.Tensor, int]]] = {}

    def add(self, tensor: torch.Tensor) -> int:
        raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8)  # numpy has no bfloat16
        key = (raw.numel(), _fingerprint(raw))
        for seen, index in self.index.get(key, ()):
            if torch.equal(seen, raw):
                return index
        if self.snapshot:
            raw = raw.clone()
        self.size += -self.size % CONSTANT_ALIGNMENT
        self.offsets.append(self.size)
        self.tensors.append(raw.numpy())
        self.size += raw.numel()
        self.index.setdefault(key, []).append((raw, len(self.offsets) - 1))
        return len(self.offsets) - 1

    def segment(self) -> Spread:
        ends = [offset + tensor.nbytes for offset, tensor in zip(self.offsets[1:], self.tensors)]
        padding = (bytes(start - end) for start, end in zip(self.offsets[1:], [0, *ends]))
        return Spread.of(part for pair in zip(padding, self.tensors) for part in pair if len(part))


class ExternalWeights:
    """The constants of a program compiled with external weights, for its .ptd: each distinct
    tensor stored once (a segment each), under keys the program's tensors name: the weight's
    own name (a.weight, as ExecuTorch keys it), `_constant` for a folded result, a `#N` suffix
    when a name is taken by other bytes or another shape. A key that methods share with the
    same bytes and layout is one key. Delegates' named data (their weights, under the backend's
    own keys) come after the tensors, a segment each."""

    def __init__(self) -> None:
        self.blob = _Blob()
        self.keys: dict[str, Entry] = {}
        self.named: dict[str, bytes] = {}

    def add(self, tensor: torch.Tensor, spec: TensorSpec) -> str:
        entry = Entry("", self.blob.add(tensor) - 1, Layout(code_of(spec.dtype), spec.shape, spec.dim_order))
        base = spec.name[1] if spec.name is not None else "_constant"
        for number in itertools.count():
            key = f"{base}#{number}" if number else base
            if key not in self.keys:
                self.keys[key] = entry._replace(key=key)
            if self.keys[key] == entry._replace(key=key):
                return key
        raise AssertionError("unreachable")  # itertools.count never ends

    def add_named(self, key: str, data: bytes) -> None:
        if key in self.keys:  # a backend's keys are its own (XNNPACK's: a hash of the bytes), no weight's name
            raise DevplanError(f"a delegate's named data {key!r} has the key of a weight; the .ptd can hold only one")
        self.named[key] = data

    @property
    def count(self) -> int:
        return len(self.keys) + len(self.named)

    def image(self) -> Spread:
        """The .ptd, as the pieces to write: the tensors' own buffers among them."""
        tensors = len(self.blob.tensors)
        named = [Entry(key, tensors + i, None) for i, key in enumerate(self.named)]
        return ptd_image([*self.keys.values(), *named], [*self.blob.tensors, *self.named.values()])


def _fingerprint(raw: torch.Tensor, samples: int = 64) -> bytes:
    """A few of the bytes, spread across the tensor, and its last ones: tensors that differ
    mostly differ here, and reading them costs nothing next to comparing whole tensors."""
    step = max(1, raw.numel() // samples)
    return bytes(raw[::step][:samples].numpy()) + bytes(raw[-8:].numpy())


def to_program(
    *planned: PlannedMethod, source: bool = True, external: ExternalWeights | None = None
) -> tuple[ProgramT, list["bytes | Spread"]]:
    """The program of one or more planned methods and its data segments (the methods' constants,
    each stored once, their initial state if any is non-zero, then one per delegate payload,
    then the named data). `source` keeps where each instruction came from in the chain's
    stacktrace (devplan/pte/frames.py). With `external`, the constants go there instead, for a
    .ptd, and the program's tensors name them by key (its constant segment stays empty)."""
    constants, state = _Blob(), _Blob(snapshot=True)

    def stored(method: Method, index: int, tensor: torch.Tensor) -> int | str:
        return constants.add(tensor) if external is None else external.add(tensor, method.tensor(index))

    data_index = [{i: stored(p.method, i, t) for i, t in p.method.constants.items()} for p in planned]
    initial = [{i: state.add(t) for i, t in p.method.state.items() if bool(torch.count_nonzero(t))} for p in planned]
    program = ProgramT()
    program.version = 0
    program.constantBuffer = []
    program.backendDelegateData = []
    segments: list["bytes | Spread"] = [constants.segment()]
    program.constantSegment = SubsegmentOffsetsT()
    program.constantSegment.segmentIndex = 0
    program.constantSegment.offsets = constants.offsets
    if any(initial):
        mutable = SubsegmentOffsetsT()
        mutable.segmentIndex, mutable.offsets = 1, state.offsets
        program.mutableDataSegments = [mutable]
        segments.append(state.segment())
    program.executionPlan = [
        _plan(p, data, init, segments, source) for p, data, init in zip(planned, data_index, initial)
    ]
    # what ExecuTorch's backends keep beside their payloads, once per key, a segment each; with
    # external weights, in the .ptd beside the weights (ExecuTorch's runtime gives backends both)
    named = {key: data for p in planned for delegate in p.method.delegates for key, data, _ in delegate.named_data}
    if external is not None:
        for key in sorted(named):
            external.add_named(key, named[key])
        named = {}
    entries: list[NamedDataT] = []
    for key in sorted(named):
        entry = NamedDataT()
        entry.key, entry.segmentIndex = key, len(segments)
        entries.append(entry)
        segments.append(named[key])
    program.namedData = entries or None
    return program, segments


def _plan(
    planned: PlannedMethod,
    data_index: dict[int, int | str],
    initial: dict[int, int],
    segments: list[bytes | Spread],
    source: bool,
) -> ExecutionPlanT:
    """One method's execution plan; its delegates' payloads are appended to `segments`."""
    method = planned.method
    operators: dict[str, int] = {}
    instructions = []
    for kernel in method.kernels:
        call: KernelCallT | DelegateCallT
        if kernel.delegate is None:
            call = KernelCallT()
            call.opIndex = operators.setdefault(kernel.op, len(operators))
        else:
            call = DelegateCallT()
            call.delegateIndex = kernel.delegate
        call.args = list(kernel.args)
        instructions.append(_instruction(call))
    plan = ExecutionPlanT()
    plan.name = method.name
    plan.containerMetaType = ContainerMetadataT()
    plan.containerMetaType.encodedInpStr = method.in_spec
    plan.containerMetaType.encodedOutStr = method.out_spec
    plan.values = [_evalue(i, v, data_index, initial) for i, v in enumerate(method.values)]
    plan.inputs, plan.outputs = list(method.inputs), list(method.outputs)
    chain = ChainT()
    chain.inputs, chain.outputs, chain.instructions = [], [], instructions
    chain.stacktrace = _stacktrace(method) if source else None
    plan.chains = [chain]
    plan.operators = [_operator(name) for name in operators]
    plan.nonConstBufferSizes = [0] + [b.size for b in planned.buffers]
    # as ExecuTorch writes them, a program all on the CPU carries no device table
    plan.nonConstBufferDevice = (
        [_buffer_device(b.mem_id, b.device) for b in planned.buffers]
        if any(b.device != CPU for b in planned.buffers)
        else None
    )
    plan.delegates = []
    for delegate in method.delegates:
        plan.delegates.append(_delegate(delegate, len(segments)))
        segments.append(delegate.payload)
    return plan


def _delegate(delegate: Delegate, segment: int) -> BackendDelegateT:
    entry = BackendDelegateT()
    entry.id = delegate.backend
    entry.processed = BackendDelegateDataReferenceT()
    entry.processed.location, entry.processed.index = DataLocation.SEGMENT, segment
    entry.compileSpecs = []
    for key, value in delegate.compile_specs + ((window_spec(*delegate.window),) if delegate.window else ()):
        spec = CompileSpecT()
        spec.key, spec.value = key, list(value)
        entry.compileSpecs.append(spec)
    return entry


def _buffer_device(mem_id: int, device: Device) -> NonConstBufferDeviceT:
    entry = NonConstBufferDeviceT()
    entry.bufferIdx, entry.deviceType, entry.deviceIndex = mem_id, device.code, device.index
    return entry


def _operator(name: str) -> OperatorT:
    op = OperatorT()
    op.name, _, op.overload = name.partition(".")
    return op


def _instruction(call: KernelCallT | DelegateCallT) -> InstructionT:
    instruction = InstructionT()
    kinds = InstructionArguments.InstructionArguments
    instruction.instrArgsType = kinds.KernelCall if isinstance(call, KernelCallT) else kinds.DelegateCall
    instruction.instrArgs = call
    return instruction


def _stacktrace(method: Method) -> list[FrameListT]:
    """One frame list per instruction: where it came from, and the user's names of the
    inputs and weights it is the first to read."""
    first_reader: dict[int, int] = {}
    for at, kernel in enumerate(method.kernels):
        for index in method.operands(kernel):
            value = method.values[index]
            if isinstance(value, TensorSpec) and value.name is not None and index not in first_reader:
                first_reader[index] = at
    names: dict[int, list[tuple[int, str, str]]] = {}
    for index, value in enumerate(method.values):
        # one that no kernel reads itself (read only through a view) is named on the first
        if isinstance(value, TensorSpec) and value.name is not None:
            names.setdefault(first_reader.get(index, 0), []).append((index, *value.name))
    empty, cache = Source(), FrameCache()
    return [
        frame_list(
            *astuple(kernel.source or empty),  # type: ignore[call-arg]  # Source is frame_list's first seven
            names.get(at, []),
            cache,
            method.delegates[kernel.delegate].handles if kernel.delegate is not None else (),
        )
        for at, kernel in enumerate(method.kernels)
    ]


def _tensor(spec: TensorSpec, data: int | str) -> TensorT:
    """`data`: the constant's or initial value's index, 0 for none, or an external weight's key."""
    t = TensorT()
    t.scalarType = code_of(spec.dtype)
    t.sizes = list(spec.shape)
    t.dimOrder = list(spec.dim_order)
    t.dataBufferIdx = data if isinstance(data, int) else 0
    t.shapeDynamism = TensorShapeDynamism.DYNAMIC_BOUND if spec.dynamic else TensorShapeDynamism.STATIC
    if spec.placed is not None:
        t.allocationInfo = AllocationDetailsT()
        t.allocationInfo.memoryId, offset = spec.placed
        t.allocationInfo.memoryOffsetLow = offset & 0xFFFFFFFF
        t.allocationInfo.memoryOffsetHigh = offset >> 32
    if spec.device != CPU or isinstance(data, str):
        info = t.extraTensorInfo = ExtraTensorInfoT()
        info.deviceType, info.deviceIndex = spec.device.code, spec.device.index
        if isinstance(data, str):
            info.fullyQualifiedName, info.location = data, TensorDataLocation.EXTERNAL
    return t


_KINDS = KernelTypes.KernelTypes
# Python type of a value -> (union tag, table, field holding the value); bool before int,
# since a bool is an int to isinstance
_SCALARS = (
    (bool, _KINDS.Bool, BoolT, "boolVal"),
    (int, _KINDS.Int, IntT, "intVal"),
    (float, _KINDS.Double, DoubleT, "doubleVal"),
    (str, _KINDS.String, StringT, "stringVal"),
)
_LISTS: dict[type, tuple[int, Callable[[], Any]]] = {
    IntList: (_KINDS.IntList, IntListT),
    DoubleList: (_KINDS.DoubleList, DoubleListT),
    BoolList: (_KINDS.BoolList, BoolListT),
    TensorList: (_KINDS.TensorList, TensorListT),
    OptionalTensorList: (_KINDS.OptionalTensorList, OptionalTensorListT),
}


def _evalue(index: int, value: Value, data_index: dict[int, int | str], initial: dict[int, int]) -> EValueT:
    e = EValueT()
    if isinstance(value, TensorSpec):
        e.valType, e.val = _KINDS.Tensor, _tensor(value, data_index.get(index, initial.get(index, 0)))
    elif value is None:
        e.valType, e.val = _KINDS.Null, NullT()
    elif isinstance(value, (IntList, DoubleList, BoolList, TensorList, OptionalTensorList)):
        e.valType, table = _LISTS[type(value)]
        e.val = items = table()
        items.items = list(value.items)
    else:
        kind, table, field = next(entry[1:] for entry in _SCALARS if isinstance(value, entry[0]))
        scalar = table()
        setattr(scalar, field, value)
        e.valType, e.val = kind, scalar
    return e
