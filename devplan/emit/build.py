"""A lowered graph as one Method: every kernel call's arguments follow its operator's
schema (schema arguments, then the returned values), as the runtime unpacks them. Where
tensors live and which views share bytes is left to the copies and alias passes."""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import torch
from torch.utils import _pytree as pytree

from devplan.errors import DevplanError
from devplan.ir.fx import arg_node
from devplan.ir.lowered import Lowered
from devplan.ir.method import (
    BoolList,
    Delegate,
    DoubleList,
    IntList,
    Kernel,
    Method,
    OptionalTensorList,
    Source,
    TensorList,
    Use,
    Value,
    ViewOf,
)
from devplan.metadata import runner_value
from devplan.ops import NUMBER_OPS, SAME_BYTES, has_kernel, is_view, kernel_name, out_schema, schema_name
from devplan.pte.frames import torch_placeholder
from devplan.pte.verify import MAX_TABLES
from devplan.spec import CPU, INT32_MAX, Device, TensorSpec


@dataclass
class _Builder:
    values: list[Value] = field(default_factory=list)
    of_node: dict[torch.fx.Node, int] = field(default_factory=dict)  # fx node -> value index
    constants: dict[int, torch.Tensor] = field(default_factory=dict)
    state: dict[int, torch.Tensor] = field(default_factory=dict)  # value index -> initial data of updated buffers
    mutated: set[int] = field(default_factory=set)  # value indices of user inputs updated in place
    kernels: list[Kernel] = field(default_factory=list)
    delegates: list[Delegate] = field(default_factory=list)
    uses: dict[tuple[int, Device], int] = field(default_factory=dict)  # (value index, device) -> its Use there

    def add(self, value: Value) -> int:
        """A new value; numbers too get their own (compact shares equal ones among those kept)."""
        self.values.append(value)
        return len(self.values) - 1

    def tensor(self, fake: torch.Tensor, **facts: Any) -> int:
        return self.add(spec_of(fake, **facts))

    def use(self, index: int, device: Device = CPU) -> int:
        """Tensor value `index` as read on `device`, one Use per pair (the copies pass decides
        whether it is a copy); a number is read where it is."""
        if not isinstance(self.values[index], TensorSpec):
            return index
        if (index, device) not in self.uses:
            self.uses[index, device] = self.add(Use(index, device))
        return self.uses[index, device]


def spec_of(t: torch.Tensor, **facts: Any) -> TensorSpec:
    """Every tensor is contiguous: view ops became copies, so a view's strides say nothing
    about the tensor the runtime will hold. A dynamic size is planned at its upper bound."""
    shape = tuple(size if isinstance(size, int) else _upper_bound(size) for size in t.shape)
    dynamic = any(not isinstance(size, int) for size in t.shape)
    if any(size > INT32_MAX for size in shape):  # ET12 writes sizes as int32
        raise DevplanError(
            f"a {str(t.dtype).removeprefix('torch.')} tensor of shape {list(shape)} has a size over "
            f"{INT32_MAX:,}, more than a .pte program can hold; the model (or its .pt2) is damaged"
        )
    return TensorSpec(shape, str(t.dtype).removeprefix("torch."), tuple(range(t.dim())), dynamic=dynamic, **facts)


def _upper_bound(size: torch.SymInt) -> int:
    bound = size.node.shape_env.bound_sympy(size.node.expr).upper  # load refused a symbol with no range
    if not bound.is_Integer or int(bound) > 2**31:  # torch's int_oo is no sympy Integer
        raise DevplanError(
            f"size {size} has no upper bound to plan for; export it with a maximum, "
            f"e.g. torch.export.Dim('batch', max=64)"
        )
    return int(bound)


