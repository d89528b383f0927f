"""The fewest bytes any instruction order of a method could plan, for plan_vs_executorch.py.

devplan's lower bound is tied to the order of the instructions. This floor is not: it holds
the storages fixed (after devplan's views and in-place rewrites) and asks only what every
order must hold at once, so it bounds what devplan's scheduler (passes/method/schedule.py) could
still win, and how far any sound plan of the graph is from ExecuTorch's.

Three facts hold in every order:
- while a kernel runs, all storages it reads or writes are alive;
- at the first kernel, every method input and state storage is alive as well (set_input has
  filled them all, and nothing is freed before its last read);
- at the last kernel, every output and state storage is alive as well."""

from __future__ import annotations

from devplan.ir.method import Method
from devplan.planning.lifetimes import lifetimes, storages


def order_free_floor(method: Method, alignment: int = 16) -> int:
    """Aligned bytes that every instruction order of `method` must hold at once somewhere."""
    root, _ = storages(method, lifetimes(method))
    size: dict[int, int] = {}
    for index, storage in root.items():
        spec = method.values[index]
        size[storage] = max(size.get(storage, 0), spec.alias_offset + spec.nbytes)

    def total(held: set[int]) -> int:
        return sum(-(-size[storage] // alignment) * alignment for storage in held)

    def touched(kernel) -> set[int]:
        return {root[i] for i in method.operands(kernel) if i in root}

    state = {root[i] for i in method.state if i in root}
    inputs = {root[i] for i in method.inputs if i in root} | state
    outputs = {root[i] for i in method.outputs if i in root} | state
    kernels = [touched(kernel) for kernel in method.kernels]
    if not kernels:
        return total(inputs | outputs)
    # Which kernel runs first or last depends on the order, so take the cheapest of each.
    return max(
        max(map(total, kernels)),
        min(total(inputs | held) for held in kernels),
        min(total(outputs | held) for held in kernels),
    )
