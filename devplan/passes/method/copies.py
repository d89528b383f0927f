"""Copies between devices, as ExecuTorch's et_copy ops make them: each Use in a built method
becomes its source, where the source lives on the reading device, or a copy made there once,
by a copy instruction just ahead of its first reader (a copy the caller reads goes last)."""

from __future__ import annotations

from dataclasses import replace

from devplan.ir.method import Kernel, Method, OptionalTensorList, TensorList, Use, Value, tensor_at
from devplan.ops import TO_DEVICE, TO_HOST
from devplan.spec import CPU, Device, TensorSpec


def insert_copies(method: Method) -> Method:
    values: list[Value] = []
    new: dict[int, int] = {}  # old value index -> new
    made: dict[tuple[int, Device], int] = {}  # (new source index, device) -> its copy there
    making: dict[int, list[Kernel]] = {}  # old Use index -> the copies that make it, in order

    def copy(source: int, device: Device, use: int) -> int:
        if (source, device) not in made:
            spec = tensor_at(values, source)
            values.append(TensorSpec(spec.shape, spec.dtype, spec.dim_order, device, dynamic=spec.dynamic))
            made[source, device] = len(values) - 1
            op = TO_HOST if device == CPU else TO_DEVICE
            making[use].append(Kernel(op, (source, len(values) - 1, len(values) - 1), f"copy to {device}"))
        return made[source, device]

    for old, value in enumerate(method.values):
        if not isinstance(value, Use):
            values.append(value)
            new[old] = len(values) - 1
            continue
        source, making[old] = new[value.source], []
        have = tensor_at(values, source).device
        if have == value.device:
            new[old] = source
        elif CPU in (have, value.device):
            new[old] = copy(source, value.device, old)
        else:  # between devices through the host, as ExecuTorch's runtime has no peer copy
            new[old] = copy(copy(source, CPU, old), value.device, old)
    done = method.renumbered(tuple(values), new)
    return replace(done, kernels=_placed(method, done.kernels, making))


def _placed(method: Method, renumbered: tuple[Kernel, ...], making: dict[int, list[Kernel]]) -> tuple[Kernel, ...]:
    """The method's kernels as `renumbered`, with the copies (numbered anew too) each ahead
    of the first kernel reading it, named after that kernel's source; those only the caller
    reads at the end."""
    kernels = []
    for kernel, moved in zip(method.kernels, renumbered):
        for use in sorted(u for u in _read(method, kernel) if u in making):
            kernels += [replace(k, source=kernel.source) for k in making.pop(use)]
        kernels.append(moved)
    for use in sorted({u for u in method.outputs if u in making}):
        kernels += making.pop(use)
    return tuple(kernels)


def _read(method: Method, kernel: Kernel) -> set[int]:
    found = set(kernel.args)
    for index in kernel.args:
        value = method.values[index]
        if isinstance(value, (TensorList, OptionalTensorList)):
            found.update(value.items)
    return found
