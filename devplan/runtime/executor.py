"""The reference executor: runs one method of any ET12 program in Python, every planned
tensor a view into its buffer's arena exactly where the plan put it, so a plan that lets two
live tensors overwrite each other gives wrong outputs here too. Kernels are torch's own
out-variant ops, called as the program's argument lists say; ExecuTorch's et_copy ops move
tensors between host and device through the DeviceAllocators; a DevplanDelegate call runs
its payload, itself an ET12 program, on the device where its buffers are planned.

This module loads a method (from devplan.pte.decode's view: arenas, bound values, steps);
kernels.py is the kernel table and interpreter.py the loop that runs the steps."""
from __future__ import annotations

import os
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from devplan.errors import DevplanError, first_line
from devplan.ops import BACKEND_ID, ET_VIEW, TO_DEVICE, TO_HOST, unregistered
from devplan.pte import PteFile, read_pte
from devplan.pte.decode import Delegate, Instruction, MethodView, Tensor, methods
from devplan.pte.fb.KernelTypes import KernelTypes
from devplan.runtime.allocator import allocator_for
from devplan.runtime.interpreter import Refs, Step, interpret, value_of
from devplan.runtime.kernels import DIM_ORDER, DIM_ORDER_ARGS, NUMBERS, et_view, schema_op, writes_its_outs
from devplan.spec import CPU, DEVICE_TYPES, Device

_KIND_NAMES = {code: name for name, code in vars(KernelTypes).items() if not name.startswith("_")}
# the value types ExecuTorch's kernels read an argument of these schema types as, asserting
# (aborting the process) on any other: toDouble, toIntList, toInt, toBool
_KIND_OF_TYPE = {name: kinds + extra for plain, kinds in (("float", (KernelTypes.Double,)), ("List[int]", (KernelTypes.IntList,)),
                                                         ("int", (KernelTypes.Int,)), ("bool", (KernelTypes.Bool,)))
                 for name, extra in ((plain, ()), (f"Optional[{plain}]", (KernelTypes.Null,)))}
_SLACK = 1 << 20  # bytes a buffer may hold beyond twice what its tensors reach (alignment, reserves)
# Memory a method may take for its arenas and unplanned tensors unless its caller says more:
# every size comes from the file, and a few damaged bytes can ask for terabytes.
MAX_MEMORY = 8 << 30
# Delegate methods one run may load. Delegates of one payload and window share one, but each
# window of a payload is loaded apart (its values are views of those bytes), and nested payloads
# multiply: k windows at each of 4 levels would be k**4 loads from a file of a few KB. A program
# devplan compiles loads one per partition.
MAX_LOADED_DELEGATES = 1024


