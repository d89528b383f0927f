"""The reference executor: runs one method of any ET12 program in Python, every planned
tensor a view into its buffer's arena exactly where the plan put it, so a plan that lets two
live tensors overwrite each other gives wrong outputs here too. Kernels are torch's own
out-variant ops, called as the program's argument lists say; ExecuTorch's et_copy ops move
tensors between host and device through the DeviceAllocators; a DevplanDelegate call runs
its payload, itself an ET12 program, on the device where its buffers are planned."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from devplan import dtypes
from devplan.errors import DevplanError, first_line
from devplan.ops import BACKEND_ID, ET_VIEW, NUMBER_OPS, PORTABLE, QUANTIZED, TO_DEVICE, TO_HOST, schema_name
from devplan.pte import PteFile, read_pte
from devplan.pte.reader import ints, text
from devplan.pte.window import read_window
from devplan.pte.fb.InstructionArguments import InstructionArguments
from devplan.pte.fb.KernelTypes import KernelTypes
from devplan.pte.fb.TensorShapeDynamism import TensorShapeDynamism
from devplan.runtime.allocator import allocator_for
from devplan.spec import CPU, DEVICE_TYPES, Device

_EXTRA_STEPS = 1_000_000  # instructions a run may execute beyond one pass: only jumps loop
_SLACK = 1 << 20  # bytes a buffer may hold beyond twice what its tensors reach (alignment, reserves)
# Memory a method may take for its arenas and unplanned tensors unless its caller says more:
# every size comes from the file, and a few damaged bytes can ask for terabytes.
MAX_MEMORY = 8 << 30

# Operators outside torch's aten namespace that ExecuTorch programs use.
_EXTRA_KERNELS = {
    "dim_order_ops::_to_dim_order_copy.out": lambda self, non_blocking, dim_order, out: _resize_within(out, self.shape).copy_(self),
    "dim_order_ops::_clone_dim_order.out": lambda self, non_blocking, dim_order, out: _resize_within(out, self.shape).copy_(self),
    "dim_order_ops::_empty_dim_order.out": lambda size, dim_order, out: _resize_within(out, size),
}
_NUMBER_KERNELS = {name: fn for fn, name in NUMBER_OPS.items()}
_QUANTIZED_BY_OUT = {schema_name(schema): functional for functional, schema in QUANTIZED.items()}


@dataclass(frozen=True)
class _Step:
    kind: int
    name: str = ""                        # the operator, for messages
    call: Any = None                      # a kernel: the torch op, positional and keyword value indices;
                                          # a delegate: the LoadedMethod of its payload
    args: tuple[int, ...] = ()
    keywords: tuple[tuple[str, int], ...] = ()
    result: int | None = None             # a number op: the value its result goes to
    emptied: tuple[int, ...] = ()         # dynamic out tensors: emptied first, the kernel sizes them
    fixed: tuple[int, ...] = ()           # static out tensors: a kernel must not resize them


class LoadedMethod:
    """One method with its arenas allocated and its values bound; `execute` may run it many
    times, and state kept in planned buffers carries over between runs as on a device."""

    def __init__(self, pte: PteFile, name: str = "forward", lent: dict[int, tuple[torch.Tensor, Device]] | None = None,
                 *, max_memory: int = MAX_MEMORY) -> None:
        """`lent`: mem_id -> (bytes, device) that the caller lends for that buffer (a window of
        its own arena) instead of an arena of this method's own. `max_memory`: bytes the
        method's own arenas and unplanned tensors may take in all."""
        plans = {text(plan.name): plan for plan in pte.program.executionPlan or ()}
        if name not in plans:
            raise DevplanError(f"{pte.name}: no method {name!r}; the program has {', '.join(plans) or 'none'}")
        plan, self.where = plans[name], f"{pte.name}: method {name}"
        devices = {int(e.bufferIdx): Device.from_code(e.deviceType, e.deviceIndex) for e in plan.nonConstBufferDevice or ()}
        sizes = ints(plan.nonConstBufferSizes)
        if plan.values is None:  # as ExecuTorch's runtime refuses it
            raise DevplanError(f"{self.where} has no values table; the program is damaged")
        values = list(plan.values)
        self._check_sizes(sizes, values)
        # mem_id 0 is the format's reserved entry; a buffer the device table leaves out is the CPU's
        self.arenas, self.uploads = {}, []  # uploads: (arena, device) holding constants on a device
        self.lent = set(lent or ())
        self.max_memory, self.taken = max_memory, 0
        try:
            self.delegates: list[LoadedMethod] = []
            for mem_id in range(1, len(sizes)):
                device = devices.get(mem_id, CPU)
                if device.type not in DEVICE_TYPES:
                    raise DevplanError(f"{self.where}: buffer {mem_id} is on {device}, a device type ET12 does not "
                                       f"define; the program is damaged")
                if mem_id in self.lent:
                    self.arenas[mem_id] = self._borrow(mem_id, sizes[mem_id], device, *lent[mem_id])
                    continue
                self._take(sizes[mem_id], f"buffer {mem_id} ({device})")
                try:
                    self.arenas[mem_id] = (allocator_for(device).allocate(sizes[mem_id], device), device)
                except DevplanError as error:
                    raise DevplanError(f"{self.where}: {error}") from None
                except (RuntimeError, MemoryError) as error:  # the device has not that much free
                    raise DevplanError(f"{self.where}: buffer {mem_id} ({device}) of {sizes[mem_id]} bytes cannot be "
                                       f"allocated ({first_line(error)}); free memory there or run on a larger "
                                       f"machine") from None
            # A program whose buffers all sit on one device (a devplan payload) runs its kernels
            # there, so its constants go there too.
            placed = {device for _, device in self.arenas.values()} or _tensor_devices(values)
            self.home = placed.pop() if len(placed) == 1 else CPU
            for index, delegate in enumerate(plan.delegates or ()):
                self.delegates.append(self._open_delegate(pte, plans, name, index, delegate))
            self._load(pte, plan, values)
        except BaseException:
            self.release()  # a device allocator gets back what it gave, even for a damaged program
            raise

    def _borrow(self, mem_id: int, size: int, device: Device, window: torch.Tensor,
                owner: Device) -> tuple[torch.Tensor, Device]:
        if owner != device or window.numel() < size:
            raise DevplanError(f"{self.where}: buffer {mem_id} ({size} bytes on {device}) does not fit the window its "
                               f"caller lends it ({window.numel()} bytes on {owner}); the program is damaged")
        return window[:size], device

    def _load(self, pte: PteFile, plan, values: list) -> None:
        self.values: list[Any] = [None] * len(values)
        self.devices: dict[int, Device] = {}
        self.bounds: dict[int, list[int]] = {}  # dynamic tensor -> its planned (upper bound) shape
        self.borrowed: set[int] = set()  # unplanned inputs and outputs: a caller's tensors stand in
        self.used = _used(plan, values)
        for index, value in enumerate(values):
            try:
                self.values[index] = self._bind(pte, index, value)
            except (RuntimeError, ValueError, TypeError, OverflowError) as error:
                raise DevplanError(f"{self.where}: value {index} cannot be held ({first_line(error)}); "
                                   f"the program is damaged") from None
        for index, value in enumerate(values):  # ExecuTorch's runtime aborts on a list item of another type
            if value.valType == KernelTypes.IntList and any(values[i].valType != KernelTypes.Int
                                                            for i in self.values[index].items):
                raise DevplanError(f"{self.where}: value {index}, a list of numbers, holds a value that is not a "
                                   f"number; the program is damaged")
        self.inputs = [self._index(i, "an input") for i in ints(plan.inputs)]
        self.outputs = [self._index(i, "an output") for i in ints(plan.outputs)]
        self.operators = [f"{text(op.name)}.{text(op.overload)}" if text(op.overload) else text(op.name)
                          for op in plan.operators or ()]
        if any(chain.instructions is None for chain in plan.chains or ()):  # as ExecuTorch's runtime refuses it
            raise DevplanError(f"{self.where}: a chain has no list of instructions; the program is damaged")
        self.steps = [self._step(i, instruction) for chain in plan.chains or ()
                      for i, instruction in enumerate(chain.instructions)]

    def execute(self, inputs: Sequence[Any]) -> list[Any]:
        """Run once: copy `inputs` in, run every instruction, return host copies of the outputs."""
        if len(inputs) != len(self.inputs):
            raise DevplanError(f"{self.where} takes {len(self.inputs)} inputs, got {len(inputs)}")
        for position, (index, given) in enumerate(zip(self.inputs, inputs)):
            self._set_input(position, index, given)
        self._materialize(set(self.inputs))
        self._run_all()
        return [self._output(index) for index in self.outputs]

    def _materialize(self, bound: set[int]) -> None:
        """Host memory for the unplanned tensors nobody handed in this run (the outputs of a
        program that leaves them to its caller), made once: until then they take none."""
        for index in sorted(self.borrowed - bound):
            slot = self.values[index]
            if isinstance(slot, torch.Tensor) and 0 in slot.stride() and slot.numel() > 1:
                self._take(slot.numel() * slot.element_size(), f"value {index}, an unplanned tensor of {list(slot.shape)}")
                self.values[index] = torch.zeros(slot.shape, dtype=slot.dtype)

    def call(self, args: Sequence[Any], outs: Sequence[torch.Tensor]) -> list[Any]:
        """Run once as a delegate: `args` and `outs` are its caller's tensors, already on this
        method's device. An input or output the payload left unplanned is the caller's tensor
        itself (kernels read and write it there); a planned one is copied in, or comes back as
        a view of this method's arena, never via the host."""
        for position, (index, given) in enumerate(zip(self.inputs, args)):
            if not isinstance(self.values[index], torch.Tensor) and not isinstance(given, torch.Tensor):
                self.values[index] = given  # a size the calling method computed
                continue
            if not isinstance(self.values[index], torch.Tensor) or not self._accept(index, given):
                raise DevplanError(f"{self.where}: delegate input {position} does not match the payload's input "
                                   f"{index}; the program is damaged")
            if index in self.borrowed:
                self.values[index] = given
            else:
                self.values[index].resize_(given.shape).copy_(given)
        for position, (index, out) in enumerate(zip(self.outputs, outs)):
            if index in self.borrowed:
                if not self._accept(index, out):
                    raise DevplanError(f"{self.where}: delegate output {position} does not match the payload's "
                                       f"output {index}; the program is damaged")
                self.values[index] = out
        self._materialize(set(self.inputs) | set(self.outputs))
        self._run_all()
        return [self._value(index) for index in self.outputs]

    def _accept(self, index: int, given: Any) -> bool:
        """Whether tensor `given` can be input `index`: of its shape, or for a dynamic input of
        any shape of the same rank within the planned upper bound (which the slot then takes:
        a planned slot's storage is the arena's, so resizing stays inside its bytes)."""
        slot = self.values[index]
        if not isinstance(given, torch.Tensor) or given.dtype != slot.dtype:
            return False
        bound = self.bounds.get(index)
        if bound is None or given.dim() != len(bound) or any(g > b for g, b in zip(given.shape, bound)):
            return given.shape == slot.shape
        return True

    def _run_all(self) -> None:
        pc, budget = 0, len(self.steps) + _EXTRA_STEPS
        while pc < len(self.steps):
            budget -= 1
            if budget < 0:  # only jumps can run this long; a damaged program must not hang us
                raise DevplanError(f"{self.where}: executed {len(self.steps) + _EXTRA_STEPS} instructions without "
                                   f"finishing; its jumps loop")
            try:
                pc = self._run(pc, self.steps[pc])
            except (RuntimeError, TypeError, ValueError, IndexError, ArithmeticError, AttributeError,
                    NotImplementedError, AssertionError) as error:  # a damaged program: one line, not a traceback
                # (torch's quantized ops assert their input dtypes)
                raise DevplanError(f"{self.where}: instruction {pc} ({self.steps[pc].name}) failed: "
                                   f"{first_line(error)}") from None

    def _take(self, nbytes: int, what: str) -> None:
        """Count `nbytes` more against the method's memory limit, refusing first what passes it."""
        if self.taken + nbytes > self.max_memory:
            raise DevplanError(f"{self.where}: {what} needs {nbytes} bytes, which with the {self.taken} bytes taken "
                               f"before it passes the memory limit of {self.max_memory} bytes; raise the limit "
                               f"(devplan run --max-memory) if the program is meant to be this large")
        self.taken += nbytes

    def sample_inputs(self, seed: int = 0) -> list[Any]:
        """Inputs of the right shapes and dtypes: seeded normal floats, zeros for integer and
        bool tensors (always valid indices), and the program's own values for number inputs."""
        generator = torch.Generator().manual_seed(seed)
        samples = []
        for index in self.inputs:
            slot = self.values[index]
            if isinstance(slot, torch.Tensor) and slot.dtype.is_floating_point:
                samples.append(torch.randn(slot.shape, generator=generator).to(slot.dtype))
            elif isinstance(slot, torch.Tensor):
                samples.append(torch.zeros(slot.shape, dtype=slot.dtype))
            else:
                samples.append(slot)
        return samples

    def release(self) -> None:
        for delegate in getattr(self, "delegates", ()):
            delegate.release()
        owned = [arena for mem_id, arena in self.arenas.items() if mem_id not in self.lent]
        for arena, device in (*owned, *self.uploads):
            allocator_for(device).deallocate(arena)
        self.arenas, self.uploads, self.delegates = {}, [], []

    def _open_delegate(self, pte: PteFile, plans: dict, name: str, index: int, delegate) -> "LoadedMethod":
        backend = text(delegate.id)
        if backend != BACKEND_ID:
            raise DevplanError(f"{self.where}: delegate {index} runs on backend {backend!r}, which the reference "
                               f"runtime does not have (it runs {BACKEND_ID} payloads only)")
        payload = pte.delegate_program(list(plans).index(name), index)
        specs = [(text(spec.key), bytes(ints(spec.value))) for spec in delegate.compileSpecs or ()]
        window = read_window(specs, f"{self.where}: delegate {index}")
        if window is None:  # the payload's buffers are its own
            return LoadedMethod(payload, max_memory=self.max_memory)
        mem_id, offset = window
        if mem_id not in self.arenas:
            raise DevplanError(f"{self.where}: delegate {index}'s memory window names buffer {mem_id}, which the "
                               f"method does not have; the program is damaged")
        arena, device = self.arenas[mem_id]
        # the payload's one buffer is these bytes of the caller's; its plan keeps them free during the call
        return LoadedMethod(payload, lent={1: (arena[offset:], device)}, max_memory=self.max_memory)

    def _bind(self, pte: PteFile, index: int, value) -> Any:
        kind, val = value.valType, value.val
        if val is None and kind != KernelTypes.Null:
            raise DevplanError(f"{self.where}: value {index} has a type but no content; the program is damaged")
        if kind == KernelTypes.Tensor:
            return self._tensor(pte, index, val)
        if kind == KernelTypes.Int:
            return int(val.intVal)
        if kind == KernelTypes.Double:
            return float(val.doubleVal)
        if kind == KernelTypes.Bool:
            return bool(val.boolVal)
        if kind == KernelTypes.String:
            return text(val.stringVal)
        if kind in (KernelTypes.IntList, KernelTypes.TensorList, KernelTypes.OptionalTensorList):
            items = tuple(ints(val.items))
            return _Refs(kind, tuple(i if i == -1 and kind == KernelTypes.OptionalTensorList
                                     else self._index(i, f"list value {index}") for i in items))
        if kind == KernelTypes.DoubleList:
            return [float(x) for x in (val.items if val.items is not None else ())]
        if kind == KernelTypes.BoolList:
            return [bool(x) for x in (val.items if val.items is not None else ())]
        return None

    def _layout(self, index: int, t) -> tuple[torch.dtype, list[int], int]:
        """dtype, shape and byte size of tensor value `index`, checked."""
        name = dtypes.name_of(t.scalarType)
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype) or dtype.is_complex or name.startswith(("q", "bits", "float8")):
            raise DevplanError(f"{self.where}: value {index} has element type {name}, which the reference runtime "
                               f"cannot hold")
        shape = [int(size) for size in t.sizes] if t.sizes is not None else []
        if any(size < 0 for size in shape):
            raise DevplanError(f"{self.where}: value {index} has a negative size in {shape}; the program is damaged")
        order = ints(t.dimOrder)  # ExecuTorch's runtime refuses these two as it parses the tensor
        if t.dimOrder is not None and sorted(order) != list(range(len(shape))):
            shown = order if len(order) <= 8 else f"of {len(order)} entries"
            raise DevplanError(f"{self.where}: value {index} has the dim order {shown}, not an order of its "
                               f"{len(shape)} dimensions; the program is damaged")
        if t.storageOffset:
            raise DevplanError(f"{self.where}: value {index} has the storage offset {t.storageOffset}, which "
                               f"ExecuTorch does not support; the program is damaged")
        return dtype, shape, math.prod(shape) * dtypes.ITEMSIZE[name]

    def _check_sizes(self, sizes: list[int], values) -> None:
        """Every planned tensor inside its buffer, and no buffer far larger than its tensors
        reach (a damaged size would otherwise have us allocate it)."""
        reach: dict[int, int] = {}
        for index, value in enumerate(values):
            if value.valType == KernelTypes.Tensor and value.val.allocationInfo is not None:
                _, _, nbytes = self._layout(index, value.val)
                mem_id, offset = _where(value.val)
                if not 0 < mem_id < len(sizes) or offset + nbytes > sizes[mem_id]:
                    raise DevplanError(f"{self.where}: value {index} lies outside buffer {mem_id}; "
                                       f"the program is damaged")
                if offset % dtypes.ITEMSIZE[dtypes.name_of(value.val.scalarType)]:
                    raise DevplanError(f"{self.where}: value {index} starts at byte {offset} of buffer {mem_id}, "
                                       f"not a multiple of its element size; the program is damaged")
                reach[mem_id] = max(reach.get(mem_id, 0), offset + nbytes)
        for mem_id in range(1, len(sizes)):
            if sizes[mem_id] > 2 * reach.get(mem_id, 0) + _SLACK:
                raise DevplanError(f"{self.where}: buffer {mem_id} claims {sizes[mem_id]} bytes but its tensors "
                                   f"reach only {reach.get(mem_id, 0)}; the program is damaged")

    def _tensor(self, pte: PteFile, index: int, t) -> torch.Tensor:
        dtype, shape, nbytes = self._layout(index, t)
        if t.allocationInfo is None:
            data = pte.constant_data(int(t.dataBufferIdx))
            if data is None and t.dataBufferIdx > 0:  # ExecuTorch refuses it too; zeros would be a wrong answer
                raise DevplanError(f"{self.where}: value {index} names constant {t.dataBufferIdx}, which the program "
                                   f"does not hold; the program is damaged")
            if data is None and index not in self.used:  # nothing reads or writes it: no memory
                return torch.empty([0] * len(shape), dtype=dtype)
            if data is None:  # unplanned (an input or output the caller would own): no memory until it runs
                self.borrowed.add(index)
                if t.shapeDynamism != TensorShapeDynamism.STATIC:
                    self.bounds[index] = shape
                return torch.zeros((), dtype=dtype).expand(shape)
            host = _from_bytes(data, dtype, shape, nbytes, f"{self.where}: constant value {index}")
            return host if self.home == CPU else self._upload(host, nbytes)
        mem_id, offset = _where(t)
        arena, device = self.arenas[mem_id]
        self.devices[index] = device
        if t.shapeDynamism != TensorShapeDynamism.STATIC:  # planned at this bound; kernels resize it within
            self.bounds[index] = shape
        view = arena[offset:offset + nbytes].view(dtype).reshape(shape)
        if t.dataBufferIdx > 0 and mem_id in self.lent:  # other delegates' windows share these bytes
            raise DevplanError(f"{self.where}: value {index} has initial data in buffer {mem_id}, which the calling "
                               f"method lends only for the call; the program is damaged")
        if t.dataBufferIdx > 0:  # initial state of a mutable buffer
            initial = _from_bytes(_mutable_data(pte, int(t.dataBufferIdx)), dtype, shape, nbytes,
                                  f"{self.where}: initial value of {index}")
            allocator_for(device).copy_to_device(view, initial)
        return view

    def _upload(self, host: torch.Tensor, nbytes: int) -> torch.Tensor:
        allocator = allocator_for(self.home)
        arena = allocator.allocate(nbytes, self.home)
        self.uploads.append((arena, self.home))
        view = arena[:nbytes].view(host.dtype).reshape(host.shape)
        allocator.copy_to_device(view, host)
        return view

    def _step(self, index: int, instruction) -> _Step:
        kind, call = instruction.instrArgsType, instruction.instrArgs
        if kind == InstructionArguments.KernelCall:
            return self._kernel(index, int(call.opIndex), [self._index(a, f"instruction {index}") for a in ints(call.args)])
        if kind == InstructionArguments.DelegateCall:
            return self._delegate(index, int(call.delegateIndex), [self._index(a, f"instruction {index}") for a in ints(call.args)])
        if kind == InstructionArguments.MoveCall:
            where = f"instruction {index}"
            source, target = self._index(int(call.moveFrom), where), self._index(int(call.moveTo), where)
            if not _same_kind(self.values[source], self.values[target]):
                raise DevplanError(f"{self.where}: instruction {index} moves value {source} into value {target} of "
                                   f"another type or shape; the program is damaged")
            return _Step(kind, "move", args=(source, target))
        if kind == InstructionArguments.JumpFalseCall:
            # a destination past the end just ends the run
            return _Step(kind, "jump_false", args=(self._index(int(call.condValueIndex), f"instruction {index}"),
                                                   max(0, int(call.destinationInstruction))))
        if kind != InstructionArguments.FreeCall or call is None:  # as ExecuTorch's runtime refuses it
            raise DevplanError(f"{self.where}: instruction {index} has no call; the program is damaged")
        return _Step(kind, "free")  # planned memory needs no freeing

    def _delegate(self, index: int, delegate: int, args: list[int]) -> _Step:
        if not 0 <= delegate < len(self.delegates):
            raise DevplanError(f"{self.where}: instruction {index} calls delegate {delegate} of {len(self.delegates)}; "
                               f"the program is damaged")
        method = self.delegates[delegate]
        wanted = [method.values[i] for i in method.inputs] + [torch.empty(0)] * len(method.outputs)
        if len(args) != len(wanted) or not all(
                isinstance(self.values[a], torch.Tensor) == isinstance(w, torch.Tensor) for a, w in zip(args, wanted)):
            raise DevplanError(f"{self.where}: instruction {index} passes {len(args)} values to delegate {delegate}, "
                               f"whose payload takes {len(method.inputs)} and returns {len(method.outputs)} tensors "
                               f"or numbers that do not match them; the program is damaged")
        return _Step(InstructionArguments.DelegateCall, f"delegate {delegate}", method, tuple(args))

    def _device_copy(self, name: str, args: list[int]) -> _Step:
        """et_copy::_h2d_copy.out / _d2h_copy.out (self, out, returned): through the allocator of
        the device end."""
        source, out = args[0], args[1]
        if name == TO_DEVICE:
            allocator = allocator_for(self.devices.get(out, CPU))
            return _Step(InstructionArguments.KernelCall, name,
                         lambda src, dst: allocator.copy_to_device(dst.resize_(src.shape), src), (source, out))
        allocator = allocator_for(self.devices.get(source, CPU))
        return _Step(InstructionArguments.KernelCall, name,
                     lambda src, dst: dst.resize_(src.shape).copy_(allocator.copy_to_host(src)), (source, out))

    def _kernel(self, index: int, op_index: int, args: list[int]) -> _Step:
        name = self.operators[op_index] if 0 <= op_index < len(self.operators) else f"operator({op_index})"
        if name in (TO_DEVICE, TO_HOST) and len(args) >= 2:
            return self._device_copy(name, args)
        if name == ET_VIEW and len(args) == 3:
            return _Step(InstructionArguments.KernelCall, name, _et_view, tuple(args))
        if name in _NUMBER_KERNELS and args:
            return _Step(InstructionArguments.KernelCall, name, _NUMBER_KERNELS[name], tuple(args[:-1]), result=args[-1])
        # quantized ops run torch's functional forms even where ExecuTorch's Python has given
        # torch its own kernels for their out variants: this runtime stays an independent check
        op = _EXTRA_KERNELS.get(name) or _quantized_op(name) or _torch_op(name)
        if op is None:
            raise DevplanError(f"{self.where}: instruction {index} calls {name}, which the reference runtime "
                               f"does not know")
        if name in _EXTRA_KERNELS:
            return _Step(InstructionArguments.KernelCall, name, op, tuple(args[:-1]), **self._outs(args[-2:-1]))
        schema = op._schema.arguments
        if not any(s.is_out for s in schema) and not (op._schema.is_mutable and name.partition(".")[0] in PORTABLE):
            # a functional op's result would be dropped; ExecuTorch has only out and a few in-place kernels
            raise DevplanError(f"{self.where}: instruction {index} calls {name}, which is not an out variant "
                               f"(.out); the program is damaged or made for another runtime")
        if len(args) < len(schema):
            raise DevplanError(f"{self.where}: instruction {index} gives {name} {len(args)} arguments; "
                               f"its schema takes {len(schema)}")
        results = max(1, len(op._schema.returns))  # after the arguments, the results (a void out op's out list)
        if len(args) > len(schema) + results:  # ExecuTorch's kernels refuse more
            raise DevplanError(f"{self.where}: instruction {index} gives {name} {len(args)} arguments and results; "
                               f"its schema takes {len(schema)} and {results}; the program is damaged")
        positional = tuple(a for a, s in zip(args, schema) if not s.kwarg_only)
        keywords = tuple((s.name, a) for a, s in zip(args, schema) if s.kwarg_only)
        outs = [a for a, s in zip(args, schema) if s.is_out]
        return _Step(InstructionArguments.KernelCall, name, op, positional, keywords, **self._outs(outs))

    def _outs(self, outs: list[int]) -> dict[str, tuple[int, ...]]:
        """A kernel's out tensors (lists' items too) as a step's `emptied` (dynamic: sized by the
        kernel within their bound) and `fixed` (static: the kernel must keep their shape)."""
        outs = [i for a in outs for i in (self.values[a].items if isinstance(self.values[a], _Refs) else (a,))]
        return {"emptied": tuple(i for i in outs if i in self.bounds),
                "fixed": tuple(i for i in outs if i not in self.bounds and isinstance(self.values[i], torch.Tensor))}

    def _run(self, pc: int, step: _Step) -> int:
        if step.kind == InstructionArguments.KernelCall:
            for index in step.emptied:  # else torch warns of the resize, or sees an in-place input overlap it
                self.values[index].resize_([0] * self.values[index].dim())  # rank kept: kernels check it
            shapes = [self.values[i].shape for i in step.fixed]
            result = step.call(*(self._value(a) for a in step.args), **{k: self._value(a) for k, a in step.keywords})
            if step.result is not None:
                self.values[step.result] = result
            for index, shape in zip(step.fixed, shapes):
                self._keep_shape(pc, step, index, shape, self.values[index].shape)
            for index in step.emptied:
                self._within_bound(pc, step, index)
        elif step.kind == InstructionArguments.DelegateCall:
            inputs = len(step.call.inputs)
            outs = step.args[inputs:]
            results = step.call.call([self.values[a] for a in step.args[:inputs]], [self.values[a] for a in outs])
            for out, result in zip(outs, results):
                if result is self.values[out]:  # the payload wrote it where it lies
                    continue
                if out not in self.bounds:
                    self._keep_shape(pc, step, out, self.values[out].shape, result.shape)
                self.values[out].resize_(result.shape).copy_(result)  # a dynamic result takes its run-time shape
                if out in self.bounds:
                    self._within_bound(pc, step, out)
        elif step.kind == InstructionArguments.MoveCall:
            self.values[step.args[1]] = self.values[step.args[0]]
        elif step.kind == InstructionArguments.JumpFalseCall and not self._value(step.args[0]):
            return step.args[1]
        return pc + 1

    def _keep_shape(self, pc: int, step: _Step, index: int, planned: torch.Size, made: torch.Size) -> None:
        """A static tensor holds exactly its planned bytes: a result of another shape would
        spill into its neighbours (ExecuTorch's runtime refuses such a resize)."""
        if made != planned:
            raise DevplanError(f"{self.where}: instruction {pc} ({step.name}) makes value {index} a {tuple(made)} "
                               f"result where the plan holds {tuple(planned)}; the program is damaged")

    def _within_bound(self, pc: int, step: _Step, index: int) -> None:
        """A dynamic tensor holds at most the bytes of its planned upper bound: more would have
        overwritten its neighbours."""
        made, bound = self.values[index].shape, self.bounds[index]
        if math.prod(made) > math.prod(bound):
            raise DevplanError(f"{self.where}: instruction {pc} ({step.name}) makes value {index} a {tuple(made)} "
                               f"result, larger than its planned bound {tuple(bound)}; the program is damaged")

    def _value(self, index: int) -> Any:
        value = self.values[index]
        if isinstance(value, _Refs):
            if value.kind == KernelTypes.IntList:
                return [self.values[i] for i in value.items]
            return [None if i < 0 else self.values[i] for i in value.items]
        return value

    def _index(self, value: int, user: str) -> int:
        if not 0 <= value < len(self.values):
            raise DevplanError(f"{self.where}: {user} names value {value}, but the method has {len(self.values)}; "
                               f"the program is damaged")
        return value

    def _set_input(self, position: int, index: int, given: Any) -> None:
        slot = self.values[index]
        if not isinstance(slot, torch.Tensor):
            self.values[index] = given
            return
        if not self._accept(index, given):
            got = f"{tuple(given.shape)} {given.dtype}" if isinstance(given, torch.Tensor) else type(given).__name__
            wanted = (f"a {slot.dtype} tensor of at most {tuple(self.bounds[index])}" if index in self.bounds
                      else f"a {tuple(slot.shape)} {slot.dtype} tensor")
            raise DevplanError(f"{self.where}: input {position} must be {wanted}, got {got}")
        if index in self.borrowed:  # the caller's memory, as ExecuTorch takes an input it does not plan
            self.values[index] = given.detach().cpu().clone()
            return
        allocator_for(self.devices.get(index, CPU)).copy_to_device(slot.resize_(given.shape), given.detach().cpu())

    def _output(self, index: int) -> Any:
        value = self.values[index]
        if isinstance(value, torch.Tensor):
            return allocator_for(self.devices.get(index, CPU)).copy_to_host(value)
        return self._value(index)


