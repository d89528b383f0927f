"""The value table as written: values nothing refers to dropped (the arguments of the views
that became aliases, Uses read as their source), equal numbers shared, the rest numbered in
the order they were made."""

from __future__ import annotations

from devplan.ir.method import IntList, Method, OptionalTensorList, TensorList, Use, Value
from devplan.ops import NUMBER_OPS
from devplan.spec import TensorSpec

_NUMBER_KERNELS = frozenset(NUMBER_OPS.values())


def compact(method: Method) -> Method:
    used = set(method.inputs) | set(method.outputs) | set(method.state)
    for kernel in method.kernels:
        for index in kernel.args:
            used.add(index)
            value = method.values[index]
            if isinstance(value, (IntList, TensorList, OptionalTensorList)):
                used.update(i for i in value.items if i >= 0)
    used.update(
        v.alias_of
        for i, v in enumerate(method.values)
        if i in used and isinstance(v, TensorSpec) and v.alias_of is not None
    )
    # numbers the runtime writes (inputs, results of size ops) are slots of their own, never shared
    slots = set(method.inputs) | {k.args[-1] for k in method.kernels if k.op in _NUMBER_KERNELS}
    new: dict[int, int] = {}
    first: dict[tuple[type, str], int] = {}  # a number's (type, repr) -> its kept slot
    kept: list[Value] = []
    for old in sorted(used):
        value = method.values[old]
        assert not isinstance(value, Use), f"value {old} is a Use the copies pass left"
        if isinstance(value, (bool, int, float, str, type(None))) and old not in slots:
            # repr keeps -0.0 apart from 0.0 and lets nan match itself
            key = (type(value), repr(value))
            if key in first:
                new[old] = first[key]
                continue
            first[key] = len(kept)
        new[old] = len(kept)
        kept.append(value)
    return method.renumbered(tuple(kept), new)
