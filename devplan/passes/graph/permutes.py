"""Permutations of permutations, as one.

A transpose or permute of a transpose or permute reorders the same bytes twice; each is a copy
in the program (the portable library has no strided views), so the pair costs two kernels and
a tensor where one permute, or none, does. LLM attention code makes such pairs on every layer:
`k.transpose(1, 2)` into the heads-first layout, and the KV cache's update transposing it back
(ExecuTorch's export_llama model: 40 transposes in 4 layers, all in pairs that cancel)."""

from __future__ import annotations

import torch

from devplan.ir.fx import arg_ints, arg_node
from devplan.ir.lowered import Lowered

aten = torch.ops.aten
PERMUTES = (aten.permute.default, aten.transpose.int, aten.t.default)


def merge_permutes(low: Lowered) -> Lowered:
    graph, changed = low.gm.graph, False
    for node in list(graph.nodes):
        inner = node.args[0] if node.op == "call_function" and node.target in PERMUTES else None
        if not (
            isinstance(inner, torch.fx.Node)
            and inner.op == "call_function"
            and inner.target in PERMUTES
            and isinstance(inner.meta.get("val"), torch.Tensor)
            and isinstance(node.meta.get("val"), torch.Tensor)
        ):
            continue
        source = arg_node(inner, 0)
        order = [_order(inner)[i] for i in _order(node)]  # node[i] reads inner[order_node[i]] = source[...]
        if order == sorted(order):
            if source.op == "placeholder" and any(user.op == "output" for user in node.users):
                continue  # the output would be an input's own bytes: keep its copy
            node.replace_all_uses_with(source)
        else:
            with graph.inserting_before(node):
                merged = graph.call_function(aten.permute.default, (source, order))
            merged.meta.update(node.meta)
            node.replace_all_uses_with(merged)
        graph.erase_node(node)
        if not inner.users:
            graph.erase_node(inner)
        changed = True
    if changed:
        low.gm.recompile()
    return low


def _order(node: torch.fx.Node) -> list[int]:
    """The permutation a permute, transpose or t applies: result dim i is input dim order[i]."""
    rank = node.meta["val"].dim()
    if node.target is aten.permute.default:
        return [d % rank for d in arg_ints(node, 1)]
    order = list(range(rank))
    if rank > 1:  # t of a vector or a scalar is the tensor itself
        a, b = (node.args[1] % rank, node.args[2] % rank) if node.target is aten.transpose.int else (0, rank - 1)
        order[a], order[b] = order[b], order[a]
    return order
