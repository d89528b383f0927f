"""Sizes known only at run time, as the graph should hold them.

hoist_sizes: a number op (a dynamic shape's size read or combined, see ops.NUMBER_OPS)
moves up to just after its last input. Export places them next to their first reader, so a
sym_numel(x) late in the graph would keep all of x alive until then; computed early, they
cost no tensor any bytes."""

from __future__ import annotations

from collections import defaultdict

import torch

from devplan.ir.lowered import Lowered
from devplan.ops import NUMBER_OPS


def hoist_sizes(low: Lowered) -> Lowered:
    gm = low.gm
    nodes = list(gm.graph.nodes)
    position = {node: i for i, node in enumerate(nodes)}
    placeholders = [node for node in nodes if node.op == "placeholder"]
    # number op -> the node it now follows, and the reverse
    anchor: dict[torch.fx.Node, torch.fx.Node] = {}
    follows: defaultdict[torch.fx.Node, list[torch.fx.Node]] = defaultdict(list)
    for node in nodes:
        if node.op == "call_function" and node.target in NUMBER_OPS:
            sources = [anchor.get(a, a) for a in node.all_input_nodes] + placeholders[-1:]
            anchor[node] = max(sources, key=position.__getitem__)
            follows[anchor[node]].append(node)
    if not anchor:
        return low
    order = [m for node in nodes if node not in anchor for m in (node, *follows[node])]
    for previous, node in zip(order, order[1:]):
        previous.append(node)
    gm.recompile()
    return low
