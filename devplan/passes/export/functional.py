"""Before the split: an exported graph as a plain graph of pure ATen ops, rewritten locally
where that is enough, so that only programs that need it pay for torch's whole-program
retrace (`run_decompositions`, most of a small model's compile).

- `wrap_with_set_grad_enabled` regions (transformers' `@torch.no_grad()` rotary embeddings,
  exported in grad mode) are inlined: grad mode means nothing to an inference program.
- An in-place op on a fresh intermediate (`relu_`, `hardtanh_`, `add_` in a block) becomes its
  functional op, and later readers of the intermediate read the new value; an in-place dropout
  in eval mode, which writes nothing, goes.
- `auto_functionalized_v2` (how export keeps a custom op that writes its arguments, ExecuTorch's
  `llama::update_cache` writing a KV cache) becomes the op itself writing the buffer in place,
  as ExecuTorch runs it; the build marks what the kernel writes so that nothing moves across it.
- Whatever is left that needs torch (in-place writes to inputs, buffers or views; autocast
  regions, whose casts only a retrace inserts) makes `needs_retrace` say so.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeGuard

import torch
from torch._export.utils import node_inline_
from torch._ops import HigherOrderOperator, OpOverload
from torch.utils import _pytree as pytree

from devplan.errors import DevplanError
from devplan.ops import is_view

_TORCH = str(Path(torch.__file__).parent)
_GRAD = torch.ops.higher_order.wrap_with_set_grad_enabled
_AUTOCAST = torch.ops.higher_order.wrap_with_autocast
_DROPOUTS = {
    torch.ops.aten.dropout_.default,
    torch.ops.aten.feature_dropout_.default,
    torch.ops.aten.alpha_dropout_.default,
    torch.ops.aten.feature_alpha_dropout_.default,
}


def inline_grad_regions(gm: torch.fx.GraphModule) -> None:
    """Inline every `wrap_with_set_grad_enabled(flag, submodule, *args)` call, nested ones too."""
    while regions := [n for n in gm.graph.nodes if n.op == "call_function" and n.target is _GRAD]:
        for node in regions:
            submodule = node.args[1]
            node.op, node.target, node.args = "call_module", submodule.target, tuple(node.args[2:])
            if not submodule.users:
                gm.graph.erase_node(submodule)
            node_inline_(node)


def functionalize_locally(gm: torch.fx.GraphModule) -> None:
    """Turn `op_(x, ...)` into `op(x, ...)` where x is a fresh intermediate that nothing views,
    so that no one else can observe the write: readers after it read the functional result."""
    order = {node: i for i, node in enumerate(gm.graph.nodes)}
    for node in list(gm.graph.nodes):
        if node.target in _DROPOUTS and not (node.args[2:3] or [node.kwargs.get("train", True)])[0]:
            # dropout_ in eval writes nothing
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            continue
        functional = _functional_of(node)
        if functional is None or not _fresh(target := node.args[0]):
            continue
        with gm.graph.inserting_before(node):
            pure = gm.graph.call_function(functional, node.args, node.kwargs)
        pure.meta = dict(node.meta)
        for user in list(target.users):
            if user not in (node, pure) and order[user] > order[node]:
                user.replace_input_with(target, pure)
        node.replace_all_uses_with(pure)
        gm.graph.erase_node(node)
        order[pure] = order[node]
    gm.recompile()


_AUTO_FUNCTIONALIZED = torch.ops.higher_order.auto_functionalized_v2


def write_in_place(gm: torch.fx.GraphModule) -> None:
    """`auto_functionalized_v2(op, _x_base_index=i, _all_bases=[...], **args)` to `op(x=base_i,
    **args)` writing base i itself: readers of the op's result read the call, readers of the
    updated base read the base, which the call now writes. A mutated argument that is a view of
    its base (export records its size and stride) stays for refuse_unlowerable to name."""
    for node in [n for n in gm.graph.nodes if n.op == "call_function" and n.target is _AUTO_FUNCTIONALIZED]:
        op, kwargs = node.args[0], dict(node.kwargs)
        bases = kwargs.pop("_all_bases")
        written = {
            a.name: kwargs.pop(f"_{a.name}_base_index")
            for a in op._schema.arguments
            if f"_{a.name}_base_index" in kwargs
        }
        if any(key.startswith("_") for key in kwargs) or len(op._schema.returns) != 1:
            continue  # views of bases, or several results: not rewritten, refused by name below
        with gm.graph.inserting_before(node):
            call = gm.graph.call_function(op, (), {**kwargs, **{name: bases[i] for name, i in written.items()}})
        call.meta = {**node.meta, "val": node.meta["val"][0]}
        for user in list(node.users):
            index = user.args[1]
            user.replace_all_uses_with(call if index == 0 else bases[index - 1])
            gm.graph.erase_node(user)
        gm.graph.erase_node(node)
    gm.recompile()


def needs_retrace(gm: torch.fx.GraphModule) -> bool:
    """Whether torch's functionalizing retrace must still run: an op writes somewhere the local
    rewrite cannot see all readers of, or an autocast region needs its casts."""
    return any(
        n.op == "call_function"
        and (n.target is _AUTOCAST or isinstance(n.target, OpOverload) and n.target._schema.is_mutable)
        for n in gm.graph.nodes
    )


def refuse_unlowerable(gm: torch.fx.GraphModule) -> None:
    """Name the first node devplan cannot lower, and the user's code it came from: control flow
    and other higher-order ops (cond, while_loop, map, scan, invoke_subgraph), attributes that
    are not tensors, and values of a kind ExecuTorch's kernels do not hold (complex, sparse,
    torch's quantized tensors)."""

    def at(node: torch.fx.Node) -> str:
        where = _user_line(node)
        return f"node {node.name}{f' ({where})' if where else ''}"

    for node in gm.graph.nodes:  # a higher-order op first: its submodules are attributes too
        if node.op == "call_function" and isinstance(node.target, HigherOrderOperator):
            raise DevplanError(
                f"{at(node)}: higher-order op torch.ops.higher_order.{node.target.name()} is not "  # type: ignore[no-untyped-call]  # torch declares it untyped
                f"supported; export the model without it (for torch.cond, each branch as its own program)"
            )
    for node in gm.graph.nodes:
        if node.op == "get_attr" and not isinstance(getattr(gm, node.target, None), torch.Tensor):
            raise DevplanError(
                f"{at(node)}: attribute {node.target} is a {type(getattr(gm, node.target, None)).__name__}, "
                f"not a tensor; export the model with tensor attributes only"
            )
        for value in pytree.tree_leaves(node.meta.get("val")):
            why = _unsupported(value)
            if why:
                raise DevplanError(
                    f"{at(node)}: {why}; ExecuTorch's kernels have no such tensors, rewrite the model "
                    f"with real, dense tensors"
                )


