"""A loaded method's instructions as the interpreter's steps: each kernel call with its
callable looked up (kernels.py) and its arguments checked against the kernel's schema, each
jump, move, delegate call and et_copy device copy checked as ExecuTorch's runtime checks it,
so that a damaged program is refused in one line naming the instruction when it loads,
never run into a wrong answer or an abort."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch.utils import _pytree as pytree

from devplan.errors import DevplanError
from devplan.ops import DEVICE_SHAPED, ET_VIEW, TO_DEVICE, TO_HOST, unregistered
from devplan.pte.decode import Instruction, MethodView
from devplan.pte.fb.KernelTypes import KernelTypes
from devplan.runtime.allocator import allocator_for
from devplan.runtime.checks import value_index
from devplan.runtime.interpreter import Refs, Step, value_of
from devplan.runtime.kernels import DIM_ORDER, DIM_ORDER_ARGS, NUMBERS, et_view, schema_op, writes_its_outs
from devplan.spec import CPU, Device

_KIND_NAMES = {code: name for name, code in vars(KernelTypes).items() if not name.startswith("_")}
# the value types ExecuTorch's kernels read an argument of these schema types as, asserting
# (aborting the process) on any other: toDouble, toIntList, toInt, toBool, toTensor
_KIND_OF_TYPE = {
    name: kinds + extra
    for plain, kinds in (
        ("float", (KernelTypes.Double,)),
        ("List[int]", (KernelTypes.IntList,)),
        ("int", (KernelTypes.Int,)),
        ("bool", (KernelTypes.Bool,)),
        ("Tensor", (KernelTypes.Tensor,)),
    )
    for name, extra in ((plain, ()), (f"Optional[{plain}]", (KernelTypes.Null,)))
}


def build_steps(
    view: MethodView,
    values: list[Any],
    dtypes: dict[int, torch.dtype],
    bounds: dict[int, list[int]],
    devices: dict[int, Device],
    delegates: Sequence[Any],
) -> list[Step]:
    """The method's instructions as steps over its bound `values` (a tensor's dtype, the
    planned bound of a dynamic one, the device of a planned one), `delegates` the loaded
    methods of its delegates' payloads, by delegate index."""
    steps = _Steps(view, values, dtypes, bounds, devices, delegates)
    lengths = Counter(row.chain for row in view.instructions)
    return [steps.step(row, lengths[row.chain]) for row in view.instructions]


