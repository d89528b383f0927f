"""In-place reuse: an elementwise op writes its result over an input of the same shape and
dtype whose storage nobody reads afterwards, so the result needs no bytes of its own. A method
input can be that storage too.

Runs on the built Method, where lifetimes are known. The portable kernels compute element i
of the result from element i of such an input alone, so writing over it is safe, as long as
no other argument reads those bytes from elsewhere: a cat piece sitting inside the result it
is added to, broadcast or at another offset, would be overwritten before it is read. The
runtime tests prove it for every op in devplan.ops.ELEMENTWISE."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from devplan.ir.method import Kernel, Method, TensorList, Value, tensor_at
from devplan.ops import ELEMENTWISE
from devplan.planning.lifetimes import lifetimes, storages
from devplan.spec import TensorSpec


def reuse_dead_inputs(method: Method, *, borrowed_io: bool = False) -> Method:
    """`borrowed_io` (a delegate payload, whose inputs and outputs are its caller's tensors):
    those are never written over nor written in place of something else, so that they stay
    storages of their own, which take no bytes of the payload's at all."""
    alive = lifetimes(method)
    root, span = storages(method, alive)
    # Results and state must keep their bytes to the end. Inputs need not: set_input copies
    # the caller's data into the planned input, and that memory is free after its last
    # read, the same contract ExecuTorch's own planner gives graph inputs.
    pinned = {root[i] for i in (*method.outputs, *method.state) if i in root}
    if borrowed_io:
        pinned |= {root[i] for i in method.inputs if i in root}
    values = list(method.values)
    for step, kernel in enumerate(method.kernels):
        out, donors = overwritable(values, kernel, root)
        if borrowed_io and out in method.outputs:
            continue
        taken = next((a for a in donors if root[a] not in pinned and span[root[a]][1] == step), None)
        if taken is None or out is None:  # no donor without a result
            continue
        donor, at = root[taken], tensor_at(values, taken).alias_offset
        for i, r in root.items():  # the result, and views already made of it, join the donor's storage
            if r == out:
                values[i] = replace(
                    tensor_at(values, i), alias_of=donor, alias_offset=at + tensor_at(values, i).alias_offset
                )
                root[i] = donor
        span[donor] = (span[donor][0], max(span[donor][1], span.pop(out)[1]))
        if out in pinned:
            pinned.add(donor)
    return replace(method, values=tuple(values))


def overwritable(values: Sequence[Value], kernel: Kernel, root: dict[int, int]) -> tuple[int | None, list[int]]:
    """(result, inputs it may be written over) as far as the kernel itself goes: an elementwise
    kernel's fresh result, and its planned inputs (constants have no root) of the same shape,
    dtype and device that no other argument reads at another place in the same storage.
    Whether an input is dead there is the caller's to decide."""
    if kernel.delegate is not None or kernel.op.split(".")[0] not in ELEMENTWISE:
        return None, []
    returned = values[kernel.args[-1]]
    outs = returned.items if isinstance(returned, TensorList) else (kernel.args[-1],)
    out, result = outs[0], values[outs[0]]
    if not isinstance(result, TensorSpec) or result.alias_of is not None:
        return None, []
    reads = [a for a in kernel.args[:-1] if a not in outs and a in root and isinstance(values[a], TensorSpec)]

    def same_place(a: int, b: int) -> bool:
        a_spec, b_spec = tensor_at(values, a), tensor_at(values, b)
        return (a_spec.alias_offset, a_spec.shape) == (b_spec.alias_offset, b_spec.shape)

    return out, [
        a
        for a in reads
        if (tensor_at(values, a).shape, tensor_at(values, a).dtype, tensor_at(values, a).device)
        == (result.shape, result.dtype, result.device)
        and all(same_place(a, b) for b in reads if root[b] == root[a])
    ]
