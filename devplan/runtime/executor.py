"""The reference executor: runs one method of any ET12 program in Python, every planned
tensor a view into its buffer's arena exactly where the plan put it, so a plan that lets two
live tensors overwrite each other gives wrong outputs here too. Kernels are torch's own
out-variant ops, called as the program's argument lists say; ExecuTorch's et_copy ops move
tensors between host and device through the DeviceAllocators; a DevplanDelegate call runs
its payload, itself an ET12 program, on the device where its buffers are planned.

This module loads a method (from devplan.pte.decode's view: arenas, bound values, delegates'
payloads) and runs it (`LoadedMethod`, `run`); checks.py holds what ExecuTorch's runtime
refuses, memory.py the run's memory budget and the constants made from the file's bytes,
steps.py the instructions made into steps, kernels.py the kernel table and interpreter.py
the loop that runs the steps."""

from __future__ import annotations

import os
from typing import Any, Sequence

import torch

from devplan.errors import DevplanError, first_line
from devplan.pte import PteFile, read_pte
from devplan.pte.decode import Delegate, MethodView, Tensor, methods
from devplan.pte.fb.KernelTypes import KernelTypes
from devplan.pte.payloads import runs_here
from devplan.runtime.allocator import allocator_for
from devplan.runtime.checks import (
    check_chains,
    check_number_lists,
    check_program,
    checked_dtypes,
    value_index,
    window_reach,
)
from devplan.runtime.graphs import GraphSteps
from devplan.runtime.interpreter import Refs, interpret, value_of
from devplan.runtime.memory import MAX_MEMORY, Memory, constant, from_bytes
from devplan.runtime.program_validation import check_planned_total
from devplan.runtime.steps import build_steps
from devplan.spec import CPU, DEVICE_TYPES, DEVPLAN_BACKEND as DEVPLAN, Device

# Delegate methods one run may load. Delegates of one payload and window share one, but each
# window of a payload is loaded apart (its values are views of those bytes), and nested payloads
# multiply: k windows at each of 4 levels would be k**4 loads from a file of a few KB. A program
# devplan compiles loads one per partition.
MAX_LOADED_DELEGATES = 1024


