"""The inspection of a .pte program: a JSON-able document (document.py; the bounds it
states, bounds.py), terminal views (render.py), an SVG picture of each buffer (svg.py, its
axis, labels and text measure in svg_axis.py, svg_labels.py, svg_text.py) and CI
checks (check.py).

    devplan.inspect("model.pte")                  -> the inspection document (a dict, devplan.documents.InspectDocument)
    devplan.inspect("model.pte", method="forward") -> the same, one method only
    devplan.inspect("model.pte", delegate=0)      -> the program inside delegate 0 of the
                                                     (first, or named) method; for an ExecuTorch
                                                     XNNPACK delegate, its graph's document
                                                     (devplan.documents.XnnpackDocument)

The package is named for the noun so that `devplan.inspect`, the verb, is always the function."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    from devplan.documents import InspectDocument, XnnpackDocument
    from devplan.pte import PteFile

__all__ = ["inspect"]


@overload
def inspect(
    source: str | os.PathLike[str] | bytes | PteFile,
    *,
    method: str | None = None,
    delegate: None = None,
    data: str | os.PathLike[str] | None = None,
) -> InspectDocument: ...


@overload
def inspect(
    source: str | os.PathLike[str] | bytes | PteFile,
    *,
    method: str | None = None,
    delegate: int | None,
    data: str | os.PathLike[str] | None = None,
) -> InspectDocument | XnnpackDocument: ...


def inspect(
    source: str | os.PathLike[str] | bytes | PteFile,
    *,
    method: str | None = None,
    delegate: int | None = None,
    data: str | os.PathLike[str] | None = None,
) -> InspectDocument | XnnpackDocument:
    """Read a program (a path, or the file's bytes) and return its inspection document; with
    `delegate`, the document of the ET12 program that delegate's payload holds, or of the graph
    an ExecuTorch XNNPACK delegate's payload holds; with `data`, the .ptd holding the weights it
    keeps outside, checked against it."""
    # Imported here so that the CLI can list this package's sections without loading the
    # FlatBuffers bindings for every command.
    from devplan.inspection.document import document
    from devplan.pte import read_pte

    pte = read_pte(source, data=data)
    if delegate is not None:
        payload = _payload_program(pte, method, delegate)
        if not isinstance(payload, tuple):
            return payload
        pte, method = payload
    # Messages name the path as given; the document keeps the basename so that it does not
    # depend on where the file happened to be.
    return document(pte, os.path.basename(pte.name), method=method)


def _payload_program(pte: PteFile, method: str | None, delegate: int) -> XnnpackDocument | tuple[PteFile, None]:
    """(the payload's program, no method) for an ET12 payload; its backend's document for another
    (XNNPACK's graph: pte.payloads' `document`)."""
    from devplan.errors import DevplanError
    from devplan.pte.header import is_program
    from devplan.pte.payloads import named_function, payload_format
    from devplan.pte.program_view import program_view

    program = program_view(pte)
    names = list(program.method_names)
    if method is not None and method not in names:
        raise DevplanError(
            f"{program.name}: no method {method!r}; the program's methods are: {', '.join(names) or 'none'}"
        )
    plan_index = names.index(method) if method is not None else 0
    if not is_program(program.payload(plan_index, delegate)):
        documented = payload_format(program.methods[plan_index].delegates[delegate].id).document
        if documented is not None:
            shown: XnnpackDocument = named_function(documented)(program, plan_index, delegate)
            return shown
        raise DevplanError(
            f"{program.name} delegate {delegate}: the payload is not an ET12 program but the backend's "
            f"own format; devplan shows programs (devplan's DevplanDelegate payloads) and XNNPACK's graphs only"
        )
    return program.payload_program(plan_index, delegate), None
