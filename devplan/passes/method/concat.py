"""Concatenation without the copy: each piece of a `cat` is computed straight into its place
in the result, and the cat kernel goes away (pytorch/executorch#3210).

Along a dim with only unit dims before it, piece i of the result is one contiguous run of
bytes, so the piece's whole storage can live there: it is written before the cat would have
run, and nothing writes the result's bytes afterwards but an in-place op over a storage that
is dead by then, so every reader of the piece or the result sees the same bytes."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from devplan.ir.method import Kernel, Method, TensorList
from devplan.planning.lifetimes import lifetimes, storages


def write_cats_in_place(method: Method) -> Method:
    values: list[Any] = list(method.values)  # the cat's pieces and result among them are TensorSpecs
    root, _ = storages(method, lifetimes(method))
    fixed = {*method.state, *method.constants, *method.mutated}  # their bytes are their own to the end
    kernels = []
    for kernel in method.kernels:
        starts = _places(values, kernel, root, fixed) if kernel.op == "aten::cat.out" else None
        if starts is None:
            kernels.append(kernel)
            continue
        result = kernel.args[-1]
        for storage, start in starts.items():
            for i, r in root.items():
                if r == storage:
                    values[i] = replace(values[i], alias_of=result, alias_offset=start + values[i].alias_offset)
                    root[i] = result
        fixed.update(starts)  # a storage placed once stays where it is
    return replace(method, values=tuple(values), kernels=tuple(kernels))


def _places(values: list[Any], kernel: Kernel, root: dict[int, int], fixed: set[int]) -> dict[int, int] | None:
    """piece storage -> byte offset in the cat's result, when every piece can move there."""
    pieces, dim, result = values[kernel.args[0]], values[kernel.args[1]], kernel.args[-1]
    out = values[result]
    if not isinstance(pieces, TensorList) or out.alias_of is not None or result in fixed or out.dynamic:
        return None  # a dynamic cat's pieces start where their run-time sizes say, not at fixed offsets
    dim %= len(out.shape)
    if math.prod(out.shape[:dim]) != 1:
        return None
    starts: dict[int, int] = {}
    at = 0
    for index in pieces.items:
        spec, storage = values[index], root.get(index)
        if (
            storage is None
            or storage in fixed
            or storage in starts
            or spec.alias_offset
            or spec.dynamic
            or values[storage].nbytes != spec.nbytes
            or (spec.dtype, spec.device) != (out.dtype, out.device)
            or len(spec.shape) != len(out.shape)
        ):
            return None
        starts[storage] = at
        at += spec.nbytes
    return starts if at == out.nbytes else None