@dataclass
class _Steps:
    """What making a method's steps reads: its view and its bound values."""

    view: MethodView
    values: list[Any]
    dtypes: dict[int, torch.dtype]
    bounds: dict[int, list[int]]
    devices: dict[int, Device]
    delegates: Sequence[Any]

    @property
    def where(self) -> str:
        return self.view.where

    def step(self, row: Instruction, chain_length: int) -> Step:
        index = row.index
        args = [value_index(self.view, a, f"instruction {index}") for a in row.args]
        # decode.py sets a kernel's op, a delegate call's delegate and a jump's destination
        if row.kind == "kernel" and row.op is not None:
            return self._kernel(index, self.view.operator(row.op), args, self.view.kinds)
        if row.kind == "delegate" and row.delegate is not None:
            return self._delegate(index, row.delegate, args)
        if row.kind == "move":
            source, target = args
            if not _same_kind(self.values[source], self.values[target]):
                raise DevplanError(
                    f"{self.where}: instruction {index} moves value {source} into value {target} of "
                    f"another type or shape; the program is damaged"
                )
            return Step("move", "move", args=(source, target))
        if row.kind == "jump_false" and row.destination is not None:
            return self._jump(row, row.destination, args[0], chain_length)
        if row.kind != "free":  # as ExecuTorch's runtime refuses it
            raise DevplanError(f"{self.where}: instruction {index} has no call; the program is damaged")
        return Step("free", "free")  # planned memory needs no freeing

    def _jump(self, row: Instruction, destination: int, condition: int, chain_length: int) -> Step:
        """A JumpFalseCall as ExecuTorch's runtime runs it: its condition a Bool, or a bool
        tensor (true when every element is), and its destination an index within its own
        chain, one at or past the chain's end (or negative: the runtime reads it unsigned)
        ending the chain, whose next chain then runs."""
        kind = self.view.kinds[condition]
        if not (kind == KernelTypes.Bool or kind == KernelTypes.Tensor and self.dtypes[condition] == torch.bool):
            what = (
                f"a {self.dtypes[condition]} tensor"
                if kind == KernelTypes.Tensor
                else f"of type {_KIND_NAMES.get(kind, f'kind({kind})')}"
            )
            raise DevplanError(
                f"{self.where}: instruction {row.index} jumps on value {condition}, {what}; "
                f"ExecuTorch's runtime takes only a Bool or a bool tensor as a condition; the "
                f"program is damaged"
            )
        start = row.index - row.at  # the chain's first instruction, across the method's chains
        within = destination if 0 <= destination < chain_length else chain_length
        return Step("jump_false", "jump_false", args=(condition, start + within))

    def _delegate(self, index: int, delegate: int, args: list[int]) -> Step:
        if not 0 <= delegate < len(self.delegates):
            raise DevplanError(
                f"{self.where}: instruction {index} calls delegate {delegate} of {len(self.delegates)}; "
                f"the program is damaged"
            )
        method = self.delegates[delegate]
        wanted = [method.values[i] for i in method.inputs] + [torch.empty(0)] * len(method.outputs)
        if len(args) != len(wanted) or not all(
            isinstance(self.values[a], torch.Tensor) == isinstance(w, torch.Tensor) for a, w in zip(args, wanted)
        ):
            raise DevplanError(
                f"{self.where}: instruction {index} passes {len(args)} values to delegate {delegate}, "
                f"whose payload takes {len(method.inputs)} and returns {len(method.outputs)} tensors "
                f"or numbers that do not match them; the program is damaged"
            )
        return Step("delegate", f"delegate {delegate}", method, tuple(args))

    def _device_copy(self, name: str, args: list[int]) -> Step:
        """et_copy::_h2d_copy.out / _d2h_copy.out (self, out, returned): through the allocator of
        the device end."""
        source, out = args[0], args[1]
        if name == TO_DEVICE:
            allocator = allocator_for(self.devices.get(out, CPU))
            return Step(
                "kernel", name, lambda src, dst: allocator.copy_to_device(dst.resize_(src.shape), src), (source, out)
            )
        allocator = allocator_for(self.devices.get(source, CPU))
        return Step(
            "kernel", name, lambda src, dst: dst.resize_(src.shape).copy_(allocator.copy_to_host(src)), (source, out)
        )

    def _kernel(self, index: int, name: str, args: list[int], kinds: tuple[int, ...]) -> Step:
        if name in (TO_DEVICE, TO_HOST) and len(args) >= 2:
            return self._device_copy(name, args)
        if name == ET_VIEW and len(args) == 3:
            return Step("kernel", name, et_view, tuple(args))
        if name in NUMBERS and args:
            return Step("kernel", name, NUMBERS[name], tuple(args[:-1]), result=args[-1])
        if name in DIM_ORDER:
            self._check_kinds(index, name, [(a, n, "", k) for a, (n, k) in zip(args, DIM_ORDER_ARGS[name])], kinds)
            return Step("kernel", name, DIM_ORDER[name], tuple(args[:-1]), **self._outs(args[-2:-1]))
        op = schema_op(name)
        if op is None:
            raise DevplanError(
                f"{self.where}: instruction {index} calls {name}, which the reference runtime does not know"
            )
        if not writes_its_outs(op, name):  # ExecuTorch has only out and a few in-place kernels
            raise DevplanError(
                f"{self.where}: instruction {index} calls {name}, which is not an out variant "
                f"(.out); the program is damaged or made for another runtime"
            )
        if unregistered(name):  # torch may have the op, but ExecuTorch's runtime refuses to load the program
            raise DevplanError(
                f"{self.where}: instruction {index} calls {name}, which ExecuTorch's kernel libraries "
                f"(portable, quantized and LLM custom ops) do not register; the program is made for "
                f"another runtime or damaged"
            )
        schema = op._schema.arguments
        if len(args) < len(schema):
            raise DevplanError(
                f"{self.where}: instruction {index} gives {name} {len(args)} arguments; its schema takes {len(schema)}"
            )
        results = max(1, len(op._schema.returns))  # after the arguments, the results (a void out op's out list)
        # ExecuTorch's kernels refuse more, or no result after the arguments (its results are one
        # value, or one per returned tensor)
        if not len(schema) < len(args) <= len(schema) + results:
            raise DevplanError(
                f"{self.where}: instruction {index} gives {name} {len(args)} arguments and results; "
                f"its schema takes {len(schema)} and {results}; the program is damaged"
            )
        self._check_kinds(
            index,
            name,
            [(a, s.name, f" ({s.type})", _KIND_OF_TYPE.get(str(s.type))) for a, s in zip(args, schema)],
            kinds,
        )
        positional = tuple(a for a, s in zip(args, schema) if not s.kwarg_only)
        keywords = tuple((s.name, a) for a, s in zip(args, schema) if s.kwarg_only)
        outs = [a for a, s in zip(args, schema) if s.is_out]
        if name in DEVICE_SHAPED:
            self._retype_for_running_kernel(index, op, [a for a, s in zip(args, schema) if not s.is_out], outs)
        return Step("kernel", name, op, positional, keywords, **self._outs(outs, DEVICE_SHAPED.get(name, ())))

    def _retype_for_running_kernel(
        self, index: int, op: torch._ops.OpOverload, inputs: list[int], outs: list[int]
    ) -> None:
        """A device-shaped op's results given the dtype that the kernel of the device they lie on
        writes (CUDA's layer norm keeps a bfloat16 input's statistics in float, the CPU's in
        bfloat16), over the same planned bytes; found by running the op's functional form on fake
        tensors of that device."""
        functional = getattr(
            op.overloadpacket, op._overloadname.removesuffix("out").removesuffix("_") or "default", None
        )
        if functional is None:  # no functional form to run: its planned dtypes stand
            return
        mode = torch._subclasses.fake_tensor.FakeTensorMode(allow_non_fake_inputs=False)
        fakes = [
            pytree.tree_map(
                lambda v: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v, value_of(self.values, a)
            )
            for a in inputs
        ]
        try:
            with mode:
                made = pytree.tree_leaves(functional(*fakes))
        except Exception:  # noqa: BLE001 - an op with no meta function here keeps its planned dtypes
            return
        for out, result in zip(outs, made):
            planned = self.values[out]
            if (
                not isinstance(planned, torch.Tensor)
                or not isinstance(result, torch.Tensor)
                or result.dtype == planned.dtype
            ):
                continue
            offset, rest = divmod(int(planned.storage_offset()) * planned.element_size(), result.element_size())
            if rest or result.element_size() > planned.element_size():
                raise DevplanError(
                    f"{self.where}: instruction {index} ({op.name()}) writes value {out} as "  # type: ignore[no-untyped-call]  # torch's, untyped
                    f"{result.dtype} on {planned.device}, which its planned {planned.dtype} bytes "
                    f"cannot hold"
                )
            self.values[out] = torch.empty(0, dtype=result.dtype, device=planned.device).set_(
                planned.untyped_storage(), offset, planned.shape, planned.stride()
            )

    def _check_kinds(
        self, index: int, name: str, arguments: list[tuple[int, str, str, Any]], kinds: tuple[int, ...]
    ) -> None:
        """Each (value, argument name, its type's text, the value types it may be or None) of a
        kernel call: ExecuTorch's kernels assert (abort) on a value of another type."""
        for value, argument, typed, wanted in arguments:
            if wanted is not None and kinds[value] not in wanted:
                raise DevplanError(
                    f"{self.where}: instruction {index} gives {name}'s {argument}{typed} value {value}, "
                    f"a {_KIND_NAMES.get(kinds[value], kinds[value])}; the program is damaged"
                )

    def _outs(self, outs: list[int], device_shaped: tuple[int, ...] = ()) -> dict[str, Any]:
        """A kernel's out tensors (lists' items too) as a step's `emptied` (dynamic: sized by the
        kernel within their bound), `shaped` (`device_shaped` positions: sized by the running
        device's kernel within their planned bytes) and `fixed` (static: the kernel must keep
        their shape)."""
        shaped = {outs[p] for p in device_shaped if p < len(outs)}
        outs = [i for a in outs for i in (self.values[a].items if isinstance(self.values[a], Refs) else (a,))]
        tensors = [i for i in outs if i not in self.bounds and isinstance(self.values[i], torch.Tensor)]
        return {
            "emptied": tuple(i for i in outs if i in self.bounds),
            "shaped": tuple((i, tuple(self.values[i].shape)) for i in tensors if i in shaped),
            "fixed": tuple(i for i in tensors if i not in shaped),
        }


def _same_kind(a: Any, b: Any) -> bool:
    """Whether a MoveCall may put `a` where `b` was: the same type, and for tensors the same
    dtype and shape (other instructions were checked against `b`)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and (a.dtype, a.shape) == (b.dtype, b.shape)
    return type(a) is type(b)