def _et_view(source: torch.Tensor, size: list[int], out: torch.Tensor) -> None:
    """`out` becomes `source`'s bytes under the shape `size` gives now, as ExecuTorch's et_view
    points its result at its source's data."""
    view = source.view(size)
    out.set_(view.untyped_storage(), view.storage_offset(), view.shape, view.stride())


@dataclass(frozen=True)
class _Refs:
    """A list value: the value indices it holds, resolved when a kernel reads it."""
    kind: int
    items: tuple[int, ...]


def _used(plan, values: list) -> set[int]:
    """The values that the method's inputs, outputs and instructions name, list items included:
    only these need memory of their own."""
    named = set(ints(plan.inputs)) | set(ints(plan.outputs))
    for chain in plan.chains or ():
        for instruction in chain.instructions or ():
            call = instruction.instrArgs
            if instruction.instrArgsType in (InstructionArguments.KernelCall, InstructionArguments.DelegateCall):
                named |= set(ints(call.args))
            elif instruction.instrArgsType == InstructionArguments.MoveCall:
                named |= {int(call.moveFrom), int(call.moveTo)}
    lists = (KernelTypes.TensorList, KernelTypes.OptionalTensorList, KernelTypes.IntList)
    for index in list(named):
        if 0 <= index < len(values) and values[index].valType in lists and values[index].val is not None:
            named |= set(ints(values[index].val.items))
    return named


