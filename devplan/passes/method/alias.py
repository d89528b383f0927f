"""Views without copies: a view op's kernel is dropped and its results take their input's
bytes when each is one contiguous run of them (a reshape, a leading-dim slice or split, an
expand to the same shape). Of an input of dynamic shape only aten.view can: ExecuTorch's
et_view makes it at run time. The rest stay copies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from devplan.ir.method import Method, TensorList, Value, tensor_at
from devplan.ops import ET_VIEW
from devplan.spec import TensorSpec


def alias_views(method: Method) -> Method:
    values = list(method.values)
    # state and mutated inputs are overwritten at the end of the run, while a view of the old value may still be read
    overwritten = set(method.state) | set(method.mutated)
    kernels = []
    for kernel in method.kernels:
        view = kernel.view
        storage = _storage(values, kernel.args[0], overwritten) if view else None
        if view is None or storage is None:
            kernels.append(replace(kernel, view=None) if view else kernel)
            continue
        dynamic = tensor_at(values, storage[0]).dynamic
        if dynamic and view.reshape:
            out = kernel.args[-1]
            values[out] = replace(tensor_at(values, out), alias_of=storage[0], alias_offset=storage[1])
            # et_view takes (self, size, out): the copy's trailing returned value goes
            kernels.append(replace(kernel, op=ET_VIEW, args=kernel.args[:-1], view=None))
        elif not dynamic and view.starts is not None:
            result = values[kernel.args[-1]]
            pieces = result.items if isinstance(result, TensorList) else (kernel.args[-1],)
            for piece, at in zip(pieces, view.starts):
                values[piece] = replace(tensor_at(values, piece), alias_of=storage[0], alias_offset=storage[1] + at)
        else:
            kernels.append(replace(kernel, view=None))
    return replace(method, values=tuple(values), kernels=tuple(kernels))


def _storage(values: Sequence[Value], index: int, overwritten: set[int]) -> tuple[int, int] | None:
    """(storage root, byte offset in it) of a planned tensor a view may share; None for
    constants, numbers and what is overwritten."""
    spec = values[index]
    if not isinstance(spec, TensorSpec) or spec.constant:
        return None
    root = spec.alias_of if spec.alias_of is not None else index
    return None if root in overwritten else (root, spec.alias_offset)
