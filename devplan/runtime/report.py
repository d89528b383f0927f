"""`devplan run --json` (docs/run-json.md): what each run returned, summarized."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Mapping

from devplan.documents import DeviceMemory, Latency, Reference, RunDocument, TensorSummary, ValueSummary
from devplan.jsontext import number

if TYPE_CHECKING:
    from devplan.runtime.executor import LoadedMethod
    from devplan.spec import Device

SCHEMA_VERSION: Final = 1


def run_document(
    name: str,
    method: str,
    results: list[list[Any]],
    memory: list[DeviceMemory] | None = None,
    reference: Reference | None = None,
    latency: Latency | None = None,
) -> RunDocument:
    """name: the program's basename; results: the outputs of each run; memory: what each device
    held (`device_memory`), where the run was devplan's; reference: the last run's outputs held
    against a reference's (devplan.runtime.compare); latency: the warm runs' times."""
    document: RunDocument = {
        "schema_version": SCHEMA_VERSION,
        "file": {"name": name},
        "method": method,
        "runs": [[describe(value) for value in outputs] for outputs in results],
    }
    if memory is not None:
        document["memory"] = memory
    if reference is not None:
        document["reference"] = reference
    if latency is not None:
        document["latency"] = latency
    return document


def device_memory(method: LoadedMethod, peaks: Mapping[Device, int | None]) -> list[DeviceMemory]:
    """Per device, in order: the bytes a loaded method and its delegates planned there (their own
    arenas; a window is its caller's bytes), the constants copied there, the most its allocator
    held at once during the load and runs (`peaks`: device -> bytes or None) and what that was
    beyond the two: kernels' own results and library workspaces."""
    planned: dict[Device, int] = {}
    constants: dict[Device, int] = {}
    seen: set[int] = set()
    stack = [method]
    while stack:
        loaded = stack.pop()
        if id(loaded) in seen:
            continue
        seen.add(id(loaded))
        for mem_id, (arena, device) in loaded.arenas.items():
            if mem_id not in loaded.lent:
                planned[device] = planned.get(device, 0) + arena.numel()
        for arena, device in loaded.uploads:
            constants[device] = constants.get(device, 0) + arena.numel()
        stack.extend(loaded.delegates)
    rows: list[DeviceMemory] = []
    for device in sorted(set(planned) | set(constants), key=str):
        peak = peaks.get(device)
        held = planned.get(device, 0) + constants.get(device, 0)
        rows.append(
            {
                "device": str(device),
                "planned": planned.get(device, 0),
                "constants": constants.get(device, 0),
                "peak": peak,
                "beyond_plan": None if peak is None else peak - held,
            }
        )
    return rows


def describe(value: Any) -> TensorSummary | ValueSummary:
    """A tensor as dtype, shape and value range; anything else as itself (NaN and the
    infinities as jsontext.number writes them, so that --json stays JSON)."""
    import torch

    if not isinstance(value, torch.Tensor):
        return {"value": number(value)}
    data = value.double() if value.numel() else torch.zeros(1, dtype=torch.float64)
    return {
        "dtype": str(value.dtype).removeprefix("torch."),
        "shape": list(value.shape),
        "min": number(float(data.min())),
        "max": number(float(data.max())),
        "mean": number(float(data.mean())),
    }