class LoadedMethod:
    """One method with its arenas allocated and its values bound; `execute` may run it many
    times, and state kept in planned buffers carries over between runs as on a device."""

    def __init__(self, pte: PteFile, name: str = "forward", lent: dict[int, tuple[torch.Tensor, Device]] | None = None,
                 *, max_memory: int = MAX_MEMORY, memory: "Memory | None" = None) -> None:
        """`lent`: mem_id -> (bytes, device) that the caller lends for that buffer (a window of
        its own arena) instead of an arena of this method's own. `max_memory`: bytes the
        method's arenas, unplanned tensors and constants copied to a device may take in all,
        its delegates' included (they share the caller's `memory`)."""
        pte.memo(("runnable",), lambda: _check_program(pte))
        view = method_view(pte, name)
        self.view, self.where, devices, sizes = view, view.where, view.buffer_devices, view.buffer_sizes
        if view.unlisted:  # as ExecuTorch's runtime refuses it ("Missing outputs field", ...)
            raise DevplanError(f"{self.where} has no {' or '.join(view.unlisted)} table; the program is damaged")
        # every tensor checked before anything is allocated, once per payload however many
        # windows load it; binding and sizes read these
        self.dtypes = pte.memo(("runtime checked", name), lambda: self._checked(view))
        # mem_id 0 is the format's reserved entry; a buffer the device table leaves out is the CPU's
        self.arenas, self.uploads = {}, []  # uploads: (arena, device) holding constants on a device
        self.lent = set(lent or ())
        self.memory = memory or Memory(max_memory)
        self.delegates: list[LoadedMethod] = []
        self.work = 0  # tensor elements the last call read and wrote
        try:
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
            # (one that plans none, its inputs and outputs its caller's, where its tensors say)
            placed = {device for _, device in self.arenas.values()} or {
                t.said_device or CPU for t in view.tensors.values() if not t.constant}
            self.home = placed.pop() if len(placed) == 1 else CPU
            opened: dict[tuple, LoadedMethod] = {}  # delegates of one payload and window run one loaded method
            for delegate in view.delegates:
                key = (*pte.payload_key(view.plan_index, delegate.index), delegate.window)
                if key not in opened:
                    opened[key] = self._open_delegate(pte, view, delegate)
                self.delegates.append(opened[key])
            self._load(pte, view)
        except BaseException:
            self.release()  # a device allocator gets back what it gave, even for a damaged program
            raise

    def _checked(self, view: MethodView) -> dict[int, torch.dtype]:
        self.dtypes = {index: self._dtype(index, t) for index, t in view.tensors.items()}
        self._check_layouts(view)
        self._check_memory(view)
        self._check_sizes(view)
        return self.dtypes

    def _borrow(self, mem_id: int, size: int, device: Device, window: torch.Tensor,
                owner: Device) -> tuple[torch.Tensor, Device]:
        if owner != device or window.numel() < size:
            raise DevplanError(f"{self.where}: the payload plans buffer {mem_id} as {size} bytes on {device}, more than "
                               f"the memory window its caller lends it ({window.numel()} bytes on {owner}); the payload "
                               f"is damaged")
        return window[:size], device

    def _load(self, pte: PteFile, view: MethodView) -> None:
        self.values: list[Any] = [None] * len(view.kinds)
        self.devices: dict[int, Device] = {}
        self.bounds: dict[int, list[int]] = {}  # dynamic tensor -> its planned (upper bound) shape
        self.borrowed = view.unplanned  # a caller's tensors stand in for these
        self.placeholders = set(self.borrowed)  # borrowed ones no caller has handed in yet: no memory
        for index in range(len(view.kinds)):
            try:
                self.values[index] = self._bind(pte, view, index)
            except (RuntimeError, ValueError, TypeError, OverflowError) as error:
                raise DevplanError(f"{self.where}: value {index} cannot be held ({first_line(error)}); "
                                   f"the program is damaged") from None
        for index, items in view.lists.items():  # ExecuTorch's runtime aborts on a list item of another type
            if view.kinds[index] == KernelTypes.IntList and any(view.kinds[i] != KernelTypes.Int for i in items):
                raise DevplanError(f"{self.where}: value {index}, a list of numbers, holds a value that is not a "
                                   f"number; the program is damaged")
        self.inputs = [self._index(i, "an input") for i in view.inputs]
        self.outputs = [self._index(i, "an output") for i in view.outputs]
        if not view.chains:  # as ExecuTorch's runtime refuses it ("No chains")
            raise DevplanError(f"{self.where}: the method has no chain of instructions; the program is damaged")
        if view.unlisted_chains:  # as ExecuTorch's runtime refuses it
            raise DevplanError(f"{self.where}: a chain has no list of instructions; the program is damaged")
        lengths = Counter(row.chain for row in view.instructions)
        self.steps = [self._step(view, row, lengths[row.chain]) for row in view.instructions]

    def execute(self, inputs: Sequence[Any]) -> list[Any]:
        """Run once: copy `inputs` in, run every instruction, return host copies of the outputs."""
        if len(inputs) != len(self.inputs):
            raise DevplanError(f"{self.where} takes {len(self.inputs)} inputs, got {len(inputs)}")
        for position, (index, given) in enumerate(zip(self.inputs, inputs)):
            self._set_input(position, index, given)
        self._materialize(set(self.inputs))
        interpret(self.steps, self.values, self.bounds, self.where)
        return [self._output(index) for index in self.outputs]

    def _materialize(self, bound: set[int]) -> None:
        """Host memory for the unplanned tensors nobody handed in this run (the outputs of a
        program that leaves them to its caller), made once: until then they take none."""
        for index in sorted(self.placeholders - bound):
            slot = self.values[index]
            self._take(slot.numel() * slot.element_size(), f"value {index}, an unplanned tensor of {list(slot.shape)}")
            self.values[index] = torch.zeros(slot.shape, dtype=slot.dtype)
            self.placeholders.discard(index)

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
                self.placeholders.discard(index)
            else:
                self.values[index].resize_(given.shape).copy_(given)
        for position, (index, out) in enumerate(zip(self.outputs, outs)):
            if index in self.borrowed:
                if not self._accept(index, out):
                    raise DevplanError(f"{self.where}: delegate output {position} does not match the payload's "
                                       f"output {index}; the program is damaged")
                self.values[index] = out
                self.placeholders.discard(index)
        self._materialize(set(self.inputs) | set(self.outputs))
        self.work = interpret(self.steps, self.values, self.bounds, self.where)  # what its caller counts
        return [value_of(self.values, index) for index in self.outputs]

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

    def _take(self, nbytes: int, what: str) -> None:
        """Count `nbytes` more against the memory limit, refusing first what passes it."""
        self.memory.take(nbytes, f"{self.where}: {what}")

    def sample_inputs(self, seed: int = 0) -> list[Any]:
        """`sample_inputs` of this method, their bytes counted against its memory limit first."""
        return sample_inputs(self.view, seed, self.memory)

    def release(self) -> None:
        for delegate in {id(d): d for d in getattr(self, "delegates", ())}.values():
            delegate.release()
        owned = [arena for mem_id, arena in self.arenas.items() if mem_id not in self.lent]
        for arena, device in (*owned, *self.uploads):
            allocator_for(device).deallocate(arena)
        self.arenas, self.uploads, self.delegates = {}, [], []

    def _open_delegate(self, pte: PteFile, view: MethodView, delegate: Delegate) -> "LoadedMethod":
        index = delegate.index
        if delegate.id != BACKEND_ID:
            raise DevplanError(f"{self.where}: delegate {index} runs on ExecuTorch's backend {delegate.id!r}, which "
                               f"needs ExecuTorch's runtime: devplan run --executorch (devplan's runs {BACKEND_ID} "
                               f"payloads only)")
        memory = self.memory
        if memory.delegates >= MAX_LOADED_DELEGATES:
            raise DevplanError(f"{self.where}: delegate {index} would be delegate method {memory.delegates + 1} this "
                               f"run loads (each payload once per memory window, nested payloads once per window "
                               f"of each caller); the reference runtime loads at most {MAX_LOADED_DELEGATES}: the "
                               f"program is damaged, or run it with devplan run --executorch")
        memory.delegates += 1
        # read and decoded once however many delegates share it
        payload = pte.delegate_program(view.plan_index, index)
        if delegate.window is None:  # the payload's buffers are its own
            return LoadedMethod(payload, memory=self.memory)
        mem_id, offset = delegate.window
        if mem_id not in self.arenas:
            raise DevplanError(f"{self.where}: delegate {index}'s memory window names buffer {mem_id}, which the "
                               f"method does not have; the program is damaged")
        arena, device = self.arenas[mem_id]
        if offset > arena.numel():
            raise DevplanError(f"{self.where}: delegate {index}'s memory window starts at offset {offset} of buffer "
                               f"{mem_id}, which holds {arena.numel()} bytes; the program is damaged")
        # the payload's one buffer is these bytes of the caller's; its plan keeps them free during the call
        return LoadedMethod(payload, lent={1: (arena[offset:], device)}, memory=self.memory)

    def _bind(self, pte: PteFile, view: MethodView, index: int) -> Any:
        if index in view.tensors:
            return self._tensor(pte, index, view.tensors[index])
        if index in view.lists:
            kind = view.kinds[index]
            return Refs(kind, tuple(i if i == -1 and kind == KernelTypes.OptionalTensorList
                                     else self._index(i, f"list value {index}") for i in view.lists[index]))
        if view.kinds[index] == KernelTypes.NONE:  # ExecuTorch's runtime refuses a value of no type
            raise DevplanError(f"{self.where}: value {index} has no type; the program is damaged")
        value = view.scalars.get(index)  # None for Null
        return list(value) if isinstance(value, list) else value  # a run's own copy

    def _dtype(self, index: int, t: Tensor) -> torch.dtype:
        """The torch dtype of tensor value `index`, one this runtime can hold."""
        dtype = getattr(torch, t.dtype, None)
        if not isinstance(dtype, torch.dtype) or dtype.is_complex or t.dtype.startswith(("q", "bits", "float8")):
            raise DevplanError(f"{self.where}: value {index} has element type {t.dtype}, which the reference runtime "
                               f"cannot hold")
        return dtype

    def _check_layouts(self, view: MethodView) -> None:
        """Refuse the layouts ExecuTorch's runtime refuses as it parses a tensor, and those it
        would run on other terms than this runtime can (another device)."""
        for index, t in view.tensors.items():
            if t.dim_order is None:
                raise DevplanError(f"{self.where}: value {index} has no dim order, which ExecuTorch's runtime "
                                   f"requires of every tensor; the program is damaged")
            if not t.ordered:
                shown = list(t.dim_order) if len(t.dim_order) <= 8 else f"of {len(t.dim_order)} entries"
                raise DevplanError(f"{self.where}: value {index} has the dim order {shown}, not an order of its "
                                   f"{len(t.shape)} dimensions; the program is damaged")
            if t.storage_offset:
                raise DevplanError(f"{self.where}: value {index} has the storage offset {t.storage_offset}, which "
                                   f"ExecuTorch does not support; the program is damaged")
            if t.unbound:
                raise DevplanError(f"{self.where}: value {index} has a DYNAMIC_UNBOUND shape, which ExecuTorch's "
                                   f"runtime does not support; the program is damaged")
            buffer = view.buffer_devices.get(t.mem_id, CPU)
            if t.mem_id is not None and t.said_device is not None and t.said_device != buffer:
                raise DevplanError(f"{self.where}: value {index} is said to be on {t.said_device} (extra_tensor_info) "
                                   f"but is planned in buffer {t.mem_id}, which is on {buffer}; the program is "
                                   f"damaged")

    def _check_memory(self, view: MethodView) -> None:
        """Refuse a tensor some instruction names that has no memory: neither planned, nor a
        constant, nor an input or output a caller hands in. ExecuTorch's runtime gives it a null
        data pointer, which its kernels would read or write; zeros here would be a wrong answer."""
        conditions = {row.args[0] for row in view.instructions if row.kind == "jump_false"}
        empty = view.unplanned | {i for i in conditions
                                  if (t := view.tensors.get(i)) is not None and t.mem_id is None and not t.constant}
        for index in sorted(empty - set(view.inputs) - set(view.outputs)):
            writer = view.first_writers.get(index)
            use = (f"instruction {writer} writes it" if writer is not None
                   else f"instruction {view.lifetimes[index][0]} reads it" if index in view.lifetimes else "")
            raise DevplanError(f"{self.where}: value {index} is a tensor with no data and no place in a buffer, "
                               f"not an input or output"
                               f"{'; ' + use if use else ''} (ExecuTorch's runtime gives it no memory); the "
                               f"program is damaged")

    def _check_sizes(self, view: MethodView) -> None:
        """Every planned tensor at a whole element of its buffer (decoding has put it inside),
        and no buffer far larger than its tensors reach (a damaged size would otherwise have us
        allocate it)."""
        reach: dict[int, int] = {}
        for index, t in view.tensors.items():
            if t.mem_id is not None:
                if t.offset % self.dtypes[index].itemsize:
                    raise DevplanError(f"{self.where}: value {index} starts at byte {t.offset} of buffer {t.mem_id}, "
                                       f"not a multiple of its element size; the program is damaged")
                reach[t.mem_id] = max(reach.get(t.mem_id, 0), t.offset + t.nbytes)
        for mem_id in range(1, len(view.buffer_sizes)):
            if view.buffer_sizes[mem_id] > 2 * reach.get(mem_id, 0) + _SLACK:
                raise DevplanError(f"{self.where}: buffer {mem_id} claims {view.buffer_sizes[mem_id]} bytes but its "
                                   f"tensors reach only {reach.get(mem_id, 0)}; the program is damaged")

    def _tensor(self, pte: PteFile, index: int, t: Tensor) -> torch.Tensor:
        dtype, shape, nbytes = self.dtypes[index], list(t.shape), t.nbytes
        if t.mem_id is None:
            data = pte.constant_data(t.data) if t.external is None else self._external(pte, index, t.external)
            if data is None and t.data > 0:  # ExecuTorch refuses it too; zeros would be a wrong answer
                raise DevplanError(f"{self.where}: value {index} names constant {t.data}, which the program "
                                   f"does not hold; the program is damaged")
            if index in self.borrowed:  # no memory until it runs
                if t.dynamic:
                    self.bounds[index] = shape
                return torch.zeros((), dtype=dtype).expand(shape)
            if data is None:  # nothing reads or writes it: no memory
                return torch.empty([0] * len(shape), dtype=dtype)
            host = _constant(pte, t.external or t.data, data, dtype, shape, nbytes, f"{self.where}: constant value {index}")
            return host if self.home == CPU else self._upload(index, host, nbytes)
        arena, device = self.arenas[t.mem_id]
        self.devices[index] = device
        if t.dynamic:  # planned at this bound; kernels resize it within
            self.bounds[index] = shape
        view = arena[t.offset:t.offset + nbytes].view(dtype).reshape(shape)
        if t.data > 0 and t.mem_id in self.lent:  # other delegates' windows share these bytes
            raise DevplanError(f"{self.where}: value {index} has initial data in buffer {t.mem_id}, which the calling "
                               f"method lends only for the call; the program is damaged")
        if t.data > 0:  # initial state of a mutable buffer
            initial = _from_bytes(pte.mutable_data(t.data), dtype, shape, nbytes,
                                  f"{self.where}: initial value of {index}")
            allocator_for(device).copy_to_device(view, initial)
        return view

    def _external(self, pte: PteFile, index: int, key: str) -> memoryview:
        """An external weight's bytes, from the .ptd read with the program (read_pte checked the key)."""
        if pte.external is None:
            raise DevplanError(f"{self.where}: value {index} is the external weight {key!r}, kept in a .ptd data "
                               f"file; pass it: devplan run PROGRAM.pte --data FILE.ptd")
        return pte.external.data(key)

    def _upload(self, index: int, host: torch.Tensor, nbytes: int) -> torch.Tensor:
        """The constant on this method's device, copied there once per run: every window of a
        payload reads the same copy (kernels never write constants)."""
        key = (id(host), self.home)  # `host` is the file's one copy of the constant (_constant)
        if key not in self.memory.uploads:
            self._take(nbytes, f"constant value {index} on {self.home}")
            allocator = allocator_for(self.home)
            arena = allocator.allocate(nbytes, self.home)
            self.uploads.append((arena, self.home))
            view = arena[:nbytes].view(host.dtype).reshape(host.shape)
            allocator.copy_to_device(view, host)
            self.memory.uploads[key] = (host, view)  # host kept: its id stays its own
        return self.memory.uploads[key][1]

    def _step(self, view: MethodView, row: Instruction, chain_length: int) -> Step:
        index = row.index
        args = [self._index(a, f"instruction {index}") for a in row.args]
        if row.kind == "kernel":
            return self._kernel(index, view.operator(row.op), args, view.kinds)
        if row.kind == "delegate":
            return self._delegate(index, row.delegate, args)
        if row.kind == "move":
            source, target = args
            if not _same_kind(self.values[source], self.values[target]):
                raise DevplanError(f"{self.where}: instruction {index} moves value {source} into value {target} of "
                                   f"another type or shape; the program is damaged")
            return Step("move", "move", args=(source, target))
        if row.kind == "jump_false":
            return self._jump(view, row, args[0], chain_length)
        if row.kind != "free":  # as ExecuTorch's runtime refuses it
            raise DevplanError(f"{self.where}: instruction {index} has no call; the program is damaged")
        return Step("free", "free")  # planned memory needs no freeing

    def _jump(self, view: MethodView, row: Instruction, condition: int, chain_length: int) -> Step:
        """A JumpFalseCall as ExecuTorch's runtime runs it: its condition a Bool, or a bool
        tensor (true when every element is), and its destination an index within its own
        chain, one at or past the chain's end (or negative: the runtime reads it unsigned)
        ending the chain, whose next chain then runs."""
        kind = view.kinds[condition]
        if not (kind == KernelTypes.Bool or kind == KernelTypes.Tensor and self.dtypes[condition] == torch.bool):
            what = (f"a {self.dtypes[condition]} tensor" if kind == KernelTypes.Tensor
                    else f"of type {_KIND_NAMES.get(kind, f'kind({kind})')}")
            raise DevplanError(f"{self.where}: instruction {row.index} jumps on value {condition}, {what}; "
                               f"ExecuTorch's runtime takes only a Bool or a bool tensor as a condition; the "
                               f"program is damaged")
        start = row.index - row.at  # the chain's first instruction, across the method's chains
        within = row.destination if 0 <= row.destination < chain_length else chain_length
        return Step("jump_false", "jump_false", args=(condition, start + within))

    def _delegate(self, index: int, delegate: int, args: list[int]) -> Step:
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
        return Step("delegate", f"delegate {delegate}", method, tuple(args))

    def _device_copy(self, name: str, args: list[int]) -> Step:
        """et_copy::_h2d_copy.out / _d2h_copy.out (self, out, returned): through the allocator of
        the device end."""
        source, out = args[0], args[1]
        if name == TO_DEVICE:
            allocator = allocator_for(self.devices.get(out, CPU))
            return Step("kernel", name, lambda src, dst: allocator.copy_to_device(dst.resize_(src.shape), src),
                         (source, out))
        allocator = allocator_for(self.devices.get(source, CPU))
        return Step("kernel", name, lambda src, dst: dst.resize_(src.shape).copy_(allocator.copy_to_host(src)),
                     (source, out))

    def _kernel(self, index: int, name: str, args: list[int], kinds: tuple[int, ...]) -> Step:
        if name in (TO_DEVICE, TO_HOST) and len(args) >= 2:
            return self._device_copy(name, args)
        if name == ET_VIEW and len(args) == 3:
            return Step("kernel", name, et_view, tuple(args))
        if name in NUMBERS and args:
            return Step("kernel", name, NUMBERS[name], tuple(args[:-1]), result=args[-1])
        if name in DIM_ORDER:
            self._check_kinds(index, name, [(a, n, "", k) for a, (n, k) in zip(args, DIM_ORDER_ARGS[name])], kinds)
            return Step("kernel", name, DIM_ORDER[name], tuple(args[:-1]), **self._outs(args[-2:-1]))
        op = schema_op(name)
        if op is None:
            raise DevplanError(f"{self.where}: instruction {index} calls {name}, which the reference runtime "
                               f"does not know")
        if not writes_its_outs(op, name):  # ExecuTorch has only out and a few in-place kernels
            raise DevplanError(f"{self.where}: instruction {index} calls {name}, which is not an out variant "
                               f"(.out); the program is damaged or made for another runtime")
        if unregistered(name):  # torch may have the op, but ExecuTorch's runtime refuses to load the program
            raise DevplanError(f"{self.where}: instruction {index} calls {name}, which ExecuTorch's kernel libraries "
                               f"(portable, quantized and LLM custom ops) do not register; the program is made for "
                               f"another runtime or damaged")
        schema = op._schema.arguments
        if len(args) < len(schema):
            raise DevplanError(f"{self.where}: instruction {index} gives {name} {len(args)} arguments; "
                               f"its schema takes {len(schema)}")
        results = max(1, len(op._schema.returns))  # after the arguments, the results (a void out op's out list)
        # ExecuTorch's kernels refuse more, or no result after the arguments (its results are one
        # value, or one per returned tensor)
        if not len(schema) < len(args) <= len(schema) + results:
            raise DevplanError(f"{self.where}: instruction {index} gives {name} {len(args)} arguments and results; "
                               f"its schema takes {len(schema)} and {results}; the program is damaged")
        self._check_kinds(index, name, [(a, s.name, f" ({s.type})", _KIND_OF_TYPE.get(str(s.type)))
                                        for a, s in zip(args, schema)], kinds)
        positional = tuple(a for a, s in zip(args, schema) if not s.kwarg_only)
        keywords = tuple((s.name, a) for a, s in zip(args, schema) if s.kwarg_only)
        outs = [a for a, s in zip(args, schema) if s.is_out]
        return Step("kernel", name, op, positional, keywords, **self._outs(outs))

    def _check_kinds(self, index: int, name: str, arguments: list, kinds: tuple[int, ...]) -> None:
        """Each (value, argument name, its type's text, the value types it may be or None) of a
        kernel call: ExecuTorch's kernels assert (abort) on a value of another type."""
        for value, argument, typed, wanted in arguments:
            if wanted is not None and kinds[value] not in wanted:
                raise DevplanError(f"{self.where}: instruction {index} gives {name}'s {argument}{typed} value {value}, "
                                   f"a {_KIND_NAMES.get(kinds[value], kinds[value])}; the program is damaged")

    def _outs(self, outs: list[int]) -> dict[str, Any]:
        """A kernel's out tensors (lists' items too) as a step's `emptied` (dynamic: sized by the
        kernel within their bound) and `fixed` (static: the kernel must keep their shape)."""
        outs = [i for a in outs for i in (self.values[a].items if isinstance(self.values[a], Refs) else (a,))]
        return {"emptied": tuple(i for i in outs if i in self.bounds),
                "fixed": tuple(i for i in outs if i not in self.bounds and isinstance(self.values[i], torch.Tensor))}

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
            held = self.values[index]  # a copy of an earlier run's input, or a placeholder taking none
            grown = given.numel() * given.element_size() - (0 if index in self.placeholders else held.nbytes)
            if grown > 0:
                self._take(grown, f"input {position}, an unplanned tensor of {list(given.shape)}")
            self.values[index] = given.detach().cpu().clone()
            self.placeholders.discard(index)
            return
        allocator_for(self.devices.get(index, CPU)).copy_to_device(slot.resize_(given.shape), given.detach().cpu())

    def _output(self, index: int) -> Any:
        value = self.values[index]
        if isinstance(value, torch.Tensor):
            return allocator_for(self.devices.get(index, CPU)).copy_to_host(value)
        return value_of(self.values, index)


