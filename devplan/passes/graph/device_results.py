"""A delegate's group with each op's results as the kernel of its backend's device makes them.

torch.export traces on the host, and some kernels write other shapes on another device: CUDA's
batch norms return their saved mean and inverse std with one element per channel where the
CPU's return none. The plan must hold what the kernel that runs writes, so each op of a group
bound for a device is run again on fake tensors of that device (torch's meta functions, which
know each device's shapes; no device needed), and a result of another shape or dtype replaces
the traced one."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from devplan.ir.lowered import Lowered
from devplan.spec import Device


def results_on_device(low: Lowered, device: Device) -> Lowered:
    """`low` with every op's traced results (node.meta["val"]) as `device`'s kernel makes them;
    kept on the host's fake device, as every other stage reads them."""
    if device.type == "cpu":
        return low
    target = torch.device(device.type, device.index)
    moved: dict[torch.fx.Node, Any] = {}  # node -> its value on the device
    for node in low.gm.graph.nodes:
        val = node.meta.get("val")
        mode = _fake_mode(val)
        if mode is None:
            continue
        with mode, torch.no_grad():
            made = _run_on(node, moved, target) if node.op == "call_function" else None
            if made is None:
                made = _on(val, target)
            moved[node] = made
            if _differs(made, val):
                node.meta["val"] = _on(made, torch.device("cpu"))
    return low


def _on(val: Any, device: torch.device) -> Any:
    """A fake value with every tensor in it made anew on `device` (a move would run autograd's
    and the device's own machinery, which a host-only torch lacks)."""
    return pytree.tree_map(
        lambda v: (
            torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=device) if isinstance(v, torch.Tensor) else v
        ),
        val,
    )


def _run_on(node: torch.fx.Node, moved: dict[torch.fx.Node, Any], target: torch.device) -> Any:
    """The node's op over its arguments' values on the device, or None where the op cannot run
    on fake tensors (its traced value stands)."""
    args, kwargs = pytree.tree_map(
        lambda a: moved.get(a, a.meta.get("val")) if isinstance(a, torch.fx.Node) else a, (node.args, node.kwargs)
    )
    if isinstance(node.target, torch._ops.OpOverload):  # factory ops: made on the device as they will be
        kwargs = {**kwargs, "device": target} if "device" in kwargs else kwargs
    try:
        return node.target(*args, **kwargs)  # type: ignore[operator]  # a call_function's target is its op
    except Exception:  # noqa: BLE001 - an op with no meta function for this device keeps its traced value
        return None


def _fake_mode(val: Any) -> torch._subclasses.fake_tensor.FakeTensorMode | None:
    """The fake mode a traced value belongs to, if it holds a fake tensor."""
    for leaf in pytree.tree_leaves(val):
        if isinstance(leaf, torch._subclasses.fake_tensor.FakeTensor):
            return leaf.fake_mode
    return None


def _differs(made: Any, traced: Any) -> bool:
    """Whether the device's results differ from the traced ones in structure, shape or dtype."""
    made_leaves, made_spec = pytree.tree_flatten(made)
    traced_leaves, traced_spec = pytree.tree_flatten(traced)
    if made_spec != traced_spec:
        return False  # an op that returns another structure on the device is beyond what the plan can mend
    return any(
        isinstance(m, torch.Tensor) and isinstance(t, torch.Tensor) and (m.shape != t.shape or m.dtype != t.dtype)
        for m, t in zip(made_leaves, traced_leaves)
    )
