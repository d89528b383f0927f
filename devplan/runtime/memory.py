"""What a run's memory holds beyond the arenas of a loaded method: the budget that every
allocation of a run counts against (`Memory`: arenas, unplanned tensors, sample inputs,
constants copied to a device), and tensors made from a file's bytes (constants, the initial
values of mutable buffers), in place in a mapped file where they can be."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from devplan.errors import DevplanError
from devplan.pte import PteFile
from devplan.spec import Device

# Memory a method may take for its arenas and unplanned tensors unless its caller says more:
# every size comes from the file, and a few damaged bytes can ask for terabytes.
MAX_MEMORY = 8 << 30


@dataclass
class Memory:
    """Bytes a loaded method and its delegates' payloads may take in all (their inputs too),
    and those taken; what the run shares: its count of loaded delegate methods, and constants
    on a device ((id of the host copy, device) -> (host copy, device copy))."""

    limit: int
    taken: int = 0
    delegates: int = 0
    uploads: dict[tuple[int, Device], tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def take(self, nbytes: int, what: str) -> None:
        """Count `nbytes` more, refusing first what passes the limit (`what`: the file and
        what needs them)."""
        if self.taken + nbytes > self.limit:
            raise DevplanError(
                f"{what} needs {nbytes} bytes, which with the {self.taken} bytes taken before it "
                f"passes the memory limit of {self.limit} bytes; raise the limit (devplan run "
                f"--max-memory) if the program is meant to be this large"
            )
        self.taken += nbytes


def constant(
    pte: PteFile,
    data_index: int | str,
    data: bytes | memoryview,
    dtype: torch.dtype,
    shape: list[int],
    nbytes: int,
    what: str,
) -> torch.Tensor:
    """Constant `data_index` (or an external weight's key) as a host tensor of this dtype and
    shape, made once per file: delegates that share a payload share its constants (kernels
    never write them)."""
    mapped = pte.external.mapped if isinstance(data_index, str) and pte.external is not None else pte.mapped
    return pte.memo(
        ("constant", data_index, dtype, tuple(shape)),
        lambda: from_bytes(data, dtype, shape, nbytes, what, in_place=mapped),
    )


def from_bytes(
    data: bytes | memoryview, dtype: torch.dtype, shape: list[int], nbytes: int, what: str, *, in_place: bool = False
) -> torch.Tensor:
    """The bytes as a tensor: `in_place`, the private mapping of a file itself (its pages read
    as kernels touch them; a write would change this process's copy only), else a copy."""
    if len(data) < nbytes:
        raise DevplanError(f"{what} has {len(data)} bytes of data but needs {nbytes}; the program is damaged")
    if not in_place or not nbytes:
        return torch.frombuffer(bytearray(data[:nbytes]), dtype=torch.uint8).view(dtype).reshape(shape)
    with warnings.catch_warnings():  # the view is read-only to Python, not to the mapping underneath
        warnings.filterwarnings("ignore", "The given buffer is not writable")
        return torch.frombuffer(data[:nbytes], dtype=torch.uint8).view(dtype).reshape(shape)