class LoadedMethod:
    """One method with its arenas allocated and its values bound; `execute` may run it many
    times, and state kept in planned buffers carries over between runs as on a device."""

    def __init__(
        self,
        pte: PteFile,
        name: str = "forward",
        lent: dict[int, tuple[torch.Tensor, Device]] | None = None,
        *,
        max_memory: int = MAX_MEMORY,
        memory: Memory | None = None,
        cuda_graphs: bool = True,
    ) -> None:
        """`lent`: mem_id -> (bytes, device) that the caller lends for that buffer (a window of
        its own arena) instead of an arena of this method's own. `max_memory`: bytes the
        method's arenas, unplanned tensors and constants copied to a device may take in all,
        its delegates' included (they share the caller's `memory`). `cuda_graphs`: a payload
        whose buffers are in CUDA memory replays its steps as a CUDA graph (graphs.py)."""
        self.memory = memory or Memory(max_memory)
        check_planned_total(pte, self.memory.limit)  # ExecuTorch's runtime allocates every method's buffers
        # once per file (a refused file is refused again each time it is asked)
        pte.memo(("runnable",), lambda: check_program(pte))
        view = method_view(pte, name)
        self.view, self.where, devices, sizes = view, view.where, view.buffer_devices, view.buffer_sizes
        # every tensor checked before anything is allocated, once per payload however many
        # windows load it; binding and sizes read these
        self.dtypes = pte.memo(("runtime checked", name), lambda: checked_dtypes(view, window_reach(pte, view)))
        # mem_id 0 is the format's reserved entry; a buffer the device table leaves out is the CPU's
        self.arenas: dict[int, tuple[torch.Tensor, Device]] = {}
        self.uploads: list[tuple[torch.Tensor, Device]] = []  # (arena, device) holding constants on a device
        lent = lent or {}
        self.lent = set(lent)
        self.cuda_graphs = cuda_graphs
        self.graph_steps: GraphSteps | None = None
        self.delegates: list[LoadedMethod] = []
        self.work = 0  # tensor elements the last call read and wrote
        try:
            for mem_id in range(1, len(sizes)):
                device = devices.get(mem_id, CPU)
                if device.type not in DEVICE_TYPES:
                    raise DevplanError(
                        f"{self.where}: buffer {mem_id} is on {device}, a device type ET12 does not "
                        f"define; the program is damaged"
                    )
                if mem_id in self.lent:
                    self.arenas[mem_id] = self._borrow(mem_id, sizes[mem_id], device, *lent[mem_id])
                    continue
                self._take(sizes[mem_id], f"buffer {mem_id} ({device})")
                try:
                    self.arenas[mem_id] = (allocator_for(device).allocate(sizes[mem_id], device), device)
                except DevplanError as error:
                    raise DevplanError(f"{self.where}: {error}") from None
                except (RuntimeError, MemoryError) as error:  # the device has not that much free
                    raise DevplanError(
                        f"{self.where}: buffer {mem_id} ({device}) of {sizes[mem_id]} bytes cannot be "
                        f"allocated ({first_line(error)}); free memory there or run on a larger "
                        f"machine"
                    ) from None
            # A program whose buffers all sit on one device (a devplan payload) runs its kernels
            # there, so its constants go there too.
            # (one that plans none, its inputs and outputs its caller's, where its tensors say)
            placed = {device for _, device in self.arenas.values()} or {
                t.said_device or CPU for t in view.tensors.values() if not t.constant
            }
            self.home = placed.pop() if len(placed) == 1 else CPU
            # delegates of one payload and window run one loaded method
            opened: dict[tuple[int, int, tuple[int, int] | None], LoadedMethod] = {}
            for delegate in view.delegates:
                key = (*pte.payload_key(view.plan_index, delegate.index), delegate.window)
                if key not in opened:
                    opened[key] = self._open_delegate(pte, view, delegate)
                self.delegates.append(opened[key])
            self._load(pte, view)
        except BaseException:
            self.release()  # a device allocator gets back what it gave, even for a damaged program
            raise

    def _borrow(
        self, mem_id: int, size: int, device: Device, window: torch.Tensor, owner: Device
    ) -> tuple[torch.Tensor, Device]:
        if owner != device or window.numel() < size:
            raise DevplanError(
                f"{self.where}: the payload plans buffer {mem_id} as {size} bytes on {device}, more than "
                f"the memory window its caller lends it ({window.numel()} bytes on {owner}); the payload "
                f"is damaged"
            )
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
                raise DevplanError(
                    f"{self.where}: value {index} cannot be held ({first_line(error)}); the program is damaged"
                ) from None
        check_number_lists(view)
        self.inputs = [value_index(view, i, "an input") for i in view.inputs]
        self.outputs = [value_index(view, i, "an output") for i in view.outputs]
        check_chains(view)
        self.steps = build_steps(view, self.values, self.dtypes, self.bounds, self.devices, self.delegates)
        if self.cuda_graphs and self.home.type == "cuda":
            self.graph_steps = GraphSteps(self.steps, [a for a, _ in self.arenas.values()], self.bounds, self.where)

    def execute(self, inputs: Sequence[Any], clock: list[tuple[int, int, int]] | None = None) -> list[Any]:
        """Run once: copy `inputs` in, run every instruction, return host copies of the outputs;
        with `clock`, each instruction's (index, start, end) appended to it (interpret's)."""
        if len(inputs) != len(self.inputs):
            raise DevplanError(f"{self.where} takes {len(self.inputs)} inputs, got {len(inputs)}")
        for position, (index, given) in enumerate(zip(self.inputs, inputs)):
            self._set_input(position, index, given)
        self._materialize(set(self.inputs))
        interpret(self.steps, self.values, self.bounds, self.where, clock)
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
                raise DevplanError(
                    f"{self.where}: delegate input {position} does not match the payload's input "
                    f"{index}; the program is damaged"
                )
            if index in self.borrowed:
                self.values[index] = given
                self.placeholders.discard(index)
            else:
                self.values[index].resize_(given.shape).copy_(given)
        for position, (index, out) in enumerate(zip(self.outputs, outs)):
            if index in self.borrowed:
                if not self._accept(index, out):
                    raise DevplanError(
                        f"{self.where}: delegate output {position} does not match the payload's "
                        f"output {index}; the program is damaged"
                    )
                self.values[index] = out
                self.placeholders.discard(index)
        self._materialize(set(self.inputs) | set(self.outputs))
        self.work = (
            self.graph_steps(self.values, self.bounds)
            if self.graph_steps is not None  # what its caller counts
            else interpret(self.steps, self.values, self.bounds, self.where)
        )
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
            return bool(given.shape == slot.shape)
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
        if self.graph_steps is not None:
            self.graph_steps.release()
        owned = [arena for mem_id, arena in self.arenas.items() if mem_id not in self.lent]
        for arena, device in (*owned, *self.uploads):
            allocator_for(device).deallocate(arena)
        self.arenas, self.uploads, self.delegates = {}, [], []

    def _open_delegate(self, pte: PteFile, view: MethodView, delegate: Delegate) -> "LoadedMethod":
        index = delegate.index
        if not runs_here(delegate.id):
            raise DevplanError(
                f"{self.where}: delegate {index} runs on ExecuTorch's backend {delegate.id!r}, which "
                f"needs ExecuTorch's runtime: devplan run --executorch (devplan's runs {DEVPLAN} "
                f"payloads only)"
            )
        memory = self.memory
        if memory.delegates >= MAX_LOADED_DELEGATES:
            raise DevplanError(
                f"{self.where}: delegate {index} would be delegate method {memory.delegates + 1} this "
                f"run loads (each payload once per memory window, nested payloads once per window "
                f"of each caller); the reference runtime loads at most {MAX_LOADED_DELEGATES}: the "
                f"program is damaged, or run it with devplan run --executorch"
            )
        memory.delegates += 1
        # read and decoded once however many delegates share it
        payload = pte.delegate_program(view.plan_index, index)
        if delegate.window is None:  # the payload's buffers are its own
            return LoadedMethod(payload, memory=self.memory, cuda_graphs=self.cuda_graphs)
        mem_id, offset = delegate.window
        if mem_id not in self.arenas:
            raise DevplanError(
                f"{self.where}: delegate {index}'s memory window names buffer {mem_id}, which the "
                f"method does not have; the program is damaged"
            )
        arena, device = self.arenas[mem_id]
        if offset > arena.numel():
            raise DevplanError(
                f"{self.where}: delegate {index}'s memory window starts at offset {offset} of buffer "
                f"{mem_id}, which holds {arena.numel()} bytes; the program is damaged"
            )
        # the payload's one buffer is these bytes of the caller's; its plan keeps them free during the call
        return LoadedMethod(
            payload, lent={1: (arena[offset:], device)}, memory=self.memory, cuda_graphs=self.cuda_graphs
        )

    def _bind(self, pte: PteFile, view: MethodView, index: int) -> Any:
        if index in view.tensors:
            return self._tensor(pte, index, view.tensors[index])
        if index in view.lists:
            kind = view.kinds[index]
            return Refs(
                kind,
                tuple(
                    i
                    if i == -1 and kind == KernelTypes.OptionalTensorList
                    else value_index(view, i, f"list value {index}")
                    for i in view.lists[index]
                ),
            )
        if view.kinds[index] == KernelTypes.NONE:  # ExecuTorch's runtime refuses a value of no type
            raise DevplanError(f"{self.where}: value {index} has no type; the program is damaged")
        value = view.scalars.get(index)  # None for Null
        return list(value) if isinstance(value, list) else value  # a run's own copy

    def _tensor(self, pte: PteFile, index: int, t: Tensor) -> torch.Tensor:
        dtype, shape, nbytes = self.dtypes[index], list(t.shape), t.nbytes
        if t.placed is None:
            data = pte.constant_data(t.data) if t.external is None else self._external(pte, index, t.external)
            if data is None and t.data > 0:  # ExecuTorch refuses it too; zeros would be a wrong answer
                raise DevplanError(
                    f"{self.where}: value {index} names constant {t.data}, which the program "
                    f"does not hold; the program is damaged"
                )
            if index in self.borrowed:  # no memory until it runs
                if t.dynamic:
                    self.bounds[index] = shape
                return torch.zeros((), dtype=dtype).expand(shape)
            if data is None:  # nothing reads or writes it: no memory
                return torch.empty([0] * len(shape), dtype=dtype)
            host = constant(
                pte, t.external or t.data, data, dtype, shape, nbytes, f"{self.where}: constant value {index}"
            )
            return host if self.home == CPU else self._upload(index, host, nbytes)
        mem_id, offset = t.placed
        arena, device = self.arenas[mem_id]
        self.devices[index] = device
        if t.dynamic:  # planned at this bound; kernels resize it within
            self.bounds[index] = shape
        view = arena[offset : offset + nbytes].view(dtype).reshape(shape)
        if t.data > 0 and mem_id in self.lent:  # other delegates' windows share these bytes
            raise DevplanError(
                f"{self.where}: value {index} has initial data in buffer {mem_id}, which the calling "
                f"method lends only for the call; the program is damaged"
            )
        if t.data > 0:  # initial state of a mutable buffer
            initial = from_bytes(
                pte.mutable_data(t.data), dtype, shape, nbytes, f"{self.where}: initial value of {index}"
            )
            allocator_for(device).copy_to_device(view, initial)
        return view

    def _external(self, pte: PteFile, index: int, key: str) -> memoryview:
        """An external weight's bytes, from the .ptd read with the program (read_pte checked the key)."""
        if pte.external is None:
            raise DevplanError(
                f"{self.where}: value {index} is the external weight {key!r}, kept in a .ptd data "
                f"file; pass it: devplan run PROGRAM.pte --data FILE.ptd"
            )
        return pte.external.data(key)

    def _upload(self, index: int, host: torch.Tensor, nbytes: int) -> torch.Tensor:
        """The constant on this method's device, copied there once per run: every window of a
        payload reads the same copy (kernels never write constants)."""
        key = (id(host), self.home)  # `host` is the file's one copy of the constant (memory.constant)
        if key not in self.memory.uploads:
            self._take(nbytes, f"constant value {index} on {self.home}")
            allocator = allocator_for(self.home)
            arena = allocator.allocate(nbytes, self.home)
            self.uploads.append((arena, self.home))
            view = arena[:nbytes].view(host.dtype).reshape(host.shape)
            allocator.copy_to_device(view, host)
            self.memory.uploads[key] = (host, view)  # host kept: its id stays its own
        return self.memory.uploads[key][1]

    def _set_input(self, position: int, index: int, given: Any) -> None:
        slot = self.values[index]
        if not isinstance(slot, torch.Tensor):
            self.values[index] = given
            return
        if not self._accept(index, given):
            got = f"{tuple(given.shape)} {given.dtype}" if isinstance(given, torch.Tensor) else type(given).__name__
            wanted = (
                f"a {slot.dtype} tensor of at most {tuple(self.bounds[index])}"
                if index in self.bounds
                else f"a {tuple(slot.shape)} {slot.dtype} tensor"
            )
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