def build_method(low: Lowered, name: str = "forward", *, device_io: bool = False) -> Method:
    """Every node as kernel calls over a table of values, each tensor read as a Use on the
    device that reads it (host kernels and the caller: the host) and each view op as its
    copy; the copies, alias and compact passes finish the method. `device_io`: a method
    input that only delegates of one device read is planned on that device, and results stay
    where their delegate made them; the caller's copies in and out replace et_copy ops
    (ExecuTorch's skip_h2d_for_method_inputs / skip_d2h_for_method_outputs)."""
    b = _Builder()
    gm = low.gm
    updates, user_outputs = low.results()
    for node in gm.graph.nodes:
        emitted = len(b.kernels)
        if node.op == "placeholder" and node.name in low.constants and node.users:
            b.of_node[node] = b.tensor(low.constants[node.name], constant=True)
            b.constants[b.of_node[node]] = low.constants[node.name]
        elif node.op == "placeholder" and node.name in low.state:
            b.of_node[node] = b.tensor(low.state[node.name])
            b.state[b.of_node[node]] = low.state[node.name]
        elif node.op == "placeholder" and node.name in low.inputs:
            value = node.meta.get("val")
            # a number input has its own value slot, which the runtime fills on every call
            device = _only_device(node, low) if device_io and node.name not in low.mutated else CPU
            b.of_node[node] = b.tensor(value, device=device) if isinstance(value, torch.Tensor) else b.add(_slot(value))
            if node.name in low.mutated:
                b.mutated.add(b.of_node[node])
        elif node.op == "get_attr":
            data = getattr(gm, node.target)
            b.of_node[node] = b.tensor(data, constant=True)
            b.constants[b.of_node[node]] = data
        elif node.op == "call_function" and node.target is not operator.getitem:
            _emit_call(b, node)
        elif node.op == "call_module":
            _emit_delegate(b, node, low)
        if node.op == "placeholder" and node in b.of_node and node.name in low.names:
            _name(b, b.of_node[node], low.names[node.name])
        # every call a node became came from the user's node (device copies come later, from the copies pass)
        if len(b.kernels) > emitted:
            where = source_of(node)
            b.kernels[emitted:] = [replace(kernel, source=where) for kernel in b.kernels[emitted:]]
    placeholders = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    for target, value in updates.items():  # state, then mutated inputs, take their new values in place
        updated = b.of_node[placeholders[target]]
        if value is placeholders[target]:  # a kernel wrote it in place already (llama::update_cache)
            continue
        copy = torch.ops.aten.copy_.default
        args = (updated, _arg(b, value, copy._schema.arguments[1].type, target), b.add(False))
        b.kernels.append(
            Kernel(
                kernel_name(copy),
                args + (updated,),
                target,
                source=Source(op=f"update of {low.names.get(target, ('', target))[1]}"),
            )
        )
    inputs = tuple(b.of_node[placeholders[name]] for name in low.inputs)
    # as in ExecuTorch, a mutated input is also returned, ahead of the user's outputs
    mutated = tuple(b.of_node[placeholders[name]] for name in low.mutated)
    outputs = (*mutated, *(_output(b, value, device_io) for value in user_outputs))
    return Method(
        name,
        tuple(b.values),
        tuple(b.kernels),
        inputs,
        outputs,
        b.constants,
        b.state,
        low.in_spec,
        low.out_spec,
        tuple(b.delegates),
        mutated,
    )


def _name(b: _Builder, index: int, name: tuple[str, str]) -> None:
    value = b.values[index]
    if isinstance(value, TensorSpec):
        b.values[index] = replace(value, name=name)


_FRAME = re.compile(r'File "(.*?)", line (\d+), in (.*?)\n([^\n]*)')


def source_of(node: torch.fx.Node) -> Source:
    """Where the user's model made `node`: the innermost module of the export's nn_module_stack
    (path and class), the user's op, and the innermost frame of its stack_trace. torch's stand-in
    for no module is none."""
    modules = [entry for entry in (node.meta.get("nn_module_stack") or {}).values() if not torch_placeholder(entry[0])]
    path, kind = modules[-1] if modules else ("", "")
    kind = kind if isinstance(kind, str) else getattr(kind, "__qualname__", str(kind))
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    file, line, function, code = frames[-1] if frames else ("", "0", "", "")
    op = node.meta.get("devplan_origin", (node.name, str(node.target)))[1]
    return Source(path, kind.rpartition(".")[2], op, portable_path(file), int(line), function, code.strip())


_PACKAGES = re.compile(r".*[/\\](?:site|dist)-packages[/\\]")


