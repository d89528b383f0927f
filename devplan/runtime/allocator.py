"""DeviceAllocator: how the reference runtime gets memory on a device and moves bytes to and
from it, one allocator per device type. The registry is devplan's only global mutable
state: a program names device types, and whoever runs it decides what backs each one."""

from __future__ import annotations

import contextlib
from typing import Iterable, Iterator, Protocol

import torch

from devplan.errors import DevplanError
from devplan.spec import DEVICE_TYPES, Device


class DeviceAllocator(Protocol):
    def allocate(self, nbytes: int, device: Device) -> torch.Tensor:
        """A zeroed uint8 tensor of `nbytes` on `device`: one planned buffer (arena)."""

    def deallocate(self, arena: torch.Tensor) -> None:
        """Give back an arena that `allocate` returned."""

    def copy_to_device(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Copy host tensor `src` into `dst`, a view of one of this allocator's arenas."""

    def copy_to_host(self, src: torch.Tensor) -> torch.Tensor:
        """A host copy of `src`, a view of one of this allocator's arenas."""

    def peak(self, device: Device) -> int | None:
        """The most bytes this device held at once since `reset_peak` (arenas, constants and
        whatever kernels allocated there), or None where the allocator cannot tell."""

    def reset_peak(self, device: Device) -> None:
        """Start counting `peak` afresh from the bytes held now."""


class HostAllocator:
    """Arenas in host memory. Registered for the CPU; tests also register it for CUDA so that
    device programs run anywhere, with every device step still going through an allocator."""

    def allocate(self, nbytes: int, device: Device) -> torch.Tensor:
        return torch.zeros(nbytes, dtype=torch.uint8)

    def deallocate(self, arena: torch.Tensor) -> None:
        del arena  # host memory goes back when the last view is dropped

    def copy_to_device(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        dst.copy_(src)

    def copy_to_host(self, src: torch.Tensor) -> torch.Tensor:
        return src.clone()

    def peak(self, device: Device) -> int | None:
        return None  # host memory is the process's: no count of one device's bytes

    def reset_peak(self, device: Device) -> None:
        pass


class TorchCudaAllocator(HostAllocator):
    """Arenas in CUDA memory through torch, on the device index the program names."""

    def allocate(self, nbytes: int, device: Device) -> torch.Tensor:
        if not torch.cuda.is_available():
            raise DevplanError(
                f"the program places a buffer on {device}, but this machine has no CUDA device; "
                f"register a DeviceAllocator for 'cuda' (devplan.runtime.register_allocator), "
                f"or back it with host memory (devplan run --devices-on-host)"
            )
        return torch.zeros(nbytes, dtype=torch.uint8, device=f"cuda:{device.index}")

    def copy_to_host(self, src: torch.Tensor) -> torch.Tensor:
        return src.to("cpu", copy=True)

    def peak(self, device: Device) -> int | None:
        # torch's caching allocator counts every tensor on the device: kernels' results and the
        # cuBLAS and cuDNN workspaces it hands out, not only the arenas
        return torch.cuda.max_memory_allocated(device.index) if torch.cuda.is_initialized() else None  # type: ignore[no-untyped-call]  # torch declares it untyped

    def reset_peak(self, device: Device) -> None:
        # else nothing is held yet, and torch refuses the device
        if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # torch declares it untyped
            torch.cuda.reset_peak_memory_stats(device.index)


_ALLOCATORS: dict[str, DeviceAllocator] = {"cpu": HostAllocator(), "cuda": TorchCudaAllocator()}


def register_allocator(device_type: str, allocator: DeviceAllocator) -> DeviceAllocator | None:
    """Make `allocator` back every buffer of `device_type`; returns the one it replaces."""
    if device_type not in DEVICE_TYPES:
        raise DevplanError(f"unknown device type {device_type!r}; use one of: {', '.join(DEVICE_TYPES)}")
    previous = _ALLOCATORS.get(device_type)
    _ALLOCATORS[device_type] = allocator
    return previous


def allocator_for(device: Device) -> DeviceAllocator:
    if device.type not in _ALLOCATORS:
        raise DevplanError(
            f"no DeviceAllocator is registered for {device}; "
            f"register one with devplan.runtime.register_allocator({device.type!r}, ...)"
        )
    return _ALLOCATORS[device.type]


@contextlib.contextmanager
def registered(device_type: str, allocator: DeviceAllocator) -> Iterator[DeviceAllocator]:
    """Use `allocator` for `device_type` inside the block, then restore the previous one."""
    previous = register_allocator(device_type, allocator)
    try:
        yield allocator
    finally:
        if previous is None:
            _ALLOCATORS.pop(device_type, None)
        else:
            _ALLOCATORS[device_type] = previous


def reset_peaks(devices: Iterable[Device]) -> None:
    """Start each device's `peak` count afresh (allocators registered without one are skipped)."""
    for device in devices:
        getattr(allocator_for(device), "reset_peak", lambda d: None)(device)


def peaks(devices: Iterable[Device]) -> dict[Device, int | None]:
    """Each device's `peak` since `reset_peaks`, None where its allocator cannot tell."""
    return {device: getattr(allocator_for(device), "peak", lambda d: None)(device) for device in devices}
