"""Delegates whose working memory is their backend's own: ExecuTorch's backends (XNNPACK's
among them) allocate their intermediates at run time, outside every buffer the program plans.
A convnet that goes whole into one XNNPACK delegate plans only its input and output, so its
planned bytes alone read as a saving that is not one. The document says so per delegate, with
the bytes where the payload tells them (XNNPACK's graph does), and a budget on
`DEVICE+backends` counts them on top of the device's planned buffers."""

from __future__ import annotations

from typing import Callable

from devplan.documents import InspectedDelegate, InspectedMethod, WorkingMemory
from devplan.errors import DevplanError
from devplan.planning.budget import BACKENDS
from devplan.pte.header import is_program
from devplan.pte.payloads import payload_format
from devplan.units import counted, exact_size_text, printable


def working_memory(backend: str, payload: bytes | memoryview) -> WorkingMemory | None:
    """A delegate's document entry `working_memory`: None when its payload is an ET12 program
    (devplan plans its buffers: payload_buffers or a window), else the memory its backend
    allocates itself: `bytes` (an upper bound, `bound` "upper") and `values` counted from its
    payload, both None when the payload does not say."""
    if is_program(payload):
        return None
    found = payload_format(backend).working_memory(payload)
    if found is None:
        return {"bytes": None, "values": None, "bound": None}
    return {"bytes": found.nbytes, "values": found.values, "bound": "upper"}


def device_of(delegate: InspectedDelegate) -> str:
    """Where a delegate runs: its target device, else the host (ExecuTorch's backends' default)."""
    return delegate["target_device"] or "cpu"


def outside(method: InspectedMethod) -> list[InspectedDelegate]:
    """The method's delegates whose working memory is outside its plan, in index order."""
    return [d for d in method["delegates"] if d.get("working_memory") is not None]


def memory_of(delegate: InspectedDelegate) -> WorkingMemory:
    """The working memory of a delegate `outside` returned: the document's field is optional
    (absent or None where the plan holds all of it), so it is narrowed here, once."""
    memory = delegate.get("working_memory")
    if memory is None:
        raise ValueError(f"delegate {delegate['index']} ({delegate['id']}) has no working memory of its own")
    return memory


def backend_bytes(method: InspectedMethod, device: str, budget: str) -> int:
    """The working memory of the method's delegates on `device` whose backends allocate it
    themselves; a delegate whose payload does not say is refused, since `budget` cannot count it."""
    total = 0
    for d in outside(method):
        if device_of(d) != device:
            continue
        stated = memory_of(d)["bytes"]
        if stated is None:
            raise DevplanError(
                f"--budget {budget}: {method['name']} delegate {d['index']} ({d['id']}) allocates its "
                f"working memory itself, and its payload does not say how much; budget {device} alone"
            )
        total += stated
    return total


def outside_text(method_name: str, delegate: InspectedDelegate, sized: Callable[[int], str] = exact_size_text) -> str:
    """One line: which delegate, that its memory is outside the plan, and how much where known."""
    memory, device = memory_of(delegate), device_of(delegate)
    head = (
        f"{method_name} delegate {delegate['index']} ({delegate['id']}, {device}): working memory outside the "
        f"plan, allocated by the backend"
    )
    if (stated := memory["bytes"]) is None or (values := memory["values"]) is None:  # a payload says both or neither
        return printable(f"{head}; its payload does not say how much")
    return printable(
        f"{head}: up to {sized(stated)}, {counted(values, 'intermediate')} from its graph "
        f"summed; --budget {device}{BACKENDS}=SIZE counts it"
    )
