"""The facts about one tensor that every stage reads and later stages fill in."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from devplan.dtypes import ITEMSIZE
from devplan.errors import DevplanError

DEVICE_TYPES = ("cpu", "cuda")  # ET12 DeviceType enum order: CPU = 0, CUDA = 1
# the backend id of devplan's own delegates, whose payload is an ET12 program for their device
DEVPLAN_BACKEND = "DevplanDelegate"

INT32_MAX = 2**31 - 1  # the largest size a .pte can hold: ET12 writes every tensor size as an int32


@dataclass(frozen=True, order=True)
class Device:
    type: str = "cpu"
    index: int = 0

    def __str__(self) -> str:
        return "cpu" if self.type == "cpu" and self.index == 0 else f"{self.type}:{self.index}"

    @property
    def code(self) -> int:
        """ET12 DeviceType value."""
        return DEVICE_TYPES.index(self.type)

    @classmethod
    def parse(cls, text: str) -> "Device":
        match = re.fullmatch(r"([a-z]+)(?::(\d+))?", text.strip().lower())
        if not match or match.group(1) not in DEVICE_TYPES:
            raise DevplanError(f"unknown device {text!r}; use one of: cpu, cuda:N")
        index = int(match.group(2) or 0)
        if index > 127:
            raise DevplanError(f"device index {index} in {text!r} is out of range (0..127)")
        return cls(match.group(1), index)

    @classmethod
    def from_code(cls, code: int, index: int = 0) -> "Device":
        kind = DEVICE_TYPES[code] if 0 <= code < len(DEVICE_TYPES) else f"device_type({code})"
        return cls(kind, index)


CPU = Device()


@dataclass(frozen=True)
class TensorSpec:
    """shape, dtype (torch-style name), dim order and device describe the tensor; constant,
    lifetime (first and last instruction that touch it, inclusive), mem_id and offset say
    where its bytes live. alias_of names the value whose storage this one shares (a view, an
    in-place result, a piece written straight into a concatenation), alias_offset the byte
    where this tensor starts inside that storage. A dynamic tensor is planned at its upper
    bound (shape holds it) and written as DYNAMIC_BOUND."""

    shape: tuple[int, ...]
    dtype: str
    dim_order: tuple[int, ...] = ()
    device: Device = CPU
    constant: bool = False
    lifetime: tuple[int, int] | None = None
    mem_id: int | None = None
    offset: int | None = None
    alias_of: int | None = None
    alias_offset: int = 0
    dynamic: bool = False  # shape is the upper bound of a dynamic shape; the runtime may hold less
    # the user's name, for inputs and weights: (role, name), e.g. ("parameter", "lm_head.weight");
    # it tells people which tensor this is and changes nothing about where it lives
    name: tuple[str, str] | None = field(default=None, compare=False)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * ITEMSIZE[self.dtype]

    @property
    def planned(self) -> bool:
        return self.mem_id is not None

    @property
    def live(self) -> tuple[int, int]:
        """lifetime, which planning sets on every tensor it places (read only of those)."""
        if self.lifetime is None:
            raise ValueError(f"a tensor {list(self.shape)} has no lifetime")
        return self.lifetime

    @property
    def placed(self) -> tuple[int, int] | None:
        """(mem_id, offset) once planning has placed it, else None: planning sets both at once,
        so the pair is read here rather than each field checked for None where it is used."""
        if self.mem_id is None:
            return None
        if self.offset is None:
            raise ValueError(f"a tensor {list(self.shape)} in buffer {self.mem_id} has no offset")
        return self.mem_id, self.offset