def _unsupported(value: object) -> str | None:
    if not isinstance(value, torch.Tensor):
        return None
    if value.dtype.is_complex:
        return f"makes a {str(value.dtype).removeprefix('torch.')} tensor"
    if value.layout != torch.strided:
        return f"makes a {str(value.layout).removeprefix('torch.')} tensor"
    if value.is_quantized:
        return "makes a quantized tensor (torch.quantize_per_tensor); quantize with PT2E instead"
    return None


def _functional_of(node: torch.fx.Node) -> OpOverload | None:
    """The functional twin of an in-place ATen op (`aten.add_.Tensor` -> `aten.add.Tensor`)."""
    op = node.target
    if node.op != "call_function" or not isinstance(op, OpOverload) or not op._schema.is_mutable:
        return None
    schema = op._schema
    first = schema.arguments[0].alias_info if schema.arguments else None
    name = op.overloadpacket.__name__
    if not (
        first
        and first.is_write
        and name.endswith("_")
        and not name.startswith("_")
        and len(schema.returns) == 1
        and not any(a.kwarg_only and a.alias_info for a in schema.arguments)
    ):
        return None
    packet = getattr(torch.ops.aten, name[:-1], None) if op.namespace == "aten" else None
    twin = getattr(packet, op._overloadname, None) if packet is not None else None
    if not isinstance(twin, torch._ops.OpOverload) or twin._schema.is_mutable:
        return None
    return twin if len(twin._schema.arguments) == len(schema.arguments) else None


def _fresh(value: object) -> TypeGuard[torch.fx.Node]:  # the caller then reads it as a node
    """A value a pure op made and no view shares: writing it in place is invisible elsewhere."""
    if not isinstance(value, torch.fx.Node) or value.op != "call_function" or not isinstance(value.target, OpOverload):
        return False
    schema = value.target._schema
    if schema.is_mutable or any(r.alias_info for r in schema.returns):
        return False
    return not any(isinstance(user.target, OpOverload) and is_view(user.target) for user in value.users)


def _user_line(node: torch.fx.Node) -> str:
    """The innermost frame of the node's stack trace that is the user's code, not torch's."""
    frames = [
        line.strip()
        for line in (node.meta.get("stack_trace") or "").splitlines()
        if line.strip().startswith("File") and "<eval_with_key>" not in line and _TORCH not in line
    ]
    return frames[-1] if frames else ""
