"""The kinds of a method's values and instructions: the format's codes (its KernelTypes and
InstructionArguments unions) grouped as the decoder reads them, and named as documents and
messages say them, so that no reader past devplan/pte/ needs the bindings' codes."""

from __future__ import annotations

from devplan.pte.fb.EValue import EValueT
from devplan.pte.fb.InstructionArguments import InstructionArguments
from devplan.pte.fb.KernelTypes import KernelTypes
from devplan.pte.fb.Tensor import TensorT

# Each value kind's name, by its KernelTypes code: what the inspection document counts.
VALUE_KINDS = {
    KernelTypes.NONE: "none",
    KernelTypes.Null: "null",
    KernelTypes.Int: "int",
    KernelTypes.Bool: "bool",
    KernelTypes.Double: "double",
    KernelTypes.Tensor: "tensor",
    KernelTypes.String: "string",
    KernelTypes.IntList: "int_list",
    KernelTypes.DoubleList: "double_list",
    KernelTypes.BoolList: "bool_list",
    KernelTypes.TensorList: "tensor_list",
    KernelTypes.OptionalTensorList: "optional_tensor_list",
}
INSTRUCTION_KINDS = {
    InstructionArguments.KernelCall: "kernel",
    InstructionArguments.DelegateCall: "delegate",
    InstructionArguments.MoveCall: "move",
    InstructionArguments.JumpFalseCall: "jump_false",
    InstructionArguments.FreeCall: "free",
}
# ExecuTorch's copies from the host to a device and back, the operators a kernel instruction
# calls to move a tensor between buffers of different devices (devplan.ops names them for the compiler)
COPIES = ("et_copy::_h2d_copy.out", "et_copy::_d2h_copy.out")
TENSOR_LISTS = (KernelTypes.TensorList, KernelTypes.OptionalTensorList)
REFERENCE_LISTS = (*TENSOR_LISTS, KernelTypes.IntList)  # lists whose items are value indices
LISTS = (*REFERENCE_LISTS, KernelTypes.BoolList, KernelTypes.DoubleList)


def value_kind(code: int) -> str:
    """A value's kind by name ("tensor", "int_list", ...), "kind(N)" for a code the format lacks."""
    return VALUE_KINDS.get(code, f"kind({code})")


def tensor_of(value: EValueT) -> TensorT | None:
    """A value's tensor table, None for a value of any other kind: the one place that narrows
    the bindings' union (NullT | IntT | ... | TensorT), which the valType code tags."""
    return value.val if isinstance(value.val, TensorT) else None
