"""The adopt stage: the delegate calls ExecuTorch's backends compiled (passes/export/backends.py)
taken in as devplan's delegates, each with its backend and payload, so that the stages below
treat them as any delegate and never plan their inside. Imports no ExecuTorch."""

from __future__ import annotations

from dataclasses import replace

from devplan.backend import TARGET_DEVICE, Adopted
from devplan.errors import DevplanError
from devplan.ir.lowered import ForeignCall, Lowered, Payload
from devplan.spec import CPU, Device


def adopt_delegates(low: Lowered) -> Lowered:
    """The Lowered program's backends and payloads for the delegate calls ExecuTorch's
    backends made (call_modules of ForeignCall): planned on the device their compile spec
    names (`target_device`), else the host."""
    backends, payloads = dict(low.backends), dict(low.payloads)
    for node in low.gm.graph.nodes:
        if node.op != "call_module" or not isinstance(call := low.gm.get_submodule(node.target), ForeignCall):
            continue
        specs = dict(call.compile_specs)
        try:
            device = Device.parse(specs[TARGET_DEVICE].decode()) if TARGET_DEVICE in specs else CPU
        except (DevplanError, UnicodeDecodeError):
            raise DevplanError(
                f"{call.backend_id}: compile spec target_device {specs[TARGET_DEVICE]!r} names no "
                f"device devplan plans for; use cpu or cuda:N"
            ) from None
        backends[node.target] = Adopted(device, call.backend_id, call.compile_specs)
        payloads[node.target] = Payload(call.processed, None, 0, 0, call.named_data, call.handles)
    return replace(low, backends=backends, payloads=payloads)
