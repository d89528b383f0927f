"""Compute once, at compile time, whatever depends only on constants (the transpose of a
weight, a scale folded into a bias), so that it is stored rather than planned and run."""
from __future__ import annotations

from dataclasses import replace

import torch

from devplan.passes.graph import Lowered

_NONDETERMINISTIC = {"aten::rand", "aten::randn", "aten::native_dropout", "aten::bernoulli", "aten::randint"}
# Quantized weights are stored quantized, whatever their scales and zero points weigh: a
# dequantized copy would be float at rest, which is what quantizing them was to avoid.
_KEPT_QUANTIZED = ("quantized_decomposed::dequantize_",)


def fold_constants(low: Lowered) -> Lowered:
    """Replace each constant-only subgraph whose result is used at run time by a stored
    constant, when that never grows the constant bytes: its inputs must be used by nothing
    else, and the result must be no larger than they are.

    The same bound holds for every step on the way, and is checked from the node's fake value
    (shape and dtype) before the step is evaluated: a node whose result would outweigh the
    constants it is computed from stays a run-time op, and so does everything computed from it.
    So compile-time work is bounded by the constants the program already stores, never by
    shapes a small file can name (`w.expand(10**6, 10**4).contiguous()` from one weight)."""
    gm = low.gm
    values: dict[torch.fx.Node, torch.Tensor] = {}
    cone: dict[torch.fx.Node, set[torch.fx.Node]] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder" and node.name in low.constants:
            values[node], cone[node] = low.constants[node.name], {node}
        elif node.op == "get_attr":
            values[node], cone[node] = getattr(gm, node.target), {node}
        elif node.op == "call_function" and _foldable(node, values):
            inside = {node}.union(*(cone[n] for n in node.all_input_nodes))
            leaf_bytes = sum(_nbytes(values[n]) for n in inside if n.op != "call_function")
            if _result_bytes(node) > leaf_bytes:
                continue  # too large to compute here: left to run time
            args, kwargs = torch.fx.map_arg((node.args, node.kwargs), values.__getitem__)
            values[node] = node.target(*args, **kwargs)
            cone[node] = inside
    for node in list(values):
        if node.op != "call_function" or all(user in values for user in node.users):
            continue  # not a frontier: only constants use it
        inside = cone[node]
        closed = all(user in inside for n in inside - {node} for user in n.users)
        leaves = [n for n in inside if n.op != "call_function"]
        result = values[node]
        if not (closed and isinstance(result, torch.Tensor)):
            continue
        if result.nbytes > sum(values[leaf].nbytes for leaf in leaves):
            continue
        name = f"_folded_{node.name}"
        gm.register_buffer(name, result.contiguous())
        with gm.graph.inserting_before(node):
            stored = gm.graph.get_attr(name)
        stored.meta["val"] = node.meta.get("val")
        node.replace_all_uses_with(stored)
    gm.graph.eliminate_dead_code()
    # graph DCE keeps placeholders; drop weights that folding left unused
    unused = {node.name for node in gm.graph.nodes if node.op == "placeholder" and not node.users}
    return replace(low, constants={name: data for name, data in low.constants.items() if name not in unused})


def _nbytes(value) -> int:
    return value.nbytes if isinstance(value, torch.Tensor) else 0


def _result_bytes(node: torch.fx.Node) -> float:
    """The bytes of the node's result, from its fake value (every tensor it returns); infinite
    when that is not known (no fake value, or a size that is symbolic), so it is not folded."""
    total = 0
    for fake in torch.utils._pytree.tree_leaves(node.meta.get("val")):
        if not isinstance(fake, torch.Tensor):
            continue
        try:
            total += int(fake.numel()) * fake.element_size()
        except (TypeError, ValueError, RuntimeError):  # symbolic sizes
            return float("inf")
    if "val" not in node.meta:
        return float("inf")
    return total


def _foldable(node: torch.fx.Node, values) -> bool:
    inputs = node.all_input_nodes
    return (bool(inputs) and all(n in values for n in inputs)
            and isinstance(node.target, torch._ops.OpOverload)
            and node.target._schema.name not in _NONDETERMINISTIC
            and not node.target._schema.name.startswith(_KEPT_QUANTIZED)
            and not node.target._schema.is_mutable)
