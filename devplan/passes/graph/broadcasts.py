"""Tables repeated over the batch, read once.

Relative-position attention (DeBERTa) makes each layer's position tables batch-sized: the
[tokens, tokens] int64 index of its gathers expanded over batch x heads, the projected position
table repeated over the batch for its batched matmuls. The portable library has no strided
views, so each expand or repeat is a copy as large as its result (the largest tensors of the
layer at a few tokens), and folding stores them whole. Both read the same table for every batch
entry, so they are rewritten to read it once, with the same results to the bit:

- gather(x, d, expand(table)) over leading dims -> index_select over each entry's flattened
  row, at offsets the table gives: table * stride(d) + the row-major offset of its other dims;
- bmm(x, repeat(table, [B, 1, 1])) (either operand, transposed or not) -> one bmm of each
  batch entry's slice of x against the table, concatenated (the pieces written in place).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Callable, TypeGuard, cast

import torch
from torch._guards import detect_fake_mode

from devplan.ir.fx import arg_node
from devplan.ir.lowered import Lowered

aten = torch.ops.aten
_SWAPS = (aten.transpose.int, aten.permute.default)


def read_broadcasts_once(low: Lowered) -> Lowered:
    graph = low.gm.graph
    mode = detect_fake_mode([n.meta.get("val") for n in graph.nodes if n.op == "placeholder"])
    changed = False
    for node in list(graph.nodes):
        call = partial(_call, graph, mode, node)
        with graph.inserting_before(node):
            result = _gather_rows(node, call) or _bmm_per_entry(node, call)
        if result is None:
            continue
        node.replace_all_uses_with(result)
        graph.erase_node(node)
        changed = True
    if changed:
        graph.eliminate_dead_code()
        low.gm.recompile()
    return low


Call = Callable[..., torch.fx.Node]  # _call with its graph, fake mode and origin given: op, *args


def _call(graph: torch.fx.Graph, mode: Any, origin: torch.fx.Node, op: Any, *args: Any, **kwargs: Any) -> torch.fx.Node:
    """A new node of op, with its fake value and the module and line of the node it replaces."""
    made = graph.call_function(op, args, kwargs)
    fakes = torch.fx.map_arg((args, kwargs), lambda n: n.meta["val"])
    with mode or torch._subclasses.fake_tensor.FakeTensorMode():
        made.meta["val"] = op(*fakes[0], **fakes[1])
    made.meta.update({k: origin.meta[k] for k in ("nn_module_stack", "stack_trace") if k in origin.meta})
    return made


def _gather_rows(node: torch.fx.Node, call: Call) -> torch.fx.Node | None:
    lead = _broadcast_lead(node)
    if lead is None:
        return None
    x, dim, index = cast(tuple[torch.fx.Node, int, torch.fx.Node], node.args[:3])
    table, shape, sizes = index.args[0], list(index.meta["val"].shape), list(x.meta["val"].shape)
    strides = [math.prod(sizes[j + 1 :]) for j in range(len(sizes))]
    d = dim % len(shape)
    offsets = call(aten.view.default, table, shape[lead:])
    if strides[d] != 1:
        offsets = call(aten.mul.Scalar, offsets, strides[d])
    for j in range(lead, len(shape)):
        if j != d and shape[j] > 1:
            index_type = offsets.meta["val"]
            step = call(
                aten.arange.start_step,
                0,
                shape[j] * strides[j],
                strides[j],
                dtype=index_type.dtype,
                device=index_type.device,
            )
            along = [shape[j] if i == j else 1 for i in range(lead, len(shape))]
            offsets = call(aten.add.Tensor, offsets, call(aten.view.default, step, along))
    flat = call(aten.view.default, offsets, [math.prod(shape[lead:])])
    rows = call(aten.view.default, x, [math.prod(sizes[:lead]), math.prod(sizes[lead:])])
    return call(aten.view.default, call(aten.index_select.default, rows, 1, flat), shape)


def _broadcast_lead(node: torch.fx.Node) -> int | None:
    """How many leading dims the gather's index is expanded over (the table's size 1 there, the
    index's the input's), when it is such a gather of static sizes over a contiguous input."""
    if node.op != "call_function" or node.target is not aten.gather.default or node.kwargs.get("sparse_grad"):
        return None
    x, dim, index = node.args[:3]
    if not (isinstance(index, torch.fx.Node) and index.target is aten.expand.default and isinstance(dim, int)):
        return None
    values = [n.meta.get("val") if isinstance(n, torch.fx.Node) else None for n in (x, index, index.args[0])]
    tensors = [v for v in values if _static(v)]
    if len(tensors) < len(values):
        return None
    source, shape, table = tensors[0], list(tensors[1].shape), list(tensors[2].shape)
    table = [1] * (len(shape) - len(table)) + table
    lead = len(shape)
    while lead > 0 and table[lead - 1] == shape[lead - 1]:
        lead -= 1
    if (
        not source.is_contiguous()
        or any(size != 1 for size in table[:lead])
        or math.prod(shape[:lead]) <= 1
        or dim % len(shape) < lead
        or shape[:lead] != list(source.shape[:lead])
    ):
        return None
    return lead


def _bmm_per_entry(node: torch.fx.Node, call: Call) -> torch.fx.Node | None:
    if node.op != "call_function" or node.target is not aten.bmm.default:
        return None
    for side in (0, 1):
        found = _repeated(node.args[side])
        if found is None:
            continue
        table, times, swapped = found
        if swapped:
            table = call(aten.transpose.int, table, -1, -2)
        other = arg_node(node, 1 - side)
        if not _static(other.meta.get("val")):
            return None
        rows = other.meta["val"].shape[0] // times
        pieces = []
        for b in range(times):
            entry = other if times == 1 else call(aten.slice.Tensor, other, 0, b * rows, (b + 1) * rows)
            pieces.append(call(aten.bmm.default, *((entry, table) if side else (table, entry))))
        return pieces[0] if times == 1 else call(aten.cat.default, pieces, 0)
    return None


def _repeated(operand: object) -> tuple[torch.fx.Node, int, bool] | None:
    """(table, times, swapped) when the operand is repeat(table, [times, 1, 1]), its last two
    dims swapped or not, of static sizes."""
    swapped = False
    if isinstance(operand, torch.fx.Node) and operand.target in _SWAPS and _swaps_last_two(operand):
        operand, swapped = operand.args[0], True
    if not (isinstance(operand, torch.fx.Node) and operand.target is aten.repeat.default):
        return None
    table, repeats = operand.args[:2]
    if not (isinstance(table, torch.fx.Node) and isinstance(repeats, (list, tuple)) and len(repeats) == 3):
        return None
    value = table.meta.get("val")
    if not (_static(value) and value.dim() == 3 and list(repeats[1:]) == [1, 1]):
        return None
    return (table, repeats[0], swapped) if isinstance(repeats[0], int) and repeats[0] >= 1 else None


def _swaps_last_two(node: torch.fx.Node) -> bool:
    if node.target is aten.transpose.int:
        return sorted(cast(int, d) % 3 for d in node.args[1:3]) == [1, 2]
    return [d % 3 for d in cast(list[int], node.args[1])] == [0, 2, 1]


def _static(value: object) -> TypeGuard[torch.Tensor]:  # the callers then read it as a tensor
    return isinstance(value, torch.Tensor) and all(isinstance(s, int) for s in value.shape)
