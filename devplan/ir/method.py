"""A method as the runtime sees it: a table of values and a chain of kernel calls.
Built from the graph by emit/, planned by planning/, written by emit/program.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from devplan.spec import CPU, Device, TensorSpec


@dataclass(frozen=True)
class IntList:  # items are value indices of Int values, as the runtime expects
    items: tuple[int, ...]


@dataclass(frozen=True)
class DoubleList:
    items: tuple[float, ...]


@dataclass(frozen=True)
class BoolList:
    items: tuple[bool, ...]


@dataclass(frozen=True)
class TensorList:
    items: tuple[int, ...]


@dataclass(frozen=True)
class OptionalTensorList:  # -1 stands for None
    items: tuple[int, ...]


@dataclass(frozen=True)
class Use:
    """A tensor as a kernel (or the caller, for an output) reads it: value `source`, on
    `device`. Only a built method holds these: the copies pass makes each one its source,
    where the source already lives there, or a copy of it made there."""

    source: int
    device: Device


Value = (
    TensorSpec
    | int
    | float
    | bool
    | str
    | None
    | IntList
    | DoubleList
    | BoolList
    | TensorList
    | OptionalTensorList
    | Use
)


def tensor_at(values: Sequence[Value], index: int) -> TensorSpec:
    """values[index], which the caller knows is a tensor (a kernel's tensor argument, a member
    of a storage, an alias's root): the one place that narrows a Value to a TensorSpec, so a
    method that breaks that knowledge fails here, naming the value, not in the caller."""
    value = values[index]
    if not isinstance(value, TensorSpec):
        raise TypeError(f"value {index} is {type(value).__name__}, not a tensor")
    return value


@dataclass(frozen=True)
class Source:
    """Where a kernel call came from in the user's model; the program keeps it in ET12's
    Chain.stacktrace (devplan/pte/frames.py) so that inspect can name tensors after layers."""

    module: str = ""  # path of the innermost nn.Module, e.g. "model.layers.3.self_attn.q_proj"; "" for the root
    kind: str = ""  # that module's class name, e.g. "Linear"
    op: str = ""  # the user's op the call was lowered from, e.g. "aten.linear.default"
    file: str = ""  # innermost frame of the export's stack_trace, as torch wrote it; "" when none
    line: int = 0
    function: str = ""
    code: str = ""  # the source line there


@dataclass(frozen=True)
class ViewOf:
    """A view op, built as its copy's kernel: the alias pass may drop the kernel and give its
    results the bytes of its input (its first argument) instead."""

    starts: (
        tuple[int, ...] | None
    )  # where each result starts in the input's bytes; None unless each is one contiguous run of them
    reshape: bool = False  # aten.view, which ExecuTorch's et_view makes at run time of an input of dynamic shape


@dataclass(frozen=True)
class Kernel:
    op: str  # runtime name, e.g. "aten::add.out"; for a delegate call, its backend
    args: tuple[int, ...]  # value indices; a delegate call's are its inputs, then its outputs
    node: str  # graph node it came from, for messages and dumps
    delegate: int | None = None  # index into Method.delegates when this calls a delegate
    source: Source | None = None
    view: ViewOf | None = None  # set by build on a view op's kernel; the alias pass reads and clears it
    # the export's node the call was lowered from (decompose's devplan_origin): what an ETRecord's
    # debug handles name (devplan/etrecord.py); "" for calls no node of the export made
    origin: str = ""


@dataclass(frozen=True)
class Delegate:
    backend: str  # backend id the runtime looks up
    payload: bytes  # what the backend runs (devplan's: an ET12 program)
    compile_specs: tuple[tuple[str, bytes], ...]  # e.g. ("target_device", b"cuda:0")
    device: Device = CPU  # where the payload's own buffer lives
    arena: int = 0  # bytes that buffer takes (the payload's plan)
    arena_bound: int = 0  # the least bytes any plan of the payload could take
    window: tuple[int, int] | None = None  # (mem_id, offset): where planning put that buffer
    # inside the method's buffer on `device`
    named_data: tuple[tuple[str, bytes, int], ...] = ()  # (key, bytes, alignment) an ExecuTorch backend
    # reads beside its payload (XNNPACK's weights)
    handles: tuple[tuple[int, str, str, str], ...] = ()  # ForeignCall.handles: kept in the call's frames


@dataclass(frozen=True)
class Method:
    name: str
    values: tuple[Value, ...]
    kernels: tuple[Kernel, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    constants: dict[int, torch.Tensor]  # value index -> stored data (weights, folded results)
    state: dict[int, torch.Tensor]  # value index -> initial data of updated buffers
    in_spec: str
    out_spec: str
    delegates: tuple[Delegate, ...] = ()
    mutated: tuple[int, ...] = ()  # user inputs the run ends by overwriting (returned first, as in ExecuTorch)

    def operands(self, kernel: Kernel) -> list[int]:
        """Value indices a kernel reads or writes: its arguments, a tensor list by its items."""
        found = []
        for index in kernel.args:
            value = self.values[index]
            found += (
                [i for i in value.items if i >= 0] if isinstance(value, (TensorList, OptionalTensorList)) else [index]
            )
        return found

    def renumbered(self, values: tuple[Value, ...], new: dict[int, int]) -> "Method":
        """This method over `values`, every reference to old value i now to new[i] (an absent
        optional tensor, -1, stays -1)."""
        new = {**new, -1: -1}

        def moved(value: Value) -> Value:
            if isinstance(value, TensorSpec) and value.alias_of is not None:
                return replace(value, alias_of=new[value.alias_of])
            if isinstance(value, (IntList, TensorList, OptionalTensorList)):
                return type(value)(tuple(new[i] for i in value.items))
            return value

        return replace(
            self,
            values=tuple(moved(v) for v in values),
            kernels=tuple(replace(k, args=tuple(new[a] for a in k.args)) for k in self.kernels),
            inputs=tuple(new[i] for i in self.inputs),
            outputs=tuple(new[i] for i in self.outputs),
            constants={new[i]: t for i, t in self.constants.items() if i in new},
            state={new[i]: t for i, t in self.state.items()},
            mutated=tuple(new[i] for i in self.mutated),
        )

    def tensor(self, index: int) -> TensorSpec:
        """values[index] as the tensor the caller knows it is (tensor_at)."""
        return tensor_at(self.values, index)

    def with_specs(self, specs: dict[int, TensorSpec]) -> "Method":
        values = tuple(specs.get(i, v) for i, v in enumerate(self.values))
        return replace(self, values=values)
