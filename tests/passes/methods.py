"""Methods built by hand for pass tests: a pass is a function from Method to Method, so its
cases need no model, no export and no lowering."""

from __future__ import annotations

from devplan.ir.method import Kernel, Method
from devplan.spec import CPU, TensorSpec


def tensor(device=CPU, shape=(2, 4), **facts) -> TensorSpec:
    return TensorSpec(shape, "float32", tuple(range(len(shape))), device, **facts)


def method(values, kernels, inputs=(0,), outputs=(), state=None, mutated=()) -> Method:
    return Method("forward", tuple(values), tuple(kernels), inputs, outputs, {}, state or {}, "", "", (), mutated)


def call(op, *args, **facts) -> Kernel:
    """A kernel call named after its op (args: the schema's, then the returned value)."""
    return Kernel(op, args, op, **facts)
