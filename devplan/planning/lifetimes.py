"""When each planned tensor is alive, from the instruction order alone."""

from __future__ import annotations

from typing import Mapping

from devplan.ir.method import Method
from devplan.spec import TensorSpec


def lifetimes(method: Method) -> dict[int, tuple[int, int]]:
    """value index -> (first, last) instruction that touches the tensor, inclusive. Inputs
    are alive from the start, outputs to the end, and updated state for the whole run
    (it must survive between runs, so nothing else may ever use its bytes)."""
    end = max(len(method.kernels) - 1, 0)
    first: dict[int, int] = {}
    last: dict[int, int] = {}

    def touch(index: int, step: int) -> None:
        first.setdefault(index, step)
        last[index] = step

    for step, kernel in enumerate(method.kernels):
        for index in method.operands(kernel):
            touch(index, step)
    for index in method.inputs:
        first[index] = 0
        last.setdefault(index, 0)
    for index in method.outputs:
        first.setdefault(index, end)
        last[index] = end
    for index in method.state:
        first[index], last[index] = 0, end
    # A storage no instruction touches itself (a cat's result read only through views of it)
    # lives while the tensors sharing its bytes do.
    for index in list(first):
        root = getattr(method.values[index], "alias_of", None)
        if root is not None and root not in last:
            views = [i for i in first if getattr(method.values[i], "alias_of", None) == root]
            first[root], last[root] = min(first[i] for i in views), max(last[i] for i in views)
    return {
        i: (first[i], last[i]) for i in first if isinstance(spec := method.values[i], TensorSpec) and not spec.constant
    }


def storages(method: Method, alive: Mapping[int, tuple[int, int]]) -> tuple[dict[int, int], dict[int, tuple[int, int]]]:
    """(value -> its storage root, root -> span): a tensor and everything that shares its
    bytes (views, in-place results) are one storage, alive from its first to its last user."""

    def root_of(i: int) -> int:
        alias = method.tensor(i).alias_of
        return i if alias is None else alias

    root = {i: root_of(i) for i in alive}
    span: dict[int, tuple[int, int]] = {}
    for i, r in root.items():
        first, last = alive[i]
        span[r] = (min(first, span[r][0]), max(last, span[r][1])) if r in span else (first, last)
    return root, span