def run(
    source: str | os.PathLike[str] | bytes | PteFile,
    inputs: Sequence[Any],
    *,
    method: str = "forward",
    runs: int = 1,
    data: str | os.PathLike[str] | None = None,
) -> list[list[Any]]:
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
    planned: list[tuple[int, torch.dtype | None, tuple[int, ...]]] = []  # (index, dtype, shape); None: a number
    for position, index in enumerate(view.inputs):
        tensor = view.tensors.get(index)
        dtype = getattr(torch, tensor.dtype, None) if tensor is not None else None
        if tensor is None or not isinstance(dtype, torch.dtype):
            planned.append((index, None, ()))
            continue
        if memory is not None:  # a float input other than float32 is drawn as float32, then converted
            drawn = dtype.is_floating_point and dtype != torch.float32
            made = tensor.nbytes + (tensor.nbytes // dtype.itemsize * 4 if drawn else 0)
            memory.take(made, f"{view.where}: input {position}, a sample tensor of {list(tensor.shape)}")
        planned.append((index, dtype, tensor.shape))
    samples: list[Any] = []
    for index, dtype, shape in planned:
        if dtype is None:
            samples.append(view.scalars.get(index))
        elif dtype.is_floating_point:
            samples.append(torch.randn(shape, generator=generator).to(dtype))
        else:
            samples.append(torch.zeros(shape, dtype=dtype))
    return samples


def method_view(pte: PteFile, name: str) -> MethodView:
    """Method `name`'s decoded view, or one line naming the methods the program has."""
    views = {view.name: view for view in methods(pte)}
    if name not in views:
        raise DevplanError(f"{pte.name}: no method {name!r}; the program has {', '.join(views) or 'none'}")
    return views[name]
