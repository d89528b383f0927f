"""The interpreter loop of the reference runtime: runs a loaded method's steps (its
instructions with their kernels looked up and their arguments checked, made by steps.py)
over its values, refusing in one line what a damaged program would do to its memory: a static
tensor resized, a dynamic one grown past its planned bound, a jump that loops forever or
makes its instructions do more work than one pass by far."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Iterable

import torch

from devplan.errors import DevplanError, first_line
from devplan.pte.fb.KernelTypes import KernelTypes

EXTRA_STEPS = 1_000_000  # instructions a run may execute beyond one pass: only jumps loop
# Tensor elements that instructions run again (after a jump back) may read and write in one run:
# counting instructions alone let a loop of heavy kernels run a million of them. A pass runs each
# instruction once, so what a program does without looping is its file's to say; this is what a
# loop may add: about a second of the reference runtime's kernels.
EXTRA_ELEMENTS = 1 << 26


@dataclass(frozen=True)
class Step:
    kind: str  # as devplan.pte.decode.Instruction.kind
    name: str = ""  # the operator, for messages
    call: Any = None  # a kernel: the torch op, positional and keyword value indices;
    # a delegate: the LoadedMethod of its payload
    args: tuple[int, ...] = ()
    keywords: tuple[tuple[str, int], ...] = ()
    result: int | None = None  # a number op: the value its result goes to
    emptied: tuple[int, ...] = ()  # dynamic out tensors: emptied first, the kernel sizes them
    fixed: tuple[int, ...] = ()  # static out tensors: a kernel must not resize them
    shaped: tuple[tuple[int, tuple[int, ...]], ...] = ()  # (out, planned shape) whose shape the
    # running device's kernel decides, within its planned bytes


@dataclass(frozen=True)
class Refs:
    """A list value: the value indices it holds, resolved when a kernel reads it."""

    kind: int
    items: tuple[int, ...]


Bounds = dict[int, list[int]]  # each dynamic tensor's planned bound (its largest shape), by value


def value_of(values: list[Any], index: int) -> Any:
    """Value `index` as a kernel reads it: a list value as the list of what its items hold."""
    value = values[index]
    if isinstance(value, Refs):
        if value.kind == KernelTypes.IntList:
            return [values[i] for i in value.items]
        return [None if i < 0 else values[i] for i in value.items]
    return value


def interpret(
    steps: list[Step],
    values: list[Any],
    bounds: Bounds,
    where: str,
    clock: list[tuple[int, int, int]] | None = None,
) -> int:
    """Run the steps once from the first, `values` updated in place; `bounds`: the planned
    upper bound of each dynamic tensor. Returns the tensor elements its instructions read and
    wrote (a delegate call: its payload's too), which a caller counts as the call's work. With
    `clock`, each step run is appended to it as (instruction, start, end) in host nanoseconds
    (run --etdump)."""
    pc, budget, extra, done, seen = 0, len(steps) + EXTRA_STEPS, EXTRA_ELEMENTS, 0, bytearray(len(steps))
    while pc < len(steps):
        budget -= 1
        if budget < 0:  # only jumps can run this long; a damaged program must not hang us
            raise DevplanError(
                f"{where}: executed {len(steps) + EXTRA_STEPS} instructions without finishing; its jumps loop"
            )
        start = time.perf_counter_ns() if clock is not None else 0
        try:
            following, work = _run(pc, steps[pc], values, bounds, where)
        except (
            RuntimeError,
            TypeError,
            ValueError,
            IndexError,
            ArithmeticError,
            AttributeError,
            NotImplementedError,
            AssertionError,
        ) as error:  # a damaged program: one line, not a traceback
            # (torch's quantized ops assert their input dtypes)
            raise DevplanError(f"{where}: instruction {pc} ({steps[pc].name}) failed: {first_line(error)}") from None
        if clock is not None:
            clock.append((pc, start, time.perf_counter_ns()))
        done += work
        if seen[pc]:  # run again: a jump looped back
            extra -= work
            if extra < 0:
                raise DevplanError(
                    f"{where}: instructions run again by its jumps read and wrote more than "
                    f"{EXTRA_ELEMENTS} tensor elements beyond one pass without finishing (the last "
                    f"instruction {pc}, {steps[pc].name}); its jumps loop, the program is damaged"
                )
        seen[pc] = 1
        pc = following
    return done


def _elements(values: list[Any], indices: Iterable[int]) -> int:
    """Tensor elements of these values, lists' items included."""
    total = 0
    for index in indices:
        value = value_of(values, index)
        for item in value if isinstance(value, list) else (value,):
            if isinstance(item, torch.Tensor):
                total += item.numel()
    return total


def _run(pc: int, step: Step, values: list[Any], bounds: Bounds, where: str) -> tuple[int, int]:
    """The next instruction, and the tensor elements this one read and wrote."""
    if step.kind == "kernel":
        for index in step.emptied:  # else torch warns of the resize, or sees an in-place input overlap it
            values[index].resize_([0] * values[index].dim())  # rank kept: kernels check it
        shapes = [values[i].shape for i in step.fixed]
        for index, planned in step.shaped:  # emptied too: the kernel sizes it, within its planned bytes
            values[index].resize_([0] * len(planned))
        result = step.call(
            *(value_of(values, a) for a in step.args), **{k: value_of(values, a) for k, a in step.keywords}
        )
        if step.result is not None:
            values[step.result] = result
        for index, shape in zip(step.fixed, shapes):
            _keep_shape(where, pc, step, index, shape, values[index].shape)
        for index in step.emptied:
            _within_bound(where, pc, step, index, values[index].shape, bounds[index])
        for index, planned in step.shaped:
            _within_bound(where, pc, step, index, values[index].shape, list(planned))
        return pc + 1, _elements(values, (*step.args, *(a for _, a in step.keywords)))
    if step.kind == "delegate":
        inputs = len(step.call.inputs)
        outs = step.args[inputs:]
        results = step.call.call([values[a] for a in step.args[:inputs]], [values[a] for a in outs])
        for out, result in zip(outs, results):
            if result is values[out]:  # the payload wrote it where it lies
                continue
            if out not in bounds:
                _keep_shape(where, pc, step, out, values[out].shape, result.shape)
            values[out].resize_(result.shape).copy_(result)  # a dynamic result takes its run-time shape
            if out in bounds:
                _within_bound(where, pc, step, out, values[out].shape, bounds[out])
        return pc + 1, _elements(values, step.args) + step.call.work
    if step.kind == "move":
        values[step.args[1]] = values[step.args[0]]
    elif step.kind == "jump_false":  # a Bool, or a bool tensor: true when every element is
        condition = values[step.args[0]]
        read = condition.numel() if isinstance(condition, torch.Tensor) else 1
        if not (bool(condition.all()) if isinstance(condition, torch.Tensor) else condition):
            return step.args[1], read
        return pc + 1, read
    return pc + 1, 1


def _keep_shape(where: str, pc: int, step: Step, index: int, planned: torch.Size, made: torch.Size) -> None:
    """A static tensor holds exactly its planned bytes: a result of another shape would
    spill into its neighbours (ExecuTorch's runtime refuses such a resize)."""
    if made != planned:
        raise DevplanError(
            f"{where}: instruction {pc} ({step.name}) makes value {index} a {tuple(made)} "
            f"result where the plan holds {tuple(planned)}; the program is damaged"
        )


def _within_bound(where: str, pc: int, step: Step, index: int, made: torch.Size, bound: list[int]) -> None:
    """A dynamic tensor holds at most the bytes of its planned upper bound: more would have
    overwritten its neighbours."""
    if math.prod(made) > math.prod(bound):
        raise DevplanError(
            f"{where}: instruction {pc} ({step.name}) makes value {index} a {tuple(made)} "
            f"result, larger than its planned bound {tuple(bound)}; the program is damaged"
        )
