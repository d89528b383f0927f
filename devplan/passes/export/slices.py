"""Slices computed from the slices of what they read: a slice of an expand, of an elementwise
op over broadcast operands, of an unsqueeze, or of a reshape that keeps the sliced dim and those
after it is rewritten as the same op over slices of its
inputs (an operand of size 1 along the sliced dim is read whole), so that the whole tensor is
never made when only slices of it are read. Attention in blocks (passes/export/attention.py) slices
the mask a model builds for the whole context, e.g. transformers' `kv_idx <= cache_position`
comparison of two ranges expanded to prompt x cache, and the keys and values a grouped-query
model repeats for every head: sunk to their inputs, each block compares a block of the range
and reads a block of the cache, and neither the prompt x cache mask nor the repeated cache is
planned."""

from __future__ import annotations

from typing import Any

import torch

from devplan.ir.fx import arg_list, arg_node

SLICE = torch.ops.aten.slice.Tensor
_EXPAND = torch.ops.aten.expand.default
_UNSQUEEZE = torch.ops.aten.unsqueeze.default
_RESHAPES = {torch.ops.aten.reshape.default, torch.ops.aten.view.default}
# elementwise ops over operands that broadcast: a slice of the result is the op over their slices
_ELEMENTWISE = {
    torch.ops.aten.le.Tensor,
    torch.ops.aten.lt.Tensor,
    torch.ops.aten.ge.Tensor,
    torch.ops.aten.gt.Tensor,
    torch.ops.aten.eq.Tensor,
    torch.ops.aten.ne.Tensor,
    torch.ops.aten.logical_and.default,
    torch.ops.aten.logical_or.default,
    torch.ops.aten.logical_not.default,
    torch.ops.aten.bitwise_and.Tensor,
    torch.ops.aten.bitwise_or.Tensor,
    torch.ops.aten.add.Tensor,
    torch.ops.aten.sub.Tensor,
    torch.ops.aten.mul.Tensor,
    torch.ops.aten.where.self,
}


def sink_slices(gm: torch.fx.GraphModule, fake: Any) -> int:  # fake: the export's FakeTensorMode
    """Rewrite every slice (step 1) of an expand, elementwise op, unsqueeze or reshape as that op over
    slices of its inputs, to a fixed point; the whole results no slice needs any more are
    dropped. Returns how many slices were rewritten. `fake`: the graph's fake mode, in which
    each new node's value is computed."""
    pending, moved = [n for n in gm.graph.nodes if n.target is SLICE], 0
    while pending:
        node = pending.pop()
        if node._erased or not _plain(node):
            continue
        made = _sunk(gm.graph, node, fake)
        if made is None:
            continue
        node.replace_all_uses_with(made)
        gm.graph.erase_node(node)
        pending += [n for n in _between(made) if n.target is SLICE]
        moved += 1
    if moved:
        gm.graph.eliminate_dead_code()
    return moved


def _plain(node: torch.fx.Node) -> bool:
    """A slice of a static range, step 1, of a tensor the graph makes."""
    args = list(node.args) + [None] * (5 - len(node.args))
    source, dim, start, end, step = args[:5]
    return (
        isinstance(source, torch.fx.Node)
        and source.op == "call_function"
        and all(isinstance(v, int) for v in (dim, start, end))
        and step in (None, 1)
    )


def _sunk(graph: torch.fx.Graph, node: torch.fx.Node, fake: Any) -> torch.fx.Node | None:
    """The slice's value made from slices of its source's inputs, or None when it cannot be."""
    source, dim, start, end = node.args[:4]
    assert isinstance(source, torch.fx.Node) and isinstance(dim, int)  # _plain's
    out = source.meta["val"]
    dim = dim % out.dim()
    length = node.meta["val"].shape[dim]
    if isinstance(length, torch.SymInt):
        return None

    def sliced(operand: Any, at: int) -> Any:
        """The operand's part of the slice, along its own dim `at` (aligned from the right)."""
        value = operand.meta.get("val") if isinstance(operand, torch.fx.Node) else None
        if not isinstance(value, torch.Tensor) or at < 0 or value.shape[at] == 1:
            return operand  # a number, or broadcast along the dim: read whole
        return _call(graph, SLICE, (operand, at, start, end), fake, before=node)

    if source.target is _EXPAND:
        inner, sizes = arg_node(source, 0), arg_list(source, 1)
        sizes[dim] = length
        piece = sliced(inner, dim - (out.dim() - inner.meta["val"].dim()))
        return _call(graph, _EXPAND, (piece, sizes), fake, before=node)
    if source.target in _RESHAPES:  # the sliced dim and those after it as they were: GQA's repeated heads
        inner, sizes = arg_node(source, 0), arg_list(source, 1)
        before = inner.meta["val"].shape
        tail = out.dim() - dim
        if len(before) < tail or tuple(before[len(before) - tail :]) != tuple(out.shape[dim:]):
            return None
        sizes[dim] = length
        return _call(graph, source.target, (sliced(inner, len(before) - tail), sizes), fake, before=node)
    if source.target is _UNSQUEEZE:
        inner, at = arg_node(source, 0), source.args[1]
        at = at % out.dim()
        if at == dim:
            return None
        return _call(graph, _UNSQUEEZE, (sliced(inner, dim - (dim > at)), at), fake, before=node)
    if source.target in _ELEMENTWISE and not source.kwargs:
        operands = [sliced(a, dim - (out.dim() - _rank(a))) if isinstance(a, torch.fx.Node) else a for a in source.args]
        return _call(graph, source.target, tuple(operands), fake, before=node)
    return None


def _rank(operand: torch.fx.Node) -> int:
    """An operand's dims: 0 for a size the program computes (a number, read whole)."""
    value = operand.meta.get("val")
    return value.dim() if isinstance(value, torch.Tensor) else 0


def _call(
    graph: torch.fx.Graph, target: Any, args: tuple[Any, ...], fake: Any, *, before: torch.fx.Node
) -> torch.fx.Node:
    """A new node of `target` over `args`, its value computed on their fake values."""
    with graph.inserting_before(before):
        made = graph.call_function(target, args)
    values = torch.fx.map_arg(args, lambda a: a.meta["val"])
    with fake:
        made.meta["val"] = target(*values)
    made.meta.update({k: before.meta[k] for k in ("nn_module_stack", "stack_trace") if k in before.meta})
    return made


def _between(made: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes a rewrite made: the result and the slices it reads."""
    return [made, *(a for a in made.all_input_nodes if a.target is SLICE)]
