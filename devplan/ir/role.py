"""What a method is lowered as: one of the program's own methods, run on the host, or a
delegate's payload, run by its backend on the backend's device with its caller's tensors as
its inputs and outputs. The stages that treat the two apart (build, place, inplace, plan) all
read this one role."""

from __future__ import annotations

from dataclasses import dataclass

from devplan.spec import CPU, Device


@dataclass(frozen=True)
class Role:
    home: Device = CPU  # where the method's kernels run
    # a delegate's payload: every tensor it computes on `home`, its inputs and outputs its
    # caller's (left unplanned where they can be), no budget of its own, no device_io
    payload: bool = False

    @classmethod
    def payload_on(cls, device: Device) -> "Role":
        return cls(device, payload=True)


PROGRAM = Role()  # the program's own methods
