"""The reference runtime's kernel table: which Python callable runs an operator a program
names. torch's own ops run as the schema says (the out variant, given its out tensors);
ExecuTorch's dim_order ops, et_view and number ops have small kernels here; ExecuTorch's
quantized out variants run torch's functional quantized ops, so this runtime stays an
independent check of ExecuTorch's kernels."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from devplan.dtypes import CODE_TO_NAME
from devplan.ops import (
    NUMBER_OPS,
    QUANTIZED,
    QUANTIZED_EMBEDDINGS,
    REGISTERED,
    TORCH_NAMESPACES,
    out_schema,
    schema_name,
    torch_op,
)
from devplan.pte.fb.KernelTypes import KernelTypes
from devplan.runtime.device_kernels import IN_PLACE, OnDevice


def resize_within(out: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    """`out` resized to `size`, a shape the program gives, only within the bytes of the storage it
    views: torch would otherwise grow the arena to whatever the file asks."""
    room = out.untyped_storage().nbytes() - out.storage_offset() * out.element_size()
    if any(n < 0 for n in size) or math.prod(size) * out.element_size() > room:
        raise ValueError(f"size {list(size)} does not fit the {room} bytes its out tensor's buffer holds")
    return out.resize_(size)


def et_view(source: torch.Tensor, size: list[int], out: torch.Tensor) -> None:
    """`out` becomes `source`'s bytes under the shape `size` gives now, as ExecuTorch's et_view
    points its result at its source's data."""
    view = source.view(size)
    out.set_(view.untyped_storage(), view.storage_offset(), view.shape, view.stride())


def _dim_order_copy(
    self: torch.Tensor,
    non_blocking: bool,
    dim_order: Sequence[int] | None,
    out: torch.Tensor,
    *,
    cast: bool = True,
) -> torch.Tensor:
    # ExecuTorch's dim order copies refuse (InvalidArgument) a non-blocking copy, and a clone
    # to another dtype
    if non_blocking:
        raise ValueError("non_blocking is true; ExecuTorch's dim order copy kernels copy blocking only")
    if not cast and self.dtype != out.dtype:
        raise ValueError(f"it clones {self.dtype} into {out.dtype}; ExecuTorch's clone keeps the dtype")
    return resize_within(out, self.shape).copy_(self)


# Operators outside torch's aten namespace that ExecuTorch programs use; each takes its out
# tensor last.
DIM_ORDER = {
    "dim_order_ops::_to_dim_order_copy.out": _dim_order_copy,
    "dim_order_ops::_clone_dim_order.out": functools.partial(_dim_order_copy, cast=False),
    "dim_order_ops::_empty_dim_order.out": lambda size, dim_order, out: resize_within(out, size),
}
# their arguments' names and the value types ExecuTorch's kernels read them as (torch has no
# schema for them), asserting on any other
_TENSOR, _NULL = (KernelTypes.Tensor,), (KernelTypes.Null,)
_COPY_ARGS = (
    ("self", _TENSOR),
    ("non_blocking", (KernelTypes.Bool,)),
    ("dim_order", (KernelTypes.IntList, *_NULL)),
    ("out", _TENSOR),
)
DIM_ORDER_ARGS = {
    "dim_order_ops::_to_dim_order_copy.out": _COPY_ARGS,
    "dim_order_ops::_clone_dim_order.out": _COPY_ARGS,
    "dim_order_ops::_empty_dim_order.out": (
        ("size", (KernelTypes.IntList,)),
        ("dim_order", (KernelTypes.IntList, *_NULL)),
        ("out", _TENSOR),
    ),
}
# Number ops (sym_size, add of ints...): a function of the arguments, its result a value.
NUMBERS = {name: fn for fn, name in NUMBER_OPS.items()}
_QUANTIZED_BY_OUT = {schema_name(schema): functional for functional, schema in QUANTIZED.items()}


