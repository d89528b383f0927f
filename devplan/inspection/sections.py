"""The named parts of an inspection: which the terminal shows by default, and which lists of
the document each one needs, so that --section trims --json the same way it trims the view."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from devplan.documents import InspectDocument, InspectedMethod

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
