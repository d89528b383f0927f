"""An independent check that a memory plan is sound, written to be obviously right rather
than to share anything with the placement algorithms."""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping, Sequence

from devplan.errors import DevplanError
from devplan.planning.model import check_alignment
from devplan.spec import CPU, Device, TensorSpec

if TYPE_CHECKING:
    from devplan.ir.method import Method


class PlanError(DevplanError):
    """A memory plan that would let live tensors overwrite each other or leave their buffer: bad
    input for a caller verifying a plan of its own; inside a compile, where devplan made the
    plan, the compile names it an internal error of the stage (compiler.Stages)."""


@dataclass(frozen=True)
class Placed:
    """One tensor as the program will hold it: bytes [offset, offset + size) of buffer
    `group`, alive from instruction `first` through `last`. Tensors with the same non-None
    `storage` are in-place aliases of one storage and may share bytes; `within` is where the
    tensor starts inside its storage (a slice of a larger tensor), so the storage itself
    starts at `offset - within`."""

    name: str
    group: int
    offset: int
    size: int
    first: int
    last: int
    storage: int | None = None
    within: int = 0

    @property
    def end(self) -> int:
        return self.offset + self.size

    def where(self) -> str:
        return f"{self.name} [{self.offset}, {self.end})"


def verify(
    placed: Sequence[Placed],
    sizes: Mapping[int, int],
    alignment: int,
    by_buffer: Mapping[int, int] = MappingProxyType({}),
) -> None:
    """Raise PlanError naming the first problem found: a tensor outside its buffer, an offset
    that is not a multiple of its buffer's alignment (`by_buffer`, else `alignment`), or two
    tensors of different storage sharing a byte at an instruction where both are alive."""
    for a in (alignment, *by_buffer.values()):
        check_alignment(a)
    for tensor in placed:
        _check_position(tensor, sizes, by_buffer.get(tensor.group, alignment))
    by_group: dict[int, list[Placed]] = {}
    for tensor in placed:
        if tensor.size:
            by_group.setdefault(tensor.group, []).append(tensor)
    for group in sorted(by_group):
        _check_overlaps(group, by_group[group])


def _check_position(tensor: Placed, sizes: Mapping[int, int], alignment: int) -> None:
    if tensor.size < 0 or tensor.first > tensor.last:
        raise PlanError(
            f"plan check failed: {tensor.name} has size {tensor.size} and lifetime "
            f"[{tensor.first}, {tensor.last}]; sizes must be >= 0 and lifetimes non-empty"
        )
    if tensor.group not in sizes:
        raise PlanError(f"plan check failed: {tensor.name} is placed in buffer {tensor.group}, which has no size")
    if tensor.offset < 0:
        raise PlanError(
            f"plan check failed: {tensor.name} in buffer {tensor.group} starts at negative offset {tensor.offset}"
        )
    if (tensor.offset - tensor.within) % alignment:
        raise PlanError(
            f"plan check failed: {tensor.name} in buffer {tensor.group} starts at offset {tensor.offset}"
            f"{f' ({tensor.within} bytes into its storage)' if tensor.within else ''}, "
            f"which is not a multiple of the alignment {alignment}"
        )
    if tensor.end > sizes[tensor.group]:
        raise PlanError(
            f"plan check failed: {tensor.where()} in buffer {tensor.group} ends at byte {tensor.end}, "
            f"past the end of the buffer ({sizes[tensor.group]} bytes)"
        )


def _check_overlaps(group: int, tensors: list[Placed]) -> None:
    """Sweep the instructions in order, keeping the byte ranges of the live tensors; each
    tensor is checked against everything alive when it starts."""
    units = _storage_units(tensors)
    live = _LiveBytes(tensors, units)
    ending: list[tuple[int, int]] = []
    for index in sorted(range(len(tensors)), key=lambda i: (tensors[i].first, i)):
        tensor = tensors[index]
        while ending and ending[0][0] < tensor.first:
            live.remove(heapq.heappop(ending)[1])
        other = live.clash(index)
        if other is not None:
            raise PlanError(
                f"plan check failed: {other.where()} and {tensor.where()} in buffer {group} "
                f"overlap while both alive at instruction {tensor.first}"
            )
        live.add(index)
        heapq.heappush(ending, (tensor.last, index))


def _storage_units(tensors: list[Placed]) -> list[int]:
    """A number per tensor, equal for tensors of one storage; a tensor without a storage is
    a unit of its own."""
    numbers: dict[int, int] = {}
    units: list[int] = []
    for tensor in tensors:
        if tensor.storage is None:
            units.append(-1 - len(units))
        else:
            units.append(numbers.setdefault(tensor.storage, len(numbers)))
    return units


