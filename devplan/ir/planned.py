"""A method planned: every tensor of its Method placed (lifetime, mem_id, offset), and the
buffers that placement takes on each device, against the least any placement could."""

from __future__ import annotations

from dataclasses import dataclass

from devplan.ir.method import Method
from devplan.spec import Device


@dataclass(frozen=True)
class BufferPlan:
    mem_id: int
    device: Device
    size: int
    lower_bound: int
    tensors: int


@dataclass(frozen=True)
class PlannedMethod:
    method: Method  # every planned tensor spec has lifetime, mem_id and offset
    buffers: tuple[BufferPlan, ...]
    algorithm: str
