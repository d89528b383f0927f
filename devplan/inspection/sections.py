"""The named parts of an inspection: which the terminal shows by default, and which lists of
the document each one needs, so that --section trims --json the same way it trims the view."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from devplan.documents import InspectDocument, InspectedMethod, InspectedTensor
from devplan.inspection.sources import block_of
from devplan.units import size_text

SECTIONS = ("summary", "segments", "buffers", "peak", "tensors", "instructions", "delegates", "layout")
# The overview: what a program holds and where its memory goes. Per-value and
# per-instruction listings grow with the model, so they are asked for by name.
DEFAULT_SECTIONS = ("summary", "buffers", "peak", "delegates", "layout")
ALL = "all"

# Per-method lists of the document that each section is drawn from; every other key stays.
_METHOD_LISTS = {
    "summary": (),
    "segments": (),  # the file's, which every document keeps
    "buffers": ("buffers", "delegates"),  # what the buffers leave out: backends' own memory
    "peak": ("peak", "buffers"),
    "tensors": ("tensors",),
    "instructions": ("instructions", "operators", "delegates"),  # a delegate call is shown by its backend
    "delegates": ("delegates",),
    "layout": ("buffers", "tensors"),
}


def resolve(names: Iterable[str]) -> tuple[str, ...]:
    """Section names in display order; 'all' stands for every section."""
    chosen = set(names)
    return SECTIONS if ALL in chosen else tuple(section for section in SECTIONS if section in chosen)


def only(doc: InspectDocument, sections: Iterable[str]) -> InspectDocument:
    """doc with each method keeping only the lists that the sections need."""
    keep = {key for section in sections for key in _METHOD_LISTS[section]}
    dropped = {key for keys in _METHOD_LISTS.values() for key in keys} - keep
    methods = [
        cast(InspectedMethod, {key: value for key, value in method.items() if key not in dropped})
        for method in doc["methods"]
    ]
    return {**doc, "methods": methods}


def matching(doc: InspectDocument, module: str | None = None, min_size: int | None = None) -> InspectDocument:
    """doc with each list of tensors (a method's tensors, and those held at each peak) keeping
    only those from `module` and of `min_size` bytes or more, and its instructions only those
    `module` made (--module, --min-size); the rest of each method (buffers, the peak's shares
    by block) stays as it was. A tensor is from PREFIX when its module's path or the name the
    program gives it (a weight, a KV cache) is PREFIX or lies under it, or when PREFIX is its
    block ("(state)", "(inputs)")."""
    if module is None and min_size is None:
        return doc
    methods = []
    for method in doc["methods"]:
        kept = {t["value"] for t in method.get("tensors", ()) if _wanted(t, module, min_size)}
        trimmed = dict(method)
        if "tensors" in method:
            trimmed["tensors"] = [t for t in method["tensors"] if t["value"] in kept]
        if "peak" in method:
            trimmed["peak"] = [
                {**entry, "tensors": [t for t in entry["tensors"] if t["value"] in kept]} for entry in method["peak"]
            ]
        if "instructions" in method and module is not None:
            trimmed["instructions"] = [row for row in method["instructions"] if _under(row["module"], module)]
        methods.append(cast(InspectedMethod, trimmed))
    return {**doc, "methods": methods}


def _wanted(tensor: InspectedTensor, module: str | None, min_size: int | None) -> bool:
    if min_size is not None and tensor["nbytes"] < min_size:
        return False
    return (
        module is None
        or any(_under(name, module) for name in (tensor["module"], tensor.get("name")))
        or (block_of(tensor) == module)
    )


def _under(path: str | None, prefix: str) -> bool:
    """Whether a module path is prefix or lies under it: layers.1 holds layers.1.mlp, not layers.10."""
    return path is not None and (path == prefix or path.startswith(prefix + "."))


def focus_line(module: str | None, smallest: int | None, exact_bytes: bool) -> str:
    """'listing only the tensors and instructions from layers.1, tensors of 4.0 KiB or more'."""
    size = f"of {size_text(smallest, exact_bytes)} or more" if smallest is not None else ""
    if module is None:
        return f"listing only the tensors {size}"
    return f"listing only the tensors and instructions from {module}" + (f", tensors {size}" if size else "")
