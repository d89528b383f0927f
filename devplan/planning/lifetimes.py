"""When each planned tensor is alive, from the instruction order alone."""
from __future__ import annotations

from devplan.method import Method, OptionalTensorList, TensorList
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
        for index in kernel.args:
            value = method.values[index]
            if isinstance(value, (TensorList, OptionalTensorList)):
                for item in value.items:
                    if item >= 0:
                        touch(item, step)
            else:
                touch(index, step)
    for index in method.inputs:
        first[index] = 0
        last.setdefault(index, 0)
    for index in method.outputs:
        first.setdefault(index, end)
        last[index] = end
    for index in method.state:
        first[index], last[index] = 0, end
    return {i: (first[i], last[i]) for i in first
            if isinstance(method.values[i], TensorSpec) and not method.values[i].constant}