def portable_path(file: str) -> str:
    """A source file's path as the same model gives it on any machine: within an installed
    package, from the package down (transformers/models/gpt2/modeling_gpt2.py); elsewhere, the
    file's name (model.py). The export recorded the absolute paths of the machine it ran on,
    which would make the program's bytes differ from one checkout, user or virtual environment
    to the next; the folder devplan runs in must not matter either."""
    if not os.path.isabs(file):
        return file  # generated code (<eval_with_key>) or a path already relative
    packaged = _PACKAGES.sub("", file, count=1)
    return packaged if packaged != file else os.path.basename(file)


def _only_device(node: torch.fx.Node, low: Lowered) -> Device:
    """The device of the delegates that are `node`'s only readers, else the host."""
    devices = {low.backends[str(user.target)].device if user.op == "call_module" else CPU for user in node.users}
    return devices.pop() if len(devices) == 1 else CPU


def _output(b: _Builder, value: object, device_io: bool) -> int:
    if isinstance(value, torch.fx.Node):
        return b.of_node[value] if device_io else b.use(b.of_node[value])
    raise DevplanError(f"output {value!r}: only tensors can be method outputs; return tensors from forward")


def _emit_call(b: _Builder, node: torch.fx.Node) -> None:
    if node.target in NUMBER_OPS:
        return _emit_number(b, node)
    if not isinstance(node.target, torch._ops.OpOverload):
        name = getattr(node.target, "__name__", str(node.target))
        if isinstance(node.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise DevplanError(
                f"node {node.name}: {name} of dynamic sizes has no kernel in ExecuTorch's runtime; "
                f"compute sizes with + - * / // %, min, max or comparisons"
            )
        raise DevplanError(
            f"{_user_node(node)}: {name} has no kernel in ExecuTorch's runtime; rewrite the model without it"
        )
    schema = out_schema(node.target)
    if schema is None or not has_kernel(schema):
        raise DevplanError(
            f"{_user_node(node)}: op {node.target} has no kernel in the portable library; rewrite the model without it"
        )
    kernel = schema_name(schema)
    view = _view_of(node, kernel)
    if view is not None and isinstance(node.args[0], torch.fx.Node):
        b.use(b.of_node[node.args[0]])  # a view's input is read before its results exist, and numbered so
    given = dict(zip((a.name for a in node.target._schema.arguments if not a.kwarg_only), node.args))
    given.update(node.kwargs)
    outs = _out_values(b, node, [a for a in schema.arguments if a.is_out])
    args = []
    for a in schema.arguments:
        if a.is_out:
            args.append(outs[a.name])
        elif a.name in given:
            args.append(_arg(b, given[a.name], a.type, node.name))
        elif a.has_default_value():
            args.append(_arg(b, a.default_value, a.type, node.name))
        else:
            raise DevplanError(f"node {node.name}: argument {a.name} of {kernel} is missing")
    # The runtime's unboxing takes one trailing value for the result: the out argument itself,
    # or a list of them when the op returns several tensors.
    out_values = tuple(outs.values())
    result = out_values[0] if len(out_values) == 1 else b.add(TensorList(out_values))
    origin = node.meta.get("devplan_origin", (node.name,))[0]
    b.kernels.append(Kernel(kernel, tuple(args) + (result,), node.name, view=view, origin=origin))


def _view_of(node: torch.fx.Node, kernel: str) -> ViewOf | None:
    """For a view op (or one whose result holds exactly its input's bytes), where each result
    starts in its input's bytes when each is one contiguous run of them; None for other ops."""
    same_bytes = kernel in SAME_BYTES
    if not (same_bytes or is_view(node.target)):  # type: ignore[arg-type]  # a call_function's op
        return None
    val = node.meta.get("val")
    source = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    static = isinstance(source, torch.Tensor) and all(isinstance(size, int) for size in source.shape)
    starts = (
        [0] * len(val if isinstance(val, (list, tuple)) else (val,)) if same_bytes else _runs(node) if static else None
    )
    return ViewOf(None if starts is None else tuple(starts), node.target is torch.ops.aten.view.default)


def _user_node(node: torch.fx.Node) -> str:
    """The user's own node that `node` came from (decomposition names its nodes op_default_N)."""
    name, op = node.meta.get("devplan_origin", (node.name, str(node.target)))
    return f"node {name}" if op == str(node.target) else f"node {name} ({op})"


def _emit_number(b: _Builder, node: torch.fx.Node) -> None:
    """A size the program computes while it runs (from a dynamic shape) goes to a number value
    of its own; the size lists of later ops refer to that value, so the runtime reads it anew."""
    val = node.meta.get("val")
    if not isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise DevplanError(
            f"node {node.name}: {node.format_node()} computes {type(val).__name__}, but the "
            f"runtime's {NUMBER_OPS[node.target]} works on sizes; compute it with tensor ops"
        )
    args = tuple(_arg(b, a, "int", node.name) for a in node.args)
    b.of_node[node] = b.add(_slot(val))
    b.kernels.append(Kernel(NUMBER_OPS[node.target], args + (b.of_node[node],), node.name))


def _slot(value: Any) -> Value:
    """A number value as stored; a size known only at run time (a delegate's size input, a
    number op's result) is written there on every run, so any start value does."""
    start: Value = {torch.SymInt: 0, torch.SymFloat: 0.0, torch.SymBool: False}.get(type(value), value)
    return start


def _emit_delegate(b: _Builder, node: torch.fx.Node, low: Lowered) -> None:
    """A call of a group partition() gave a backend: its inputs read on the backend's device,
    its results left there until something reads them elsewhere."""
    name = str(node.target)  # a call_module's target: the group's name
    backend, payload = low.backends[name], low.payloads[name]
    device = backend.device
    args = [arg_node(node, i) for i in range(len(node.args))] if payload.inputs is None else payload.inputs
    inputs = tuple(b.use(b.of_node[arg], device) for arg in args)
    val = node.meta["val"]
    outs = tuple(b.tensor(result, device=device) for result in (val if isinstance(val, (list, tuple)) else (val,)))
    b.delegates.append(
        Delegate(
            backend.backend_id,
            payload.data,
            backend.compile_specs,
            device,
            payload.arena,
            payload.arena_bound,
            named_data=payload.named_data,
            handles=payload.handles,
        )
    )
    b.kernels.append(Kernel(backend.backend_id, inputs + outs, name, delegate=len(b.delegates) - 1))
    _bind(b, node, outs)


def _bind(b: _Builder, node: torch.fx.Node, results: Sequence[int]) -> None:
    """The node's value is its one tensor result; getitem users pick theirs out of several."""
    if isinstance(node.meta.get("val"), torch.Tensor):
        b.of_node[node] = results[0]
    for user in node.users:
        if user.target is operator.getitem:
            b.of_node[user] = results[cast(int, user.args[1])]  # a getitem's index


def _runs(node: torch.fx.Node) -> list[int] | None:
    """Where each result of view op `node` starts in its source's bytes, or None unless every
    result is one contiguous run of them. devplan holds every tensor contiguous, so the view
    is replayed on a contiguous meta tensor of the source's shape (the traced tensors' strides
    describe eager memory, not devplan's)."""
    source = arg_node(node, 0).meta.get("val")
    rest = (*node.args[1:], *node.kwargs.values())
    if not isinstance(source, torch.Tensor) or any(isinstance(a, torch.fx.Node) for a in pytree.tree_leaves(rest)):
        return None
    result = node.target(torch.empty(source.shape, dtype=source.dtype, device="meta"), *node.args[1:], **node.kwargs)  # type: ignore[operator]
    pieces = result if isinstance(result, (list, tuple)) else (result,)
    if not all(
        isinstance(p, torch.Tensor)
        and p.dtype == source.dtype
        and p.is_contiguous()
        and p.storage_offset() + p.numel() <= source.numel()
        for p in pieces
    ):
        return None
    return [p.storage_offset() * p.element_size() for p in pieces]


def _out_values(b: _Builder, node: torch.fx.Node, out_args: list[torch._C.Argument]) -> dict[str, int]:
    """Value indices for the op's out arguments: the node's own value for one output, one
    value per element for several (getitem users pick them up), a TensorList for Tensor[]."""
    val = node.meta["val"]
    if len(out_args) == 1 and isinstance(val, torch.Tensor):
        b.of_node[node] = b.tensor(val)
        return {out_args[0].name: b.of_node[node]}
    items = [b.tensor(v) for v in val]
    _bind(b, node, items)
    if len(out_args) == 1:  # a Tensor[] out, e.g. split_copy
        return {out_args[0].name: b.add(TensorList(tuple(items)))}
    return {a.name: i for a, i in zip(out_args, items)}


def _arg(b: _Builder, value: Any, kind: object, where: str) -> int:
    kind_text = str(kind)
    if isinstance(value, torch.fx.Node):
        return b.use(b.of_node[value])
    if value is None:
        return b.add(None)
    if isinstance(value, (list, tuple)):
        if "Optional[Tensor]" in kind_text:
            return b.add(OptionalTensorList(tuple(-1 if v is None else b.use(b.of_node[v]) for v in value)))
        if "Tensor" in kind_text:
            return b.add(TensorList(tuple(_arg(b, v, "Tensor", where) for v in value)))
        if "float" in kind_text:
            return b.add(DoubleList(tuple(float(v) for v in value)))
        if "bool" in kind_text:
            return b.add(BoolList(tuple(bool(v) for v in value)))
        return b.add(IntList(tuple(b.of_node[v] if isinstance(v, torch.fx.Node) else b.add(int(v)) for v in value)))
    if isinstance(value, torch.dtype):
        from devplan.dtypes import code_of

        return b.add(code_of(str(value).removeprefix("torch.")))
    if isinstance(value, torch.memory_format):
        formats = {torch.contiguous_format: 0, torch.preserve_format: 1}
        if value not in formats:
            raise DevplanError(f"node {where}: memory format {value} is not supported; use contiguous tensors")
        return b.add(formats[value])
    if isinstance(value, (torch.layout, torch.device)):
        return b.add(None)
    if "Tensor" in kind_text and isinstance(value, (bool, int, float)):
        data = torch.tensor(value)  # a number where the schema wants a tensor: store it as a 0-dim constant
        index = b.tensor(data, constant=True)
        b.constants[index] = data
        return index
    if type(value) is int and value not in _INT64:
        raise DevplanError(
            f"node {where}: argument value {value} is outside the 64 bits a program's integers hold; "
            f"the model (or its .pt2) is damaged"
        )
    if isinstance(value, (bool, int, float, str)):
        return b.add(value)
    raise DevplanError(
        f"node {where}: argument value {value!r} of type {type(value).__name__} cannot be stored in a program"
    )


_INT64 = range(-(1 << 63), 1 << 63)


def constant_method(name: str, value: Any) -> Method:
    """A method that runs nothing and returns `value`, as ExecuTorch writes the constant methods
    an LLM runner reads before anything runs (get_max_seq_len, use_kv_cache, get_eos_ids): an
    int, float, bool or string is one value; a list of ints (floats, bools) one value per item,
    each an output, under the list's pytree spec. A name the runner reads is made its type
    first (devplan/metadata.py), so that the runner never meets 'True' where it reads a bool."""
    value = runner_value(name, value, "constant method")
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    kinds = {type(item) for item in items}
    scalar = not isinstance(value, (list, tuple)) and kinds <= {bool, int, float, str}
    listed = isinstance(value, (list, tuple)) and len(kinds) <= 1 and kinds <= {bool, int, float}
    if not (scalar or listed) or any(type(item) is int and item not in _INT64 for item in items):
        raise DevplanError(
            f"constant method {name}: {value!r} is not an int, float, bool, string or a list of ints, "
            f"floats or bools (ints within 64 bits)"
        )
    if len(items) >= MAX_TABLES // 2:  # each item is two tables (a value and its scalar)
        raise DevplanError(
            f"constant method {name}: {len(items)} items, more than ExecuTorch's runtime loads (it "
            f"refuses a program of over {MAX_TABLES} tables, two per item); return fewer"
        )
    spec = pytree.treespec_dumps(pytree.tree_structure(items if listed else value))
    return Method(name, tuple(items), (), (), tuple(range(len(items))), {}, {}, "", spec)
