"""In-place reuse: an elementwise op writes its result over an input of the same shape and
dtype whose storage nobody reads afterwards, so the result needs no bytes of its own. A method
input can be that storage too.

Runs on the built Method, where lifetimes are known. The portable kernels compute element i
of the result from element i of such an input alone, so writing over it is safe; the
runtime tests prove it for every op in devplan.ops.ELEMENTWISE."""
from __future__ import annotations

from dataclasses import replace

from devplan.method import Method, TensorList
from devplan.ops import ELEMENTWISE
from devplan.planning.lifetimes import lifetimes, storages
from devplan.spec import TensorSpec


def reuse_dead_inputs(method: Method) -> Method:
    alive = lifetimes(method)
    root, span = storages(method, alive)
    # Results and state must keep their bytes to the end. Inputs need not: set_input copies
    # the caller's data into the planned input, and that memory is free after its last
    # read, the same contract ExecuTorch's own planner gives graph inputs.
    pinned = {root[i] for i in (*method.outputs, *method.state) if i in root}
    values = list(method.values)
    for step, kernel in enumerate(method.kernels):
        if kernel.op.split(".")[0] not in ELEMENTWISE:
            continue
        returned = values[kernel.args[-1]]
        outs = returned.items if isinstance(returned, TensorList) else (kernel.args[-1],)
        out, result = outs[0], values[outs[0]]
        if result.alias_of is not None:
            continue
        inputs = [a for a in kernel.args[:-1] if a not in outs]
        taken = next((a for a in inputs if _can_take(values, a, result, root, span, pinned, step)), None)
        if taken is None:
            continue
        donor, at = root[taken], values[taken].alias_offset
        for i, r in root.items():  # the result, and views already made of it, join the donor's storage
            if r == out:
                values[i] = replace(values[i], alias_of=donor, alias_offset=at + values[i].alias_offset)
                root[i] = donor
        span[donor] = (span[donor][0], max(span[donor][1], span.pop(out)[1]))
        if out in pinned:
            pinned.add(donor)
    return replace(method, values=tuple(values))


def _can_take(values, a: int, result: TensorSpec, root, span, pinned, step: int) -> bool:
    spec = values[a]
    return (isinstance(spec, TensorSpec) and a in root and not spec.constant
            and (spec.shape, spec.dtype, spec.device) == (result.shape, result.dtype, result.device)
            and root[a] not in pinned and span[root[a]][1] == step)
