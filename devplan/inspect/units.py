"""Byte counts as people read them."""
from __future__ import annotations

_UNITS = ("KiB", "MiB", "GiB", "TiB")


def size_text(nbytes: int, exact: bool = False) -> str:
    """'3.4 KiB' style (binary units, one decimal), or the exact count as 'N B' when exact."""
    if exact or abs(nbytes) < 1024:
        return f"{nbytes} B"
    value, unit = nbytes / 1024, 0
    while abs(value) >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{value:.1f} {_UNITS[unit]}"