class _LiveBytes:
    """The bytes held by live tensors, pooled by storage unit: `taken` holds each unit's
    bytes as disjoint (start, end, unit) ranges. Different units' ranges never overlap (the
    first such overlap is reported), so the whole list is disjoint and ordered by start and
    by end alike: the ranges that meet [offset, end) are the ones just before where `end`
    would be inserted, and a backward scan can stop at the first that ends by `offset`."""

    def __init__(self, tensors: list[Placed], units: list[int]) -> None:
        self._tensors, self._units = tensors, units
        self._members: dict[int, list[int]] = {}
        self._pieces: dict[int, list[tuple[int, int, int]]] = {}
        self._taken: list[tuple[int, int, int]] = []

    def clash(self, index: int) -> Placed | None:
        """A live tensor of another unit sharing bytes with tensor `index` (lowest offset)."""
        tensor, unit, taken = self._tensors[index], self._units[index], self._taken
        spot = bisect_left(taken, (tensor.end,)) - 1
        while spot >= 0 and taken[spot][1] > tensor.offset:
            if taken[spot][2] != unit:
                sharing = [
                    self._tensors[i]
                    for i in self._members[taken[spot][2]]
                    if self._tensors[i].offset < tensor.end and self._tensors[i].end > tensor.offset
                ]
                return min(sharing, key=lambda t: (t.offset, t.first))
            spot -= 1
        return None

    def add(self, index: int) -> None:
        self._members.setdefault(self._units[index], []).append(index)
        self._retile(self._units[index])

    def remove(self, index: int) -> None:
        self._members[self._units[index]].remove(index)
        self._retile(self._units[index])

    def _retile(self, unit: int) -> None:
        """Replace the unit's ranges by the union of its live tensors' bytes."""
        for piece in self._pieces.pop(unit, []):
            del self._taken[bisect_left(self._taken, piece)]
        union: list[list[int]] = []
        for start, end in sorted((self._tensors[i].offset, self._tensors[i].end) for i in self._members[unit]):
            if union and start <= union[-1][1]:
                union[-1][1] = max(union[-1][1], end)
            else:
                union.append([start, end])
        self._pieces[unit] = [(start, end, unit) for start, end in union]
        for piece in self._pieces[unit]:
            insort(self._taken, piece)


def verify_devices(method: Method, home: Device) -> None:
    """Raise PlanError unless every tensor an instruction touches sits where it runs: a kernel
    on `home` (the host for a program, the device for a delegate's payload), a delegate on
    its target_device, an et_copy from the host to a device or back; and every view or
    in-place result on the device of the storage it shares. Constants are stored data, not
    planned memory, and may be read anywhere."""
    # imported here: method and ops import torch, which the CLI importing this package for
    # its options never needs
    from devplan.ir.method import OptionalTensorList, TensorList
    from devplan.ops import TO_DEVICE, TO_HOST

    values = method.values
    for index, spec in enumerate(values):
        if (
            isinstance(spec, TensorSpec)
            and spec.alias_of is not None
            and spec.device != method.tensor(spec.alias_of).device
        ):
            raise PlanError(
                f"device check failed: value {index} on {spec.device} shares the storage of "
                f"value {spec.alias_of} on {method.tensor(spec.alias_of).device}"
            )
    for step, kernel in enumerate(method.kernels):
        tensors = []
        for arg in kernel.args:
            value = values[arg]
            items = value.items if isinstance(value, (TensorList, OptionalTensorList)) else (arg,)
            tensors += [i for i in items if i >= 0 and isinstance(v := values[i], TensorSpec) and not v.constant]
        if kernel.delegate is not None:
            target = dict(method.delegates[kernel.delegate].compile_specs).get("target_device")
            wanted = {i: Device.parse(target.decode()) if target else home for i in tensors}
        elif kernel.op in (TO_DEVICE, TO_HOST):
            source, out = kernel.args[0], kernel.args[1]
            device_side = method.tensor(out if kernel.op == TO_DEVICE else source).device
            wanted = {
                source: CPU if kernel.op == TO_DEVICE else device_side,
                out: device_side if kernel.op == TO_DEVICE else CPU,
            }
            if device_side == CPU:
                raise PlanError(
                    f"device check failed: instruction {step} ({kernel.op}) copies between the host "
                    f"and the host (values {source} and {out})"
                )
        else:
            wanted = {i: home for i in tensors}
        for index, device in wanted.items():
            if method.tensor(index).device != device:
                raise PlanError(
                    f"device check failed: instruction {step} ({kernel.op}, node {kernel.node}) runs on "
                    f"{device} but value {index} is on {method.tensor(index).device}"
                )
