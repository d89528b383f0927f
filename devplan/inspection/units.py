"""Byte counts and names from files as people read them in a terminal."""
from __future__ import annotations

import re

_UNITS = ("KiB", "MiB", "GiB", "TiB")


def size_text(nbytes: int, exact: bool = False) -> str:
    """'3.4 KiB' style (binary units, one decimal), or the exact count as 'N B' when exact."""
    if exact or abs(nbytes) < 1024:
        return f"{nbytes} B"
    value, unit = nbytes / 1024, 0
    while abs(value) >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{value:.1f} {_UNITS[unit]}"


def exact_size_text(nbytes: int) -> str:
    """A size where the exact bytes matter (checks, diffs, budgets): '36.2 KiB (37,068 bytes)';
    below a KiB, '768 B' is exact already."""
    return size_text(nbytes) if abs(nbytes) < 1024 else f"{size_text(nbytes)} ({nbytes:,} bytes)"


def natural_key(name: str) -> tuple:
    """Sorts names as people count: 'h.2' before 'h.10' (each run of digits compares as its number)."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part)


def printable(text: str) -> str:
    """Names from a file may hold newlines or terminal escape sequences: written as escapes,
    they can neither split a line of output nor clear or recolour the user's terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def printable_tree(value):
    """`value` (a document of dicts, lists and scalars) with every string made printable.
    Strings that are printable already, and lists of numbers, are kept as they are: a
    100,000-tensor document took seconds to copy."""
    kind = type(value)
    if kind is str:
        return value if value.isprintable() else printable(value)
    if kind is dict:
        return {printable_tree(k): printable_tree(v) for k, v in value.items()}
    if kind is list:
        return value if all(type(v) is int for v in value) else [printable_tree(v) for v in value]
    return value
