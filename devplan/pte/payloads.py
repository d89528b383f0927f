"""What devplan knows of each backend's delegate payloads, by backend id: one registry, so that
reading, checking, inspecting, budgeting and running a program ask it rather than branch on an
id, and a second backend is a module of its own and one `register_payload_format` call."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any, Callable

from devplan.pte import xnnpack
from devplan.spec import DEVPLAN_BACKEND as DEVPLAN

Payload = bytes | memoryview


@dataclass(frozen=True)
class PayloadFormat:
    """One backend's payloads: whether each is an ET12 program devplan plans and its own runtime
    runs; `check` refuses a damaged one in one line naming `where` (ExecuTorch's runtime aborts on
    some); `named_data` gives the keys of the named data it reads, with the bytes it reads there;
    `working_memory` what the backend allocates itself, outside the plan (None: not told);
    `document` names the function (module:function) that documents one for `inspect --delegate`,
    `faults` the one that says where its graph contradicts itself (what its runtime refuses
    without saying where); each is called with (ProgramView, method's plan index, delegate index)."""

    backend: str
    program: bool = False
    check: Callable[[Payload, str], None] = lambda payload, where: None
    named_data: Callable[[Payload], tuple[tuple[str, int], ...]] = lambda payload: ()
    working_memory: Callable[[Payload], xnnpack.WorkingMemory | None] = lambda payload: None
    document: str | None = None
    faults: str | None = None


_FORMATS: dict[str, PayloadFormat] = {
    DEVPLAN: PayloadFormat(DEVPLAN, program=True),
    xnnpack.BACKEND_ID: PayloadFormat(
        xnnpack.BACKEND_ID,
        check=xnnpack.check_graph,
        named_data=xnnpack.named_data,
        working_memory=xnnpack.working_memory,
        document="devplan.inspection.xnngraph:xnngraph_document",
        faults="devplan.inspection.xnnshapes:graph_faults",
    ),
}


def register_payload_format(found: PayloadFormat) -> PayloadFormat | None:
    """Make `found` what devplan knows of its backend's payloads; returns the one it replaces."""
    previous = _FORMATS.get(found.backend)
    _FORMATS[found.backend] = found
    return previous


def payload_format(backend: str) -> PayloadFormat:
    """What devplan knows of `backend`'s payloads: for a backend it does not know, nothing (no
    named data, no working memory told, not an ET12 program, no document)."""
    return _FORMATS.get(backend) or PayloadFormat(backend)


def named_function(named: str) -> Callable[..., Any]:
    """A format's `document` or `faults`: module:function, imported when first called for, so
    that reading a program never imports the inspection that documents a payload."""
    module, function = named.split(":")
    found: Callable[..., Any] = getattr(import_module(module), function)
    return found


def runs_here(backend: str) -> bool:
    """Whether devplan's own runtime runs the backend's delegates (ET12 payloads)."""
    return payload_format(backend).program
