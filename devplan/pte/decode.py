"""Decoded views of a read program, one per method: its values, its tensors with their
storages, its instructions with their arguments, its buffers with their devices and its
delegates with their windows, checked once so that every reader can do arithmetic on them;
and what follows from them that more than one reader asks (which values the method names,
when each is touched, which are written). inspect (and so check, diff and golden files) and
the runtime's loader read programs through these views, and through program_view.py's view of
the program as a whole; what each then concludes (a lower bound, an arena) stays its own."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Literal, NamedTuple, Sequence

from devplan import dtypes
from devplan.errors import DevplanError
from devplan.pte.fb.DataLocation import DataLocation
from devplan.pte.fb.InstructionArguments import InstructionArguments
from devplan.pte.fb.KernelTypes import KernelTypes
from devplan.pte.fb.TensorShapeDynamism import TensorShapeDynamism
from devplan.pte.kinds import INSTRUCTION_KINDS, LISTS, REFERENCE_LISTS, TENSOR_LISTS, value_kind
from devplan.pte.reader import PteFile, external_key, ints, text
from devplan.pte.window import read_window
from devplan.spec import CPU, Device

# An object of flatc's bindings: their fields are Optional throughout, and verify_program has
# checked the bytes they are read from, so the readers here take them as they are
Binding = Any

MAX_TENSOR_BYTES = 1 << 56  # far beyond any device's memory; larger sizes come from damage


class Tensor(NamedTuple):
    dtype: str  # dtypes.name_of the scalar type
    shape: tuple[int, ...]  # for a dynamic tensor, its upper bound
    dim_order: tuple[int, ...] | None  # None when the file gives none
    dynamic: bool
    mem_id: int | None  # None: not planned (a constant, or an input or output its caller owns)
    offset: int | None  # byte offset in buffer mem_id
    nbytes: int
    data: int  # data_buffer_idx: a constant's data, or a planned tensor's initial data; 0: none
    said_device: Device | None  # what extra_tensor_info says, when it names other than the CPU
    storage_offset: int = 0  # in elements; ExecuTorch supports only 0 (other is damage its runtime refuses)
    unbound: bool = False  # DYNAMIC_UNBOUND, which ExecuTorch's runtime refuses
    external: str | None = None  # a constant kept in a .ptd data file: its key there (data is then 0)

    @property
    def placed(self) -> tuple[int, int] | None:
        """(mem_id, offset) of a planned tensor, None for one the caller or the data owns: the
        format's allocation info gives both or neither."""
        return None if self.mem_id is None or self.offset is None else (self.mem_id, self.offset)

    @property
    def constant(self) -> bool:
        """Whether its bytes are the program's constant data, in the program or in a .ptd."""
        return self.mem_id is None and (self.data > 0 or self.external is not None)

    @property
    def ordered(self) -> bool:
        """Whether the dim order, where the file gives one, is an order of the tensor's
        dimensions; ExecuTorch's runtime refuses any other as it parses the tensor (damage)."""
        return self.dim_order is None or sorted(self.dim_order) == list(range(len(self.shape)))


class Instruction(NamedTuple):
    """One instruction. `index` numbers the method's instructions across its chains, in the
    order they run (chain 0's first, then chain 1's): inspect, check and every message name
    instructions by it. A jump's `destination` is what the file says, an index within the
    jump's own chain, as ExecuTorch's runtime reads it: the runtime's loader turns it into an
    `index` (one at or past its chain's end, or negative, ends the chain)."""

    index: int  # type: ignore[assignment]  # a field, not tuple.index: across the method's chains
    kind: str  # kernel, delegate, move, jump_false, free, or kind(N) for an unknown one
    op: int | None  # a kernel's operator index
    delegate: int | None  # a delegate call's delegate index
    args: tuple[int, ...]  # the values it names: a move's (from, to), a jump's condition, a free's value
    destination: int | None = None  # a jump's target, an index within its own chain
    chain: int = 0  # the chain that holds it
    at: int = 0  # its index within that chain

    @property
    def results(self) -> tuple[int, ...]:
        """The values it writes: a kernel's last argument, anything else it names."""
        return self.args[-1:] if self.kind == "kernel" else self.args