def _check_program(pte: PteFile) -> None:
    """Refuse what ExecuTorch's runtime refuses of a whole program, whichever method is run:
    once per file (a refused file is refused again each time it is asked)."""
    if pte.program.version:  # ExecuTorch's runtime reads schema version 0 only
        raise DevplanError(f"{pte.name}: program schema version {pte.program.version}; ExecuTorch's runtime (and "
                           f"devplan's) reads version 0; the program is damaged or made for a newer runtime")
    if pte.constants_unlisted:
        raise DevplanError(f"{pte.name}: the constant segment lists no offsets (every writer lists at least 0); "
                           f"the program is damaged")


def _same_kind(a: Any, b: Any) -> bool:
    """Whether a MoveCall may put `a` where `b` was: the same type, and for tensors the same
    dtype and shape (other instructions were checked against `b`)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and (a.dtype, a.shape) == (b.dtype, b.shape)
    return type(a) is type(b)


@dataclass
class Memory:
    """Bytes a loaded method and its delegates' payloads may take in all (their inputs too),
    and those taken; what the run shares: its count of loaded delegate methods, and constants
    on a device ((id of the host copy, device) -> (host copy, device copy))."""
    limit: int
    taken: int = 0
    delegates: int = 0
    uploads: dict = field(default_factory=dict)

    def take(self, nbytes: int, what: str) -> None:
        """Count `nbytes` more, refusing first what passes the limit (`what`: the file and
        what needs them)."""
        if self.taken + nbytes > self.limit:
            raise DevplanError(f"{what} needs {nbytes} bytes, which with the {self.taken} bytes taken before it "
                               f"passes the memory limit of {self.limit} bytes; raise the limit (devplan run "
                               f"--max-memory) if the program is meant to be this large")
        self.taken += nbytes


def _constant(pte: PteFile, data_index: int | str, data: bytes | memoryview, dtype: torch.dtype, shape: list[int],
              nbytes: int, what: str) -> torch.Tensor:
    """Constant `data_index` (or an external weight's key) as a host tensor of this dtype and
    shape, made once per file: delegates that share a payload share its constants (kernels
    never write them)."""
    mapped = pte.external.mapped if isinstance(data_index, str) and pte.external is not None else pte.mapped
    return pte.memo(("constant", data_index, dtype, tuple(shape)),
                    lambda: _from_bytes(data, dtype, shape, nbytes, what, in_place=mapped))


def _from_bytes(data: bytes | memoryview, dtype: torch.dtype, shape: list[int], nbytes: int, what: str, *,
                in_place: bool = False) -> torch.Tensor:
    """The bytes as a tensor: `in_place`, the private mapping of a file itself (its pages read
    as kernels touch them; a write would change this process's copy only), else a copy."""
    if len(data) < nbytes:
        raise DevplanError(f"{what} has {len(data)} bytes of data but needs {nbytes}; the program is damaged")
    if not in_place or not nbytes:
        return torch.frombuffer(bytearray(data[:nbytes]), dtype=torch.uint8).view(dtype).reshape(shape)
    with warnings.catch_warnings():  # the view is read-only to Python, not to the mapping underneath
        warnings.filterwarnings("ignore", "The given buffer is not writable")
        return torch.frombuffer(data[:nbytes], dtype=torch.uint8).view(dtype).reshape(shape)


def run(source: str | os.PathLike | bytes | PteFile, inputs: Sequence[Any], *, method: str = "forward",
        runs: int = 1, data: str | os.PathLike | None = None) -> list[list[Any]]:
    """Run `method` of a .pte `runs` times on the same loaded method; the outputs of each run.
    `data`: the .ptd holding the weights the program keeps outside it."""
    pte = read_pte(source, data=data)
    loaded = LoadedMethod(pte, method)
    try:
        return [loaded.execute(inputs) for _ in range(runs)]
    finally:
        loaded.release()


def sample_inputs(view: MethodView, seed: int = 0, memory: Memory | None = None) -> list[Any]:
    """Inputs of the method's shapes and dtypes: seeded normal floats, zeros for integer and
    bool tensors (always valid indices), and the program's own values for number inputs. With
    `memory`, the bytes they need (sizes come from the file) are counted against its limit
    before any is made."""
    generator = torch.Generator().manual_seed(seed)
    planned = []  # (index, tensor, dtype)
    for position, index in enumerate(view.inputs):
        tensor = view.tensors.get(index)
        dtype = getattr(torch, tensor.dtype, None) if tensor is not None else None
        if not isinstance(dtype, torch.dtype):
            dtype = None
        elif memory is not None:  # a float input other than float32 is drawn as float32, then converted
            drawn = dtype.is_floating_point and dtype != torch.float32
            made = tensor.nbytes + (tensor.nbytes // dtype.itemsize * 4 if drawn else 0)
            memory.take(made, f"{view.where}: input {position}, a sample tensor of {list(tensor.shape)}")
        planned.append((index, tensor, dtype))
    samples = []
    for index, tensor, dtype in planned:
        if dtype is None:
            samples.append(view.scalars.get(index))
        elif dtype.is_floating_point:
            samples.append(torch.randn(tensor.shape, generator=generator).to(dtype))
        else:
            samples.append(torch.zeros(tensor.shape, dtype=dtype))
    return samples


def method_view(pte: PteFile, name: str) -> MethodView:
    """Method `name`'s decoded view, or one line naming the methods the program has."""
    views = {view.name: view for view in methods(pte)}
    if name not in views:
        raise DevplanError(f"{pte.name}: no method {name!r}; the program has {', '.join(views) or 'none'}")
    return views[name]
