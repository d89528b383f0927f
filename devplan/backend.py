"""Backend: a target that runs a group of ops on a device, as --delegate names it. A module of
its own, below the passes that read it (graph, partition, backends) and the options holding it."""
from __future__ import annotations

import operator
from dataclasses import dataclass

import torch

from devplan.errors import DevplanError
from devplan.ops import BACKEND_ID, NUMBER_OPS
from devplan.spec import Device

TARGET_DEVICE = "target_device"  # the compile spec key ExecuTorch reads a delegate's device from


@dataclass(frozen=True)
class Backend:
    """A target that runs a group of ops on `device`: those named in `ops` ("aten::linear"),
    or every op when `ops` is None. devplan's own backend compiles its groups; one of
    ExecuTorch's (passes/backends.py) comes with its groups compiled, its id and specs."""

    device: Device
    ops: frozenset[str] | None = None
    backend_id: str = BACKEND_ID
    specs: tuple[tuple[str, bytes], ...] | None = None  # an ExecuTorch backend's compile specs, as it wrote them

    @classmethod
    def parse(cls, text: str) -> "Backend":
        """'cuda:0' takes every op; 'cuda:0=aten::linear,aten::relu' only those."""
        where, _, names = text.partition("=")
        try:
            device = Device.parse(where)
            ops = frozenset(_op_name(name) for name in names.split(",") if name.strip()) if "=" in text else None
        except DevplanError as error:
            raise DevplanError(f"--delegate {text!r}: {error}") from None
        if ops is not None and not ops:
            raise DevplanError(f"--delegate {text!r}: no op names after '='; e.g. cuda:0=aten::linear,aten::relu")
        return cls(device, ops)

    def takes(self, node: torch.fx.Node) -> bool:
        if node.op != "call_function":
            return False
        if node.target is operator.getitem:  # picks a result of a multi-output op: goes where the op goes
            return isinstance(node.args[0], torch.fx.Node) and self.takes(node.args[0])
        if node.target in NUMBER_OPS:  # sizes are computed on the host, where the runtime's number values live
            return False
        schema = getattr(node.target, "_schema", None)  # higher-order ops (a delegate call) have none
        return schema is not None and (self.ops is None or schema.name in self.ops)

    @property
    def compile_specs(self) -> tuple[tuple[str, bytes], ...]:
        return self.specs if self.specs is not None else ((TARGET_DEVICE, str(self.device).encode()),)


def _op_name(name: str) -> str:
    short = name.strip().removeprefix("aten::").removeprefix("aten.").split(".")[0]
    if not hasattr(torch.ops.aten, short):
        raise DevplanError(f"unknown op {name.strip()!r}; name aten ops as aten::linear")
    return f"aten::{short}"