class Delegate(NamedTuple):
    index: int  # type: ignore[assignment]  # a field, not tuple.index
    id: str
    specs: tuple[tuple[str, bytes], ...]  # compile specs, raw
    window: tuple[int, int] | None  # (mem_id, offset) of its payload's buffer in the method's
    location: Literal["inline", "segment"]
    payload_index: int


@dataclass(frozen=True, eq=False)
class MethodView:
    plan_index: int
    name: str
    where: str  # how messages name it: "<file>: method <name>"
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    kinds: tuple[int, ...]  # KernelTypes of every value
    tensors: dict[int, Tensor]  # tensor values by index
    lists: dict[int, tuple[int, ...]]  # IntList, TensorList, OptionalTensorList items (-1: an absent tensor)
    scalars: dict[int, Any]  # int, float, bool, str, and float and bool lists, by index
    instructions: tuple[Instruction, ...]
    operators: tuple[tuple[str, str], ...]  # (name, overload)
    buffer_sizes: tuple[int, ...]  # by mem_id; 0 is the format's reserved entry
    buffer_devices: dict[int, Device]  # what the device table says; other buffers are the CPU's
    delegates: tuple[Delegate, ...]
    chains: int = 1  # how many chains the method has (ExecuTorch loads none without one)
    unlisted_chains: int = 0  # chains without a list of instructions, which damage leaves
    unlisted: tuple[str, ...] = ()  # tables the method lacks altogether (damage): values, inputs, ...

    def operator(self, index: int) -> str:
        """Operator `index` as "name.overload", or "operator(N)" for one the method lacks."""
        if not 0 <= index < len(self.operators):
            return f"operator({index})"
        name, overload = self.operators[index]
        return f"{name}.{overload}" if overload else name

    def device_of(self, tensor: Tensor) -> Device:
        """Where a tensor lives: what extra_tensor_info says, else its buffer's device. (Its
        CPU default says nothing: writers that add the table for other reasons leave it.)"""
        mem_id = tensor.mem_id
        return tensor.said_device or (self.buffer_devices.get(mem_id, CPU) if mem_id is not None else CPU)

    def kind(self, value: int) -> str:
        """What value `value` is, by name (devplan.pte.kinds.VALUE_KINDS): "tensor", "int_list", ..."""
        return value_kind(self.kinds[value])

    def items(self, value: int) -> tuple[int, ...]:
        """The tensors a tensor-list value holds (none for any other value)."""
        return tuple(i for i in self.lists.get(value, ()) if i >= 0) if self.kinds[value] in TENSOR_LISTS else ()

    @cached_property
    def named(self) -> frozenset[int]:
        """Values the inputs, outputs, kernels, delegates and moves name, items of the lists
        they name included: the only values that need memory."""
        found = set(self.inputs) | set(self.outputs)
        for row in self.instructions:
            if row.kind in ("kernel", "delegate", "move"):
                found.update(row.args)
        for value in list(found):
            if 0 <= value < len(self.kinds) and self.kinds[value] in REFERENCE_LISTS:
                found.update(self.lists.get(value, ()))
        return frozenset(found)

    @cached_property
    def unplanned(self) -> frozenset[int]:
        """Tensors the method names that are neither planned nor constants: inputs and outputs
        it leaves to its caller, whose tensors stand in for them."""
        return frozenset(
            i
            for i, t in self.tensors.items()
            if t.mem_id is None and t.data == 0 and t.external is None and i in self.named
        )

    @cached_property
    def lifetimes(self) -> dict[int, tuple[int, int]]:
        """First and last instruction that names each value, directly or as an item of a tensor
        list it names. Inputs live from instruction 0 and outputs to the last, because the
        caller owns them before and after the method runs."""
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for row in self.instructions:
            for value in self._with_items(row.args):
                first.setdefault(value, row.index)
                last[value] = row.index
        if self.instructions:
            end = len(self.instructions) - 1
            for value in self.outputs:
                first.setdefault(value, end)
                last[value] = end
        for value in self.inputs:
            first[value] = 0
            last.setdefault(value, 0)
        for value in self.state:  # what the run before left and the run after reads: no instruction may reuse it
            first[value], last[value] = 0, max(len(self.instructions) - 1, 0)
        return {value: (first[value], last[value]) for value in first}

    @cached_property
    def state(self) -> frozenset[int]:
        """Mutable buffers (a KV cache, running stats, a counter): planned tensors a run finds
        as the run before left them. The format has no flag for them, so they are known by
        what the program does: a planned tensor with initial data (ExecuTorch's mutable data
        segment), or one an instruction reads no later than the first instruction writes it
        (the program's `copy_` of its new value, an in-place update), which, not being an
        input, holds what an earlier run wrote; or one an instruction reads that none writes
        and whose bytes no tensor written shares (so no view of one): a kernel updates it in
        place through an argument it reads (ExecuTorch's llama::update_cache). Delegate calls
        are left out: their arguments are inputs and outputs alike, so they say nothing of
        which came first."""
        reads, writes = self._first_reads, self.first_writers
        found, unwritten = set(), []
        for value, t in self.tensors.items():
            if t.mem_id is None or value in self.inputs:
                continue
            if t.data > 0 or (value in reads and reads[value] <= writes.get(value, -1)):
                found.add(value)
            elif value in reads and value not in self.written and t.nbytes:
                unwritten.append(value)
        return frozenset(found | self._apart_from_writes(unwritten))

    def _apart_from_writes(self, values: list[int]) -> set[int]:
        """The planned tensors of `values` whose bytes share none with a tensor some
        instruction writes (or an input): a view of nothing, so what it reads a run before left."""
        spans: dict[int, list[tuple[int, int]]] = {}
        for value in self.written:
            t = self.tensors.get(value)
            if t is not None and t.mem_id is not None and t.offset is not None and t.nbytes:
                spans.setdefault(t.mem_id, []).append((t.offset, t.offset + t.nbytes))
        merged = {mem_id: _merged(ranges) for mem_id, ranges in spans.items()}
        found = set()
        for value in values:
            t = self.tensors[value]
            if t.placed is None:  # the caller passes planned tensors only
                continue
            mem_id, offset = t.placed
            ranges = merged.get(mem_id, [])
            at = bisect.bisect_right(ranges, (offset, math.inf)) - 1  # the last range starting at or before it
            near = ranges[max(at, 0) : at + 2]
            if not any(start < offset + t.nbytes and offset < end for start, end in near):
                found.add(value)
        return found

    @cached_property
    def _first_reads(self) -> dict[int, int]:
        """value -> the first kernel or move that reads it (a kernel's arguments before the
        ones it writes, a move's source), list items included."""
        found: dict[int, int] = {}
        for row in self.instructions:
            read = self._kernel_inputs(row.args) if row.kind == "kernel" else row.args[:1] if row.kind == "move" else ()
            for value in self._with_items(read):
                found.setdefault(value, row.index)
        return found

    @cached_property
    def first_writers(self) -> dict[int, int]:
        """value -> the first instruction that writes it (Instruction.results, list items too)."""
        found: dict[int, int] = {}
        for row in self.instructions:
            for value in self._with_items(row.results):
                found.setdefault(value, row.index)
        return found

    @cached_property
    def written(self) -> frozenset[int]:
        """Values some instruction writes, and the inputs. A planned tensor outside this set is
        a view: its bytes hold what an earlier tensor wrote there."""
        return frozenset(self.first_writers) | frozenset(self.inputs)

    @cached_property
    def read(self) -> frozenset[int]:
        """Values some instruction names, list items included."""
        return frozenset(value for row in self.instructions for value in self._with_items(row.args))

    def _kernel_inputs(self, args: tuple[int, ...]) -> tuple[int, ...]:
        """What a kernel reads: its arguments before the trailing ones it writes. Its last
        argument is what it returns: an out= argument named again (the out= arguments
        before it), or a tensor list of its out= arguments (a kernel of several results),
        or the tensor it updates in place (copy_); an out= tensor list is another list value
        of the same tensors. A first argument is always read: an in-place kernel names the
        tensor it updates there, then again as its out=."""
        results = set(self._with_items(args[-1:]))
        end = len(args) - 1
        while end > 0 and args[end - 1] != args[0] and self._tensors_of(args[end - 1]) <= results:
            end -= 1
        return args[:end]

    def _tensors_of(self, arg: int) -> set[int]:
        """The tensors a tensor list value holds, or the value itself."""
        is_list = 0 <= arg < len(self.kinds) and self.kinds[arg] in TENSOR_LISTS
        return set(self.items(arg)) if is_list else {arg}

    def _with_items(self, args: tuple[int, ...]) -> list[int]:
        found = list(args)
        for arg in args:
            if 0 <= arg < len(self.kinds) and self.kinds[arg] in TENSOR_LISTS:
                found += self.items(arg)
        return found


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Byte ranges [start, end) as sorted, disjoint ones."""
    found: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if found and start <= found[-1][1]:
            found[-1] = (found[-1][0], max(found[-1][1], end))
        else:
            found.append((start, end))
    return found


def methods(pte: PteFile) -> tuple[MethodView, ...]:
    """Every method of a program, decoded once per PteFile (a payload that several delegates
    share is one PteFile, so it is decoded once too)."""
    return tuple(method(pte, index) for index in range(len(pte.program.executionPlan or ())))


def method(pte: PteFile, plan_index: int) -> MethodView:
    return pte.memo(
        ("decoded", plan_index), lambda: _decode(pte, plan_index, (pte.program.executionPlan or [])[plan_index])
    )


def negative_buffer(sizes: Sequence[int]) -> tuple[int, int] | None:
    """The first planned buffer (its mem_id and size) whose size is negative; buffer 0 is
    reserved and never read, by ExecuTorch either."""
    return next(((mem_id, size) for mem_id, size in enumerate(sizes[1:], start=1) if size < 0), None)


def _decode(pte: PteFile, plan_index: int, plan: Binding) -> MethodView:
    name = text(plan.name)
    where = f"{pte.name}: method {name}"
    if plan.nonConstBufferSizes is None:  # every tensor's place is read against it; ExecuTorch refuses it too
        raise DevplanError(f"{where} has no non_const_buffer_sizes table; the program is damaged")
    sizes = tuple(ints(plan.nonConstBufferSizes))
    if negative := negative_buffer(sizes):
        raise DevplanError(f"{where}: buffer {negative[0]} has a negative size ({negative[1]}); the program is damaged")
    kinds, tensors, lists, scalars = [], {}, {}, {}
    for index, value in enumerate(plan.values or ()):
        kind, val = int(value.valType), value.val
        kinds.append(kind)
        if val is None and kind not in (KernelTypes.NONE, KernelTypes.Null):
            raise DevplanError(f"{where}: value {index} has a type but no content; the program is damaged")
        if kind in LISTS and val.items is None:  # ExecuTorch's runtime refuses to load it ("Missing list")
            raise DevplanError(f"{where}: value {index} is a list without its items; the program is damaged")
        if kind == KernelTypes.Tensor:
            tensors[index] = _tensor(where, index, val, sizes)
        elif kind in REFERENCE_LISTS:
            lists[index] = tuple(ints(val.items))
        elif kind in _SCALARS:
            scalars[index] = _SCALARS[kind](val)
    chains = plan.chains or ()
    rows = (
        (number, at, instruction)
        for number, chain in enumerate(chains)
        for at, instruction in enumerate(chain.instructions or ())
    )
    instructions = tuple(
        _instruction(where, index, instruction)._replace(chain=number, at=at)
        for index, (number, at, instruction) in enumerate(rows)
    )
    return MethodView(
        plan_index=plan_index,
        name=name,
        where=where,
        inputs=tuple(ints(plan.inputs)),
        outputs=tuple(ints(plan.outputs)),
        kinds=tuple(kinds),
        tensors=tensors,
        lists=lists,
        scalars=scalars,
        instructions=instructions,
        operators=tuple((text(op.name), text(op.overload)) for op in plan.operators or ()),
        buffer_sizes=sizes,
        buffer_devices={
            int(e.bufferIdx): Device.from_code(e.deviceType, e.deviceIndex) for e in plan.nonConstBufferDevice or ()
        },
        delegates=tuple(_delegate(where, index, d) for index, d in enumerate(plan.delegates or ())),
        chains=len(chains),
        unlisted_chains=sum(chain.instructions is None for chain in chains),
        unlisted=tuple(
            field
            for field, table in (("values", plan.values), ("inputs", plan.inputs), ("outputs", plan.outputs))
            if table is None
        ),
    )


_SCALARS: dict[int, Callable[[Binding], object]] = {
    KernelTypes.Int: lambda val: int(val.intVal),
    KernelTypes.Double: lambda val: float(val.doubleVal),
    KernelTypes.Bool: lambda val: bool(val.boolVal),
    KernelTypes.String: lambda val: text(val.stringVal),
    KernelTypes.DoubleList: lambda val: [float(x) for x in (val.items if val.items is not None else ())],
    KernelTypes.BoolList: lambda val: [bool(x) for x in (val.items if val.items is not None else ())],
}


def _tensor(where: str, index: int, t: Binding, sizes: tuple[int, ...]) -> Tensor:
    dtype, shape = dtypes.name_of(t.scalarType), tuple(ints(t.sizes))
    nbytes = math.prod(shape) * dtypes.ITEMSIZE.get(dtype, 0)
    if any(size < 0 for size in shape) or nbytes > MAX_TENSOR_BYTES:  # every later sum takes sizes at their word
        raise DevplanError(
            f"{where}: value {index} has the shape {list(shape)}, which no tensor has; the program is damaged"
        )
    info = t.allocationInfo
    mem_id = offset = None
    if info is not None:
        mem_id, offset = int(info.memoryId), int(info.memoryOffsetLow) + (int(info.memoryOffsetHigh) << 32)
        if not (0 < mem_id < len(sizes) and offset + nbytes <= sizes[mem_id]):
            raise DevplanError(
                f"{where}: value {index} ({nbytes} bytes at offset {offset} of buffer {mem_id}) lies "
                f"outside its buffer; the program is damaged"
            )
    extra = t.extraTensorInfo
    said = Device.from_code(extra.deviceType, extra.deviceIndex) if extra is not None else None
    key = external_key(t)  # its data_buffer_idx then says nothing (ExecuTorch numbers them anyway)
    return Tensor(
        dtype,
        shape,
        None if t.dimOrder is None else tuple(ints(t.dimOrder)),
        int(t.shapeDynamism) != TensorShapeDynamism.STATIC,
        mem_id,
        offset,
        nbytes,
        int(t.dataBufferIdx) if key is None else 0,
        None if said == CPU else said,
        int(t.storageOffset),
        int(t.shapeDynamism) == TensorShapeDynamism.DYNAMIC_UNBOUND,
        key,
    )


def _instruction(where: str, index: int, instruction: Binding) -> Instruction:
    kind, call = instruction.instrArgsType, instruction.instrArgs
    name = INSTRUCTION_KINDS.get(kind, f"kind({kind})")
    if call is None and kind in INSTRUCTION_KINDS:
        raise DevplanError(f"{where}: instruction {index} has a type but no content; the program is damaged")
    if kind == InstructionArguments.KernelCall:
        return Instruction(index, name, int(call.opIndex), None, tuple(ints(call.args)))
    if kind == InstructionArguments.DelegateCall:
        return Instruction(index, name, None, int(call.delegateIndex), tuple(ints(call.args)))
    if kind == InstructionArguments.MoveCall:
        return Instruction(index, name, None, None, (int(call.moveFrom), int(call.moveTo)))
    if kind == InstructionArguments.JumpFalseCall:
        return Instruction(index, name, None, None, (int(call.condValueIndex),), int(call.destinationInstruction))
    if kind == InstructionArguments.FreeCall:
        return Instruction(index, name, None, None, (int(call.valueIndex),))
    return Instruction(index, name, None, None, ())


def _delegate(where: str, index: int, delegate: Binding) -> Delegate:
    specs = tuple((text(spec.key), bytes(ints(spec.value))) for spec in delegate.compileSpecs or ())
    processed = delegate.processed  # read_pte has checked that it names a payload that exists
    return Delegate(
        index,
        text(delegate.id),
        specs,
        read_window(specs, f"{where}: delegate {index}"),
        "segment" if processed.location == DataLocation.SEGMENT else "inline",
        int(processed.index),
    )