def schema_op(name: str) -> Any:  # a torch op, or a _Checked or _Functional standing for one
    """The callable with a schema (`_schema`) that runs operator `name`, or None: torch's op of
    that name, or for an ExecuTorch quantized out variant, its functional op writing the outs."""
    functional = _QUANTIZED_BY_OUT.get(name)
    if functional is not None:
        import torch.ao.quantization.fx._decomposed  # noqa: F401 - defines the functional quantized_decomposed ops

        return _Functional(QUANTIZED[functional], torch_op(functional))
    op = torch_op(name)
    if name in _PRECONDITIONS and op is not None:
        return _Checked(op._schema, op, _PRECONDITIONS[name])
    if op is not None and (dtypes := _dtype_arguments(op._schema)):
        return _Checked(op._schema, op, functools.partial(_known_dtypes, dtypes))
    if name in IN_PLACE and op is not None:  # on a GPU, torch's generated out kernel would allocate
        return OnDevice(op._schema, op, IN_PLACE[name])
    if op is not None and (op.namespace not in TORCH_NAMESPACES or name in QUANTIZED_EMBEDDINGS):
        # a kernel library's out variant (ExecuTorch's llama::custom_sdpa.out): torch's wrapper
        # of it leaves a dynamic out unsized, or torch has no kernel for it at all (ExecuTorch's
        # quantized embeddings), so its functional twin runs and fills the out
        packet = op.overloadpacket
        for overload in packet.overloads():
            twin = getattr(packet, overload)
            if twin is not op and (found := out_schema(twin)) is not None and schema_name(found) == name:
                return _Functional(op._schema, twin)
    return op


def _linear_bias(
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *, out: torch.Tensor
) -> None:
    if bias is not None and (bias.dtype != out.dtype or bias.dim() != 1 or bias.shape[0] not in (weight.shape[0], 1)):
        raise ValueError(
            f"bias is {bias.dtype}{list(bias.shape)}; ExecuTorch's linear kernel takes a 1-D bias of "
            f"{weight.shape[0]} or 1 elements of the output's dtype ({out.dtype})"
        )


def _dtype_arguments(schema: torch._C.FunctionSchema) -> list[tuple[int, str]]:
    """(position, name) of each ScalarType argument (an optional one too)."""
    return [(i, a.name) for i, a in enumerate(schema.arguments) if "ScalarType" in str(a.real_type)]


def _known_dtypes(dtypes: list[tuple[int, str]], *args: Any, **kwargs: Any) -> None:
    """torch's kernels read a dtype code it does not define past the end of their tables and
    crash the process (sum.IntList_out's dtype of -19, dequantize's out_dtype), so a number no
    ScalarType has is refused first. A check at each call, as a value an earlier instruction
    writes may be read as a dtype. `dtypes`: the op's _dtype_arguments."""
    for position, name in dtypes:
        value = args[position] if position < len(args) else kwargs.get(name)
        if isinstance(value, int) and value not in CODE_TO_NAME:
            raise ValueError(f"{name} is {value}, no ScalarType code")


# what ExecuTorch's kernels refuse (InvalidArgument) where torch's ops run: a linear's bias,
# which torch broadcasts from any shape
_PRECONDITIONS = {"aten::linear.out": _linear_bias}


@dataclass(frozen=True)
class _Checked:
    """torch's op, run once ExecuTorch's kernel would take its arguments."""

    _schema: torch._C.FunctionSchema
    op: Any
    check: Any

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.check(*args, **kwargs)
        return self.op(*args, **kwargs)


def writes_its_outs(op: Any, name: str) -> bool:
    """Whether a schema op's result lands in its arguments: an out variant, or one of the few
    in-place kernels ExecuTorch has. A functional op's result would be dropped."""
    return any(a.is_out for a in op._schema.arguments) or (
        op._schema.is_mutable and name.partition(".")[0] in REGISTERED
    )


@dataclass(frozen=True)
class _Functional:
    """An out variant that torch does not define (ExecuTorch's quantized kernels): its
    functional op runs, and the results go into the out tensors."""

    _schema: torch._C.FunctionSchema
    functional: Any
    dtypes: list[tuple[int, str]] = field(init=False)  # its _dtype_arguments, found once

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtypes", _dtype_arguments(self._schema))

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor | tuple[torch.Tensor, ...]:
        outs: list[torch.Tensor] = [kwargs.pop(a.name) for a in self._schema.arguments if a.is_out]
        given = {**{a.name: value for a, value in zip(self._schema.arguments, args)}, **kwargs}
        _known_dtypes(self.dtypes, *args, **kwargs)
        if given.get("quant_min", 0) > given.get("quant_max", 0):  # ExecuTorch's kernels abort on it
            raise ValueError(f"quant_min {given['quant_min']} is greater than quant_max {given['quant_max']}")
        results = self.functional(*args, **kwargs)
        for out, result in zip(outs, results if isinstance(results, tuple) else (results,)):
            out.resize_(result.shape).copy_(result)
        return outs[0] if len(outs) == 1 else tuple(outs)
