"""A graph node's arguments as the graph passes read them. torch.fx types every argument as
any `Argument` (a constant, a list, a node, ...); which one an op takes is known from the op's
schema, so the passes narrow here, once, and a graph that breaks the schema fails with one
line naming the node rather than an AttributeError deep inside a pass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def arg_node(node: torch.fx.Node, index: int) -> torch.fx.Node:
    """node.args[index], which the op's schema makes a tensor: the node that makes it."""
    arg = node.args[index]
    if not isinstance(arg, torch.fx.Node):
        # a TypeError inside a stage becomes InternalError.of, which names `node`
        raise TypeError(f"{node.name}: argument {index} is {type(arg).__name__}, not a tensor's node")
    return arg


def arg_ints(node: torch.fx.Node, index: int) -> list[int]:
    """node.args[index], which the op's schema makes an int[] (dims, sizes, a permutation)."""
    arg = node.args[index]
    items = [item for item in arg if isinstance(item, int)] if isinstance(arg, (list, tuple)) else []
    if not isinstance(arg, (list, tuple)) or len(items) != len(arg):
        raise TypeError(f"{node.name}: argument {index} is {type(arg).__name__}, not a list of ints")
    return items


def arg_list(node: torch.fx.Node, index: int) -> list[Any]:
    """node.args[index], which the op's schema makes a list whose items may be symbolic
    (an expand's or a view's SymInt[] sizes)."""
    arg = node.args[index]
    if not isinstance(arg, Sequence) or isinstance(arg, str):
        raise TypeError(f"{node.name}: argument {index} is {type(arg).__name__}, not a list")
    return list(arg)
