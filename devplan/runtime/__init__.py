"""The reference runtime: run a .pte in Python through a DeviceAllocator per device type.

run(pte, inputs, runs=1)                 -> outputs of each run
LoadedMethod(read_pte(path), "forward")  -> .execute(inputs), .release()
register_allocator("cuda", allocator)    -> the allocator it replaces"""

from devplan.runtime.allocator import (
    DeviceAllocator,
    HostAllocator,
    TorchCudaAllocator,
    allocator_for,
    register_allocator,
    registered,
)
from devplan.runtime.executor import LoadedMethod, run

__all__ = [
    "DeviceAllocator",
    "HostAllocator",
    "LoadedMethod",
    "TorchCudaAllocator",
    "allocator_for",
    "register_allocator",
    "registered",
    "run",
]