def _tensor_devices(values: list) -> set[Device]:
    """Devices the tensors say they are on: where a payload that plans no buffer of its own
    (its inputs and outputs its caller's) runs."""
    found = set()
    for value in values:
        if value.valType == KernelTypes.Tensor and value.val is not None and value.val.dataBufferIdx == 0:
            extra = value.val.extraTensorInfo
            found.add(Device.from_code(extra.deviceType, extra.deviceIndex) if extra is not None else CPU)
    return found


def _same_kind(a: Any, b: Any) -> bool:
    """Whether a MoveCall may put `a` where `b` was: the same type, and for tensors the same
    dtype and shape (other instructions were checked against `b`)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and (a.dtype, a.shape) == (b.dtype, b.shape)
    return type(a) is type(b)


def _where(t) -> tuple[int, int]:
    info = t.allocationInfo
    return int(info.memoryId), int(info.memoryOffsetLow) + (int(info.memoryOffsetHigh) << 32)


def _from_bytes(data: bytes, dtype: torch.dtype, shape: list[int], nbytes: int, what: str) -> torch.Tensor:
    if len(data) < nbytes:
        raise DevplanError(f"{what} has {len(data)} bytes of data but needs {nbytes}; the program is damaged")
    return torch.frombuffer(bytearray(data[:nbytes]), dtype=torch.uint8).view(dtype).reshape(shape)


def _resize_within(out: torch.Tensor, size: list[int]) -> torch.Tensor:
    """`out` resized to `size`, a shape the program gives, only within the bytes of the storage it
    views: torch would otherwise grow the arena to whatever the file asks."""
    room = out.untyped_storage().nbytes() - out.storage_offset() * out.element_size()
    if any(n < 0 for n in size) or math.prod(size) * out.element_size() > room:
        raise ValueError(f"size {list(size)} does not fit the {room} bytes its out tensor's buffer holds")
    return out.resize_(size)


def _torch_op(name: str):
    qualified, _, overload = name.partition(".")
    namespace, _, op = qualified.partition("::")
    packet = getattr(getattr(torch.ops, namespace, None), op, None) if namespace and op else None
    return getattr(packet, overload or "default", None) if packet is not None else None


@dataclass(frozen=True)
class _Functional:
    """An out variant that torch does not define (ExecuTorch's quantized kernels): its
    functional op runs, and the results go into the out tensors."""
    _schema: torch._C.FunctionSchema
    functional: Any

    def __call__(self, *args, **kwargs):
        outs = [kwargs.pop(a.name) for a in self._schema.arguments if a.is_out]
        given = {a.name: value for a, value in zip(self._schema.arguments, args)}
        if given.get("quant_min", 0) > given.get("quant_max", 0):  # ExecuTorch's kernels abort on it
            raise ValueError(f"quant_min {given['quant_min']} is greater than quant_max {given['quant_max']}")
        results = self.functional(*args, **kwargs)
        for out, result in zip(outs, results if isinstance(results, tuple) else (results,)):
            out.resize_(result.shape).copy_(result)
        return outs[0] if len(outs) == 1 else tuple(outs)


def _quantized_op(name: str) -> _Functional | None:
    functional = _QUANTIZED_BY_OUT.get(name)
    if functional is None:
        return None
    import torch.ao.quantization.fx._decomposed  # noqa: F401 - defines the functional quantized_decomposed ops

    return _Functional(QUANTIZED[functional], _torch_op(functional))


def _mutable_data(pte: PteFile, index: int) -> bytes:
    segments = pte.program.mutableDataSegments or ()
    if not segments:
        raise DevplanError(f"{pte.name}: a planned tensor has initial data {index} but the program has no mutable data")
    sub = segments[0]
    offsets = [int(o) for o in sub.offsets]
    if not 0 < index < len(offsets):
        raise DevplanError(f"{pte.name}: a planned tensor names initial data {index} of {len(offsets)}; "
                           f"the program is damaged")
    data = pte.segments[sub.segmentIndex]
    stop = offsets[index + 1] if index + 1 < len(offsets) else len(data)
    return data[offsets[index]:stop]




def run(source: str | os.PathLike | bytes | PteFile, inputs: Sequence[Any], *, method: str = "forward",
        runs: int = 1) -> list[list[Any]]:
    """Run `method` of a .pte `runs` times on the same loaded method; the outputs of each run."""
    pte = source if isinstance(source, PteFile) else read_pte(source)
    loaded = LoadedMethod(pte, method)
    try:
        return [loaded.execute(inputs) for _ in range(runs)]
    finally:
        loaded.release()
