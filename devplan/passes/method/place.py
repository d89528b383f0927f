"""A delegate payload on its backend's device."""

from __future__ import annotations

from dataclasses import replace

from devplan.ir.method import Method
from devplan.spec import Device, TensorSpec


def on_device(method: Method, device: Device) -> Method:
    """A payload's method: every tensor it computes lives on its backend's device (its
    weights are stored data, read wherever it runs)."""
    return method.with_specs(
        {
            i: replace(v, device=device)
            for i, v in enumerate(method.values)
            if isinstance(v, TensorSpec) and not v.constant
        }
    )
