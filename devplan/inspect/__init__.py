"""Inspect a .pte program: a JSON-able document (document.py), terminal views (render.py),
an SVG picture of each buffer (svg.py) and CI checks (check.py).

    devplan.inspect("model.pte")                  -> the inspection document (a dict)
    devplan.inspect("model.pte", method="forward") -> the same, one method only

Importing this subpackage rebinds `devplan.inspect` from the lazy function to this module,
so the module itself is made callable and both spellings keep working."""
from __future__ import annotations

import os
import sys
import types

__all__ = ["inspect"]


def inspect(source: str | os.PathLike | bytes, *, method: str | None = None) -> dict:
    """Read a program (a path, or the file's bytes) and return its inspection document."""
    # Imported here so that the CLI can list this package's sections without loading the
    # FlatBuffers bindings for every command.
    from devplan.inspect.document import document
    from devplan.pte import read_pte

    pte = read_pte(source)
    # Messages name the path as given; the document keeps the basename so that it does not
    # depend on where the file happened to be.
    return document(pte, os.path.basename(pte.name), method=method)


class _CallableModule(types.ModuleType):
    def __call__(self, source: str | os.PathLike | bytes, *, method: str | None = None) -> dict:
        return inspect(source, method=method)


sys.modules[__name__].__class__ = _CallableModule
